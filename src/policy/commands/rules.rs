//! Command rules: a small pattern language over a simple command's argv, and the decision
//! (`allow`, `ask`, `deny`) for a whole command line.
//!
//! Owns the rule schema as written in the policy (`[[commands.rules]]`), its validation
//! (every rule's `examples.match` must match and `examples.not_match` must not, checked when
//! the policy loads) and [`CommandRules::decide`]. Reading shell text is
//! `crate::parser::bash`'s job; asking the user is the server's.
//!
//! The rules are a *courtesy layer*: they stop destructive actions that the kernel confinement
//! allows (Landlock lets a command delete the whole workspace, because the workspace is
//! writable) and make the agent ask first for others. They are not a security boundary:
//! `crate::parser::bash` lists the forms they cannot see through, and a command they do not
//! catch still runs confined.

use crate::parser::bash::{Analysis, SimpleCommand, program_name};
use serde::{Deserialize, Serialize};

/// What happens to a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

/// One `[[commands.rules]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// Spanned so load errors can cite the line of the rule.
    pub name: toml::Spanned<String>,
    pub decision: Decision,
    pub justification: String,
    #[serde(rename = "match")]
    pub pattern: Pattern,
    pub examples: Examples,
}

/// Command lines a rule must and must not match; checked when the policy loads.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Examples {
    #[serde(rename = "match")]
    pub matches: Vec<String>,
    pub not_match: Vec<String>,
}

/// What a simple command must look like for a rule to apply. Every field given must hold
/// (AND); within a list, one entry is enough (OR). Field by field: `policies/README.md`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Pattern {
    /// The program's name (last path component of argv[0]); `*` matches any run of
    /// characters (`mkfs*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Vec<String>>,
    /// Every entry must be present among the options. An entry is `-r|-R|--recursive`:
    /// alternatives split by `|`. A one-letter short option is also found inside a cluster
    /// (`-rf`), a long option also as `--name=value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_flags: Option<Vec<String>>,
    /// At least one entry must be present among the options (same entry syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_flag: Option<Vec<String>>,
    /// Some operand (not an option) equals one of these, compared after removing trailing `/`
    /// and leading `./` (`~/` is `~`, `./*` is `*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_arg: Option<Vec<String>>,
    /// Some argument (option or operand) starts with one of these (`of=/dev/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg_prefix: Option<Vec<String>>,
    /// Exceptions: the rule does not apply when some argument equals one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_arg: Option<Vec<String>>,
    /// The command's output reaches one of these programs (`*` allowed): a later stage of its
    /// pipeline, or the command whose argument is the `$(…)`/`<(…)` it runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piped_into: Option<Vec<String>>,
    /// true: the command calls the shell function it is defined in (the fork-bomb shape
    /// `:(){ :|:& };:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_enclosing_function: Option<bool>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuleError {
    #[error("line {line}: rule `{name}`: {message}")]
    Invalid {
        line: usize,
        name: String,
        message: String,
    },
    /// An example that does not behave as listed, found after loading (the analysis runs in
    /// the parser worker), so it names the policy file too.
    #[error("{origin}: field `commands.rules`: line {line}: rule `{name}`: {message}")]
    Example {
        origin: String,
        line: usize,
        name: String,
        message: String,
    },
}

/// A validated rule.
#[derive(Debug, Clone, Serialize)]
pub struct Rule {
    pub name: String,
    pub decision: Decision,
    pub justification: String,
    #[serde(rename = "match")]
    pub pattern: Pattern,
    pub examples: Examples,
    /// The policy file the rule was written in and its line there, when known, for messages.
    #[serde(skip)]
    pub origin: String,
    #[serde(skip)]
    pub line: usize,
}

/// The `[commands]` section, validated.
#[derive(Debug, Clone, Serialize)]
pub struct CommandRules {
    /// For commands no rule can judge: dynamic program names, unparsable input, scripts
    /// nested too deep.
    pub on_unknown: Decision,
    /// For command lines the parser worker could not analyse at all (it crashed, hung or hit
    /// a limit on them): no rule could look at any part of the line.
    pub on_analysis_failure: Decision,
    pub rules: Vec<Rule>,
}

/// Why a rule (or `on_unknown`) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// The rule's name, or `on_unknown`.
    pub rule: String,
    pub justification: String,
    /// The simple command (after unwrapping) or the text it is about.
    pub command: String,
}

/// The decision for a whole command line: the most severe over its simple commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    /// None when nothing matched and nothing was unknown (plain allow).
    pub reason: Option<Reason>,
}

/// Name under which `on_unknown` decisions are reported and audited.
pub(crate) const ON_UNKNOWN: &str = "on_unknown";

/// Name under which `on_analysis_failure` decisions are reported and audited.
pub(crate) const ON_ANALYSIS_FAILURE: &str = "on_analysis_failure";

/// The default of `commands.on_analysis_failure`. Not `allow`: a line crafted to crash the
/// analysis would otherwise slip past every deny rule; not `deny`: an honest command that
/// trips a grammar bug should not be lost for good when someone can be asked.
pub(crate) const DEFAULT_ON_ANALYSIS_FAILURE: Decision = Decision::Ask;

impl CommandRules {
    /// Validates raw rules: names unique, justification and match non-empty, examples present
    /// and passing. `source` is the TOML text the spans point into (for line numbers).
    pub fn compile(
        on_unknown: Decision,
        raw: Vec<RawRule>,
        source: Option<&str>,
    ) -> Result<Self, RuleError> {
        let mut rules: Vec<Rule> = Vec::with_capacity(raw.len());
        for r in raw {
            let line = source
                .map(|s| s[..r.name.span().start.min(s.len())].matches('\n').count() + 1)
                .unwrap_or(0);
            let name = r.name.into_inner();
            let fail = |message: String| RuleError::Invalid {
                line,
                name: name.clone(),
                message,
            };
            if name.trim().is_empty() {
                return Err(fail("`name` is empty".into()));
            }
            if rules.iter().any(|other| other.name == name) {
                return Err(fail("another rule has the same name".into()));
            }
            if r.justification.trim().is_empty() {
                return Err(fail(
                    "`justification` is empty: say why the rule exists".into(),
                ));
            }
            r.pattern.check().map_err(fail)?;
            if r.examples.matches.is_empty() || r.examples.not_match.is_empty() {
                return Err(fail(
                    "needs at least one `examples.match` and one `examples.not_match` entry".into(),
                ));
            }
            rules.push(Rule {
                name: name.clone(),
                decision: r.decision,
                justification: r.justification,
                pattern: r.pattern,
                examples: r.examples,
                origin: String::new(),
                line,
            });
        }
        Ok(Self {
            on_unknown,
            on_analysis_failure: DEFAULT_ON_ANALYSIS_FAILURE,
            rules,
        })
    }

    /// Every example command line of every rule (match and not_match), each once, for one
    /// batch through the parser worker before [`Self::verify_examples`].
    pub fn example_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = Vec::new();
        for rule in &self.rules {
            for l in rule.examples.matches.iter().chain(&rule.examples.not_match) {
                if !lines.contains(l) {
                    lines.push(l.clone());
                }
            }
        }
        lines
    }

    /// Checks that every rule matches each of its `examples.match` lines and none of its
    /// `examples.not_match` lines. `analyzed` gives the analysis of an example line (the
    /// parser worker's, looked up; the grammar never runs in the caller).
    pub fn verify_examples(
        &self,
        analyzed: &dyn Fn(&str) -> Option<Analysis>,
    ) -> Result<(), RuleError> {
        for rule in &self.rules {
            let fail = |message: String| RuleError::Example {
                origin: rule.origin.clone(),
                line: rule.line,
                name: rule.name.clone(),
                message,
            };
            let analysis = |example: &str| {
                analyzed(example).ok_or_else(|| {
                    fail(format!(
                        "example `{example}` could not be analysed by the parser worker"
                    ))
                })
            };
            for example in &rule.examples.matches {
                if rule.first_match(&analysis(example)?).is_none() {
                    return Err(fail(format!(
                        "example `{example}` is listed under examples.match but the rule does not match it"
                    )));
                }
            }
            for example in &rule.examples.not_match {
                if let Some(c) = rule.first_match(&analysis(example)?) {
                    return Err(fail(format!(
                        "example `{example}` is listed under examples.not_match but the rule matches it (at `{}`)",
                        c.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Records where each rule was written: `sites` lists (origin, rule name, line) of every
    /// policy file's rules, child first; the first site of a name wins (a child's list
    /// replaces its parent's).
    pub fn locate(&mut self, sites: &[(String, String, usize)]) {
        for rule in &mut self.rules {
            if let Some((origin, _, line)) = sites.iter().find(|(_, n, _)| *n == rule.name) {
                rule.origin = origin.clone();
                rule.line = *line;
            }
        }
    }

    /// Whether [`Self::decide`] can say anything but `allow`; when it cannot, the command
    /// line need not be analysed at all.
    pub fn needs_analysis(&self) -> bool {
        !self.rules.is_empty() || self.on_unknown != Decision::Allow
    }

    /// The verdict for a command line whose analysis failed (`why`): `on_analysis_failure`.
    pub fn decide_unanalysed(&self, command_line: &str, why: &str) -> Verdict {
        let text = crate::text::at_most_chars(command_line, 80).to_owned();
        Verdict {
            decision: self.on_analysis_failure,
            reason: Some(Reason {
                rule: ON_ANALYSIS_FAILURE.into(),
                justification: format!(
                    "the command could not be analysed ({why}), so no command rule could judge \
                     it (it would still run inside the sandbox)"
                ),
                command: text,
            }),
        }
    }

    /// The decision for a command line, from its analysis (by the parser worker). Each
    /// simple command gets the decision of the first rule (in policy order) that matches it,
    /// `allow` if none does; each unknown part gets `on_unknown`. The line gets the most
    /// severe of these; on a tie the first one wins.
    pub fn decide(&self, analysis: &Analysis) -> Verdict {
        let mut verdict = Verdict {
            decision: Decision::Allow,
            reason: None,
        };
        let consider = |decision: Decision, reason: Reason, verdict: &mut Verdict| {
            if verdict.reason.is_none() || decision > verdict.decision {
                *verdict = Verdict {
                    decision,
                    reason: Some(reason),
                };
            }
        };
        for command in &analysis.commands {
            if let Some(rule) = self.rules.iter().find(|r| r.pattern.matches(command)) {
                let reason = Reason {
                    rule: rule.name.clone(),
                    justification: rule.justification.clone(),
                    command: command.display(),
                };
                consider(rule.decision, reason, &mut verdict);
            }
        }
        for unknown in &analysis.unknown {
            let reason = Reason {
                rule: ON_UNKNOWN.into(),
                justification: format!(
                    "{}, so no command rule can judge it (it still runs inside the sandbox)",
                    unknown.reason
                ),
                command: unknown.text.clone(),
            };
            consider(self.on_unknown, reason, &mut verdict);
        }
        verdict
    }
}

impl Rule {
    fn first_match<'a>(&self, analysis: &'a Analysis) -> Option<&'a SimpleCommand> {
        analysis.commands.iter().find(|c| self.pattern.matches(c))
    }
}

impl Pattern {
    fn check(&self) -> Result<(), String> {
        let lists = [
            ("program", &self.program),
            ("all_flags", &self.all_flags),
            ("any_flag", &self.any_flag),
            ("any_arg", &self.any_arg),
            ("arg_prefix", &self.arg_prefix),
            ("not_arg", &self.not_arg),
            ("piped_into", &self.piped_into),
        ];
        let mut conditions = usize::from(self.calls_enclosing_function.is_some());
        for (field, list) in lists {
            let Some(list) = list else { continue };
            if list.is_empty() || list.iter().any(|e| e.is_empty()) {
                return Err(format!(
                    "`match.{field}` must list at least one non-empty entry"
                ));
            }
            if field != "not_arg" {
                conditions += 1;
            }
        }
        if conditions == 0 {
            return Err("`match` has no condition, so it would match every command".into());
        }
        for entry in self.all_flags.iter().chain(&self.any_flag).flatten() {
            if entry
                .split('|')
                .any(|alt| !alt.starts_with('-') || alt.len() < 2)
            {
                return Err(format!(
                    "flag entry `{entry}`: every alternative must start with `-`"
                ));
            }
        }
        Ok(())
    }

    /// Whether `command` fits this pattern.
    pub fn matches(&self, command: &SimpleCommand) -> bool {
        let program = command.program();
        let (options, operands) = split_args(command);
        let all_args = || command.words[1..].iter().map(|w| w.text.as_str());
        if let Some(programs) = &self.program
            && !programs.iter().any(|p| crate::glob::matches(p, program))
        {
            return false;
        }
        if let Some(flags) = &self.all_flags
            && !flags.iter().all(|f| has_flag(&options, f))
        {
            return false;
        }
        if let Some(flags) = &self.any_flag
            && !flags.iter().any(|f| has_flag(&options, f))
        {
            return false;
        }
        if let Some(args) = &self.any_arg
            && !operands
                .iter()
                .any(|o| args.iter().any(|a| normalize(a) == normalize(o)))
        {
            return false;
        }
        if let Some(prefixes) = &self.arg_prefix
            && !all_args().any(|a| prefixes.iter().any(|p| a.starts_with(p.as_str())))
        {
            return false;
        }
        if let Some(except) = &self.not_arg
            && all_args().any(|a| except.iter().any(|e| normalize(e) == normalize(a)))
        {
            return false;
        }
        if let Some(readers) = &self.piped_into
            && !command.feeds_into.iter().any(|p| {
                readers
                    .iter()
                    .any(|r| crate::glob::matches(r, program_name(p)))
            })
        {
            return false;
        }
        if let Some(wanted) = self.calls_enclosing_function
            && wanted != (command.in_function.as_deref() == Some(program))
        {
            return false;
        }
        true
    }
}

/// Options (before `--`, starting with `-`) and operands of a command.
fn split_args(command: &SimpleCommand) -> (Vec<&str>, Vec<&str>) {
    let mut options = Vec::new();
    let mut operands = Vec::new();
    let mut after_dashdash = false;
    for w in &command.words[1..] {
        let t = w.text.as_str();
        if !after_dashdash && t == "--" {
            after_dashdash = true;
        } else if !after_dashdash && t.len() > 1 && t.starts_with('-') {
            options.push(t);
        } else {
            operands.push(t);
        }
    }
    (options, operands)
}

/// Whether one of the `|`-separated alternatives of `entry` is among `options`.
fn has_flag(options: &[&str], entry: &str) -> bool {
    entry.split('|').any(|alt| {
        if alt.starts_with("--") {
            options
                .iter()
                .any(|o| *o == alt || o.strip_prefix(alt).is_some_and(|r| r.starts_with('=')))
        } else if alt.chars().count() == 2 {
            let letter = &alt[1..];
            options
                .iter()
                .any(|o| !o.starts_with("--") && o[1..].contains(letter))
        } else {
            // `-delete`, `-exec`: single-dash words compared whole.
            options.contains(&alt)
        }
    })
}

/// `~/` → `~`, `./*` → `*`, `.//` → `.`; `/` stays `/`.
fn normalize(arg: &str) -> &str {
    let mut s = arg;
    while s.len() > 1 && s.ends_with('/') {
        s = &s[..s.len() - 1];
    }
    while let Some(rest) = s.strip_prefix("./") {
        if rest.is_empty() {
            break;
        }
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::bash::analyze;

    fn rule(toml_text: &str) -> Result<CommandRules, RuleError> {
        #[derive(Deserialize)]
        struct Doc {
            rules: Vec<RawRule>,
        }
        let doc: Doc = toml::from_str(toml_text).expect("test TOML parses");
        let rules = CommandRules::compile(Decision::Allow, doc.rules, Some(toml_text))?;
        rules.verify_examples(&|l| Some(analyze(l)))?;
        Ok(rules)
    }

    /// Tests analyse in process; the server never does (it asks the parser worker).
    fn decide(rules: &CommandRules, line: &str) -> Verdict {
        rules.decide(&analyze(line))
    }

    const RM: &str = r#"
[[rules]]
name = "rm-root"
decision = "deny"
justification = "deletes everything"
match = { program = ["rm"], all_flags = ["-r|-R|--recursive"], any_arg = ["/", "~"] }
examples = { match = ["rm -rf /", "rm --recursive ~/"], not_match = ["rm -f /", "rm -rf build"] }
"#;

    #[test]
    fn flags_combine_and_long_forms_count() {
        let r = rule(RM).unwrap();
        for line in [
            "rm -rf /",
            "rm -fr /",
            "rm -R -f ~",
            "rm --recursive --force /",
            "rm -r -- /",
        ] {
            assert_eq!(decide(&r, line).decision, Decision::Deny, "{line}");
        }
        for line in ["rm -f /", "rm -rf ./build", "rm -- -r /x", "echo rm -rf /"] {
            assert_eq!(decide(&r, line).decision, Decision::Allow, "{line}");
        }
    }

    #[test]
    fn a_failing_example_names_the_rule_and_its_line() {
        let bad = RM.replace("\"rm -rf build\"", "\"rm -rf /\"");
        let err = rule(&bad).unwrap_err().to_string();
        assert!(err.contains("rule `rm-root`"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("not_match"), "{err}");
        let bad = RM.replace("\"rm --recursive ~/\"", "\"rm -f ~\"");
        let err = rule(&bad).unwrap_err().to_string();
        assert!(err.contains("examples.match"), "{err}");
    }

    #[test]
    fn empty_match_and_missing_examples_are_refused() {
        let no_cond = RM.replace(
            r#"{ program = ["rm"], all_flags = ["-r|-R|--recursive"], any_arg = ["/", "~"] }"#,
            "{ }",
        );
        assert!(
            rule(&no_cond)
                .unwrap_err()
                .to_string()
                .contains("no condition")
        );
        let no_examples = RM.replace(
            r#"not_match = ["rm -f /", "rm -rf build"]"#,
            "not_match = []",
        );
        assert!(
            rule(&no_examples)
                .unwrap_err()
                .to_string()
                .contains("not_match")
        );
        let bad_flag = RM.replace("-r|-R|--recursive", "r");
        assert!(
            rule(&bad_flag)
                .unwrap_err()
                .to_string()
                .contains("start with `-`")
        );
    }

    #[test]
    fn most_severe_wins_and_unknown_uses_on_unknown() {
        let mut r = rule(RM).unwrap();
        let v = decide(&r, "ls; rm -rf /; $X");
        assert_eq!(v.decision, Decision::Deny);
        assert_eq!(v.reason.unwrap().rule, "rm-root");
        assert_eq!(decide(&r, "$X").decision, Decision::Allow);
        r.on_unknown = Decision::Ask;
        let v = decide(&r, "ls && $X -rf");
        assert_eq!(v.decision, Decision::Ask);
        assert_eq!(v.reason.unwrap().rule, ON_UNKNOWN);
        assert_eq!(decide(&r, "ls -la").reason, None);
    }

    #[test]
    fn glob_and_normalize() {
        use crate::glob::matches as glob;
        assert!(glob("mkfs*", "mkfs.ext4"));
        assert!(glob("mkfs*", "mkfs"));
        assert!(!glob("mkfs*", "xmkfs"));
        assert!(glob("*sh", "bash"));
        assert_eq!(normalize("~/"), "~");
        assert_eq!(normalize("./*"), "*");
        assert_eq!(normalize("./"), ".");
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("//"), "/");
    }
}
