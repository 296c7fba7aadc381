//! `cordon policy explain POLICY --subject WHO`: what one subject of an HTTP server may do,
//! worked out the way the server works it out (no server needed).
//!
//! The subject is written as the audit log names it (`bearer:<holder>`, `bearer`,
//! `jwt:<issuer>#<sub>`). A token file's holder brings its scopes and groups from the file
//! (`--http-token-file`); for a JWT subject the token's `scope` and group claims are given
//! with `--scopes` and `--groups`. The answer: which tools its scopes allow
//! (`[server.http.scopes]`), which policy its groups select (`[[server.http.group_policies]]`,
//! only with `serve --workspaces`), where its workspace is, and then that policy explained in
//! full.
//!
//! Owns parsing a subject's name and the summary; the policy's own explanation is
//! `cli::policy::explain`'s.

use crate::policy::Policy;
use crate::server::http::auth::Subject;
use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Why a subject cannot be explained; each says what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum SubjectError {
    #[error(
        "--subject {0:?} is not a subject as the audit log names it: write bearer, \
         bearer:<holder> (a token file's holder) or jwt:<issuer>#<sub>"
    )]
    Malformed(String),
    #[error("cannot read the token file {}: {source}", path.display())]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the token file {}: {why}", path.display())]
    Entries { path: PathBuf, why: String },
    #[error(
        "{holder} is not a holder of {} (its holders: {known})", path.display()
    )]
    NoSuchHolder {
        holder: String,
        path: PathBuf,
        known: String,
    },
    #[error("the policy of group `{group}`: {source}")]
    GroupPolicy {
        group: String,
        source: Box<crate::policy::PolicyError>,
    },
}

/// What is known of the subject: its name and what its credentials say.
#[derive(Debug)]
pub struct SubjectQuery {
    pub subject: Subject,
    /// None: every scope (the single token, or a holder with `*`).
    pub scopes: Option<BTreeSet<String>>,
    pub groups: BTreeSet<String>,
}

impl SubjectQuery {
    /// The subject `name` with what `--http-token-file`, `--scopes` and `--groups` say.
    pub fn new(
        name: &str,
        token_file: Option<&Path>,
        scopes: Option<&str>,
        groups: &[String],
    ) -> Result<Self, SubjectError> {
        let subject = parse_subject(name)?;
        let mut query = Self {
            scopes: scopes.map(|s| s.split_ascii_whitespace().map(str::to_owned).collect()),
            groups: groups.iter().filter(|g| !g.is_empty()).cloned().collect(),
            subject,
        };
        if let (Subject::TokenHolder(holder), Some(path)) = (&query.subject, token_file) {
            let text = std::fs::read_to_string(path).map_err(|source| SubjectError::TokenFile {
                path: path.to_owned(),
                source,
            })?;
            let holders = crate::server::http::token_file::parse(&text).map_err(|why| {
                SubjectError::Entries {
                    path: path.to_owned(),
                    why,
                }
            })?;
            let found = holders.iter().find(|h| &h.name == holder).ok_or_else(|| {
                SubjectError::NoSuchHolder {
                    holder: holder.clone(),
                    path: path.to_owned(),
                    known: holders
                        .iter()
                        .map(|h| h.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            })?;
            query.scopes = found.scopes.clone();
            query.groups.extend(found.groups.iter().cloned());
        }
        if matches!(query.subject, Subject::StaticToken) {
            query.scopes = None;
        }
        Ok(query)
    }
}

/// `bearer`, `bearer:<holder>` or `jwt:<issuer>#<sub>` (with the log's `%XX` escapes).
pub(crate) fn parse_subject(name: &str) -> Result<Subject, SubjectError> {
    let malformed = || SubjectError::Malformed(name.to_owned());
    if name == "bearer" {
        return Ok(Subject::StaticToken);
    }
    if let Some(holder) = name.strip_prefix("bearer:") {
        let ok = !holder.is_empty()
            && holder.len() <= 64
            && holder
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        return ok
            .then(|| Subject::TokenHolder(holder.to_owned()))
            .ok_or_else(malformed);
    }
    let rest = name.strip_prefix("jwt:").ok_or_else(malformed)?;
    let (issuer, sub) = rest.split_once('#').ok_or_else(malformed)?;
    let (issuer, sub) = (
        unescape(issuer).ok_or_else(malformed)?,
        unescape(sub).ok_or_else(malformed)?,
    );
    if issuer.is_empty() || sub.is_empty() {
        return Err(malformed());
    }
    Ok(Subject::Jwt { issuer, sub })
}

/// Undoes the audit log's percent-encoding of `%`, `#` and control characters.
fn unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The summary for `query` on a server running `server` (its `[server.http]` decides), with
/// `workspaces` the `--workspaces` root when there is one; and the policy the subject's calls
/// run under, for the full explanation after it.
pub fn explain_subject(
    server: &Policy,
    query: &SubjectQuery,
    workspaces: Option<&Path>,
) -> Result<(String, Policy), SubjectError> {
    let http = &server.server.http;
    let mut o = String::new();
    let _ = writeln!(o, "Subject {}", query.subject);
    let _ = writeln!(
        o,
        "  Scopes: {}. Groups: {}.",
        match &query.scopes {
            None => "every scope".to_owned(),
            Some(s) if s.is_empty() => "none".to_owned(),
            Some(s) => s.iter().cloned().collect::<Vec<_>>().join(" "),
        },
        if query.groups.is_empty() {
            "none".to_owned()
        } else {
            query.groups.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    );
    let (allowed, refused): (Vec<_>, Vec<_>) = http.scopes.iter().partition(|(_, scope)| {
        query
            .scopes
            .as_ref()
            .is_none_or(|granted| granted.contains(*scope))
    });
    let list = |tools: &[(&String, &String)]| {
        tools
            .iter()
            .map(|(tool, scope)| format!("{tool} ({scope})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if allowed.is_empty() {
        let _ = writeln!(
            o,
            "  Tools: none. Every request is refused with 403 insufficient_scope."
        );
    } else {
        let _ = writeln!(o, "  Tools it sees and may call: {}.", list(&allowed));
        if !refused.is_empty() {
            let _ = writeln!(
                o,
                "  Tools hidden from it (a call is refused naming the scope): {}.",
                list(&refused)
            );
        }
    }
    let selected = crate::server::workspaces::selected_group(&http.group_policies, &query.groups);
    let policy = match selected {
        Some(entry) if workspaces.is_some() => {
            let _ = writeln!(
                o,
                "  Its calls run under policy `{}`: it is in group `{}` \
                 ([[server.http.group_policies]], first match).",
                entry.policy, entry.group
            );
            Policy::load(&entry.policy).map_err(|source| SubjectError::GroupPolicy {
                group: entry.group.clone(),
                source: Box::new(source),
            })?
        }
        Some(entry) => {
            let _ = writeln!(
                o,
                "  Its group `{}` selects policy `{}`, but only `serve --workspaces` runs \
                 subjects under their groups' policies: on a shared workspace every call runs \
                 under `{}`.",
                entry.group, entry.policy, server.name
            );
            server.clone()
        }
        None => {
            let _ = writeln!(
                o,
                "  Its calls run under the server's policy `{}` (no \
                 [[server.http.group_policies]] group of it).",
                server.name
            );
            server.clone()
        }
    };
    match workspaces {
        Some(root) => {
            let _ = writeln!(
                o,
                "  Its workspace: {} (its own sandbox, proxy, home, jobs and audit stream; \
                 no other subject's calls see it).",
                root.join(crate::server::workspaces::directory_name(&query.subject))
                    .display()
            );
        }
        None => {
            let _ = writeln!(
                o,
                "  Its workspace: the server's one workspace, shared with every other subject \
                 (give serve --workspaces DIR for one per subject)."
            );
        }
    }
    Ok((o, policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_read_as_the_audit_log_writes_them() {
        let jwt = Subject::Jwt {
            issuer: "https://idp#1".into(),
            sub: "a%b".into(),
        };
        assert_eq!(parse_subject(&jwt.to_string()).unwrap(), jwt);
        assert_eq!(parse_subject("bearer").unwrap(), Subject::StaticToken);
        assert_eq!(
            parse_subject("bearer:rita").unwrap(),
            Subject::TokenHolder("rita".into())
        );
        for bad in [
            "rita",
            "bearer:",
            "bearer:a/b",
            "jwt:nohash",
            "jwt:#x",
            "jwt:i#%zz",
        ] {
            assert!(parse_subject(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reviewer_gets_its_groups_policy_and_only_its_scopes_tools() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("team.toml");
        std::fs::write(
            &file,
            "[[server.http.group_policies]]\ngroup = \"reviewers\"\npolicy = \"strict\"\n",
        )
        .unwrap();
        let server = Policy::load(file.to_str().unwrap()).unwrap();
        let query = SubjectQuery {
            subject: Subject::TokenHolder("rita".into()),
            scopes: Some(BTreeSet::from(["cordon:read".to_owned()])),
            groups: BTreeSet::from(["reviewers".to_owned()]),
        };
        let (text, policy) = explain_subject(&server, &query, Some(Path::new("/srv/ws"))).unwrap();
        assert_eq!(policy.name, "strict");
        assert!(
            text.contains("Tools it sees and may call: read_file (cordon:read)."),
            "{text}"
        );
        assert!(text.contains("shell_exec (cordon:exec)"), "hidden: {text}");
        assert!(text.contains("/srv/ws/bearer_rita-"), "{text}");
        let (shared, policy) = explain_subject(&server, &query, None).unwrap();
        assert_eq!(
            policy.name, server.name,
            "no group policy on a shared workspace"
        );
        assert!(shared.contains("only `serve --workspaces`"), "{shared}");
    }
}
