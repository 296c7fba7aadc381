//! The one `*` wildcard every policy pattern uses: `filesystem.deny` file names, protected-path
//! segments, command-rule program names, L7 rule paths and git push refs.
//!
//! Owns the matching only. `*` matches any run of characters (none included, `/` included);
//! every other character matches itself; there is no escape and no `?` or `[…]`. Where a `*`
//! must stay within one path component (deny entries, protected paths), the caller splits
//! the path and matches component by component, so this module knows nothing of paths.
//!
//! Matching runs in time linear in the pattern and the text: command words and request paths
//! are chosen by whoever a rule is meant to stop, so a pattern with many stars must not cost
//! exponential (or quadratic) work on them.

/// Whether `text` matches `pattern`, where `*` matches any run of characters.
///
/// The pattern is split at its stars: the first piece must begin the text and the last end
/// it (without overlapping), and each piece between must appear in order in what is left.
/// Taking the leftmost occurrence of each middle piece is always right (a later one leaves
/// less room for the rest), so no choice is ever revisited; `str::find` is linear, and each
/// search starts where the previous one ended.
pub fn matches(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or_default();
    let Some(last) = pieces.next_back() else {
        // No star: the pattern is a literal.
        return pattern == text;
    };
    if text.len() < first.len() + last.len() || !text.starts_with(first) || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in pieces {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn glob_star_matches_any_run_and_the_rest_is_literal() {
        assert!(matches("mkfs*", "mkfs.ext4"));
        assert!(matches("mkfs*", "mkfs"));
        assert!(!matches("mkfs*", "xmkfs"));
        assert!(matches("*sh", "bash"));
        assert!(matches("ssh_host_*_key", "ssh_host_ed25519_key"));
        assert!(!matches("ssh_host_*_key", "ssh_host_ed25519_key.pub"));
        assert!(matches("shadow", "shadow"));
        assert!(!matches("shadow", "shadow-"));
        assert!(matches("*", ""));
        assert!(matches("**", ""));
        assert!(!matches("", "x"));
        assert!(matches("", ""));
    }

    #[test]
    fn glob_star_crosses_slashes_callers_split_paths_themselves() {
        assert!(matches("/repos/acme/*", "/repos/acme/x/pulls"));
        assert!(matches("*.json", "a/b.json"));
        assert!(matches("refs/heads/agent/*", "refs/heads/agent/x"));
        assert!(!matches("refs/heads/agent/*", "refs/heads/main"));
    }

    #[test]
    fn glob_two_stars_need_their_pieces_in_order_without_overlap() {
        assert!(matches("a*b*c", "aXbYc"));
        assert!(!matches("a*b*c", "aXcYb"));
        assert!(matches("a*b*c", "abc"));
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("ab*ba", "abba"));
        assert!(matches("*a*a", "aa"));
        assert!(!matches("*a*a", "a"));
        assert!(matches("ä*ö*ü", "äxöyü"));
    }

    #[test]
    fn glob_many_stars_against_a_long_word_take_linear_time() {
        // The command rules' old recursive matcher took time exponential in the stars here.
        let pattern = format!("{}b", "*a".repeat(64));
        let text = "a".repeat(100_000);
        assert!(!matches(&pattern, &text));
        assert!(matches(&pattern, &format!("{text}b")));
    }
}
