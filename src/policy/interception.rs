//! The interception part of `[network]` (issue 20): `[[network.credentials]]`,
//! `[[network.rules]]`, `[network.git]` and `extra_roots`, checked and compiled into the
//! proxy's [`EgressRules`], and where each entry is written (for the refusals' "change it
//! there").
//!
//! Owns the validation of those fields only; the rest of `[network]` is `super`'s, and what
//! the compiled rules decide is `egress`'s.

use super::PolicyError;
use super::check::Check;
use super::raw::{RawCredential, RawNetwork};
use crate::egress::EgressRules;
use crate::egress::l7::{GitPolicy, HttpRule};
use crate::egress::pattern::{HostPattern, Target};
use crate::egress::rules::Site;
use crate::egress::secrets::{BoundHost, CredentialRule, Inject, SecretSource};
use std::path::PathBuf;

/// Variables a credential's `env` may not take: the proxy's own and the CA bundle's.
const RESERVED_ENV: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "NODE_USE_ENV_PROXY",
    "PATH",
    "HOME",
];

/// Whether any interception field is set (they need `proxy = true`).
pub(super) fn any_set(n: &RawNetwork) -> Option<&'static str> {
    if n.credentials.as_ref().is_some_and(|l| !l.is_empty()) {
        Some("network.credentials")
    } else if n.rules.as_ref().is_some_and(|l| !l.is_empty()) {
        Some("network.rules")
    } else if n.git.is_some() {
        Some("network.git")
    } else if n.extra_roots.as_ref().is_some_and(|l| !l.is_empty()) {
        Some("network.extra_roots")
    } else {
        None
    }
}

/// Compiles the interception fields into `rules` (whose host lists are already compiled).
pub(super) fn compile(
    n: &RawNetwork,
    rules: &mut EgressRules,
    check: &Check<'_>,
) -> Result<(), PolicyError> {
    let site = Site {
        origin: check.origin.to_owned(),
        line: None,
    };
    for (i, raw) in n.credentials.iter().flatten().enumerate() {
        let credential = credential(i, raw, rules, check, &site)?;
        refuse_duplicate_credential(rules, &credential, check)?;
        rules.credentials.push(credential);
    }
    for (index, raw) in n.rules.iter().flatten().enumerate() {
        let rule = http_rule(index, raw, rules, check, &site)?;
        rules.http_rules.push(rule);
    }
    if let Some(git) = &n.git {
        rules.git = Some(git_policy(git, rules, check, &site)?);
    }
    for root in n.extra_roots.iter().flatten() {
        let root = extra_root(root, check)?;
        rules.extra_roots.push(root);
    }
    Ok(())
}

/// Two credentials may share neither a name (it is in the placeholder) nor a variable.
fn refuse_duplicate_credential(
    rules: &EgressRules,
    credential: &CredentialRule,
    check: &Check<'_>,
) -> Result<(), PolicyError> {
    if rules.credentials.iter().any(|c| c.name == credential.name) {
        return Err(check.invalid(
            "network.credentials",
            format!(
                "two credentials are named `{}`; names must differ",
                credential.name
            ),
        ));
    }
    if rules.credentials.iter().any(|c| c.env == credential.env) {
        return Err(check.invalid(
            "network.credentials",
            format!(
                "two credentials set `env = \"{}\"`; each needs its own",
                credential.env
            ),
        ));
    }
    Ok(())
}

/// One `[[network.rules]]` entry: a host the proxy allows, HTTP methods, absolute paths.
fn http_rule(
    index: usize,
    raw: &super::raw::RawHttpRule,
    rules: &EgressRules,
    check: &Check<'_>,
    site: &Site,
) -> Result<HttpRule, PolicyError> {
    let field = "network.rules";
    let what = format!("[[network.rules]] entry {}", index + 1);
    let host = raw
        .host
        .as_deref()
        .ok_or_else(|| check.invalid(field, format!("{what}: `host` is required")))?;
    let host =
        HostPattern::parse(host).map_err(|e| check.invalid(field, format!("{what}: host {e}")))?;
    check_allowed(&host, rules, check, field, &what)?;
    let methods = raw
        .methods
        .iter()
        .flatten()
        .map(|m| {
            let upper = m.to_ascii_uppercase();
            if upper.is_empty() || !upper.bytes().all(|b| b.is_ascii_uppercase()) {
                Err(check.invalid(
                    field,
                    format!("{what}: `{m}` is not an HTTP method (e.g. \"GET\", \"POST\")"),
                ))
            } else {
                Ok(upper)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let paths = raw.paths.clone().unwrap_or_default();
    for p in &paths {
        if !p.starts_with('/') || p.bytes().any(|b| !b.is_ascii_graphic()) || p.contains('?') {
            return Err(check.invalid(
                field,
                format!(
                    "{what}: path `{}` must start with `/`, without spaces or a query \
                     (`*` matches any run of characters, e.g. \"/repos/acme/*\")",
                    p.escape_debug()
                ),
            ));
        }
    }
    Ok(HttpRule {
        host,
        methods,
        paths,
        index,
        site: site.clone(),
    })
}

/// `[network.git]`: hosts the proxy allows, full ref names, and some host to intercept.
fn git_policy(
    git: &super::raw::RawGit,
    rules: &EgressRules,
    check: &Check<'_>,
    site: &Site,
) -> Result<GitPolicy, PolicyError> {
    let field = "network.git";
    let hosts = git
        .hosts
        .iter()
        .flatten()
        .map(|h| {
            let p =
                HostPattern::parse(h).map_err(|e| check.invalid(field, format!("hosts: {e}")))?;
            check_allowed(&p, rules, check, field, "[network.git]")?;
            Ok(p)
        })
        .collect::<Result<Vec<_>, PolicyError>>()?;
    let push_refs = git.push_refs.clone().ok_or_else(|| {
        check.invalid(
            field,
            "`push_refs` is required: the refs a push may update, e.g. \
             [\"refs/heads/agent/*\"] (`[]` refuses every push)"
                .into(),
        )
    })?;
    for r in &push_refs {
        if !r.starts_with("refs/") || r.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(check.invalid(
                field,
                format!(
                    "push_refs entry `{}` must be a full ref name starting with `refs/` (e.g. \
                     \"refs/heads/agent/*\")",
                    r.escape_debug()
                ),
            ));
        }
    }
    if hosts.is_empty() && rules.credentials.is_empty() && rules.http_rules.is_empty() {
        return Err(check.invalid(
            field,
            "names no host: set `hosts` (e.g. [\"github.com\"]), or bind a credential to the \
             git host, so the proxy intercepts its pushes"
                .into(),
        ));
    }
    Ok(GitPolicy {
        hosts,
        push_refs,
        allow_delete: git.allow_delete.unwrap_or(false),
        site: site.clone(),
    })
}

/// One `network.extra_roots` entry: an absolute PEM file (`~/` is the server user's home).
fn extra_root(root: &str, check: &Check<'_>) -> Result<PathBuf, PolicyError> {
    let p = super::home::expand_home(root.to_owned());
    if !p.starts_with('/') {
        return Err(check.invalid(
            "network.extra_roots",
            format!("`{p}` must be an absolute path to a PEM file"),
        ));
    }
    Ok(PathBuf::from(p))
}

/// One `[[network.credentials]]` entry (the `i`th) compiled against the proxy's host lists.
fn credential(
    i: usize,
    raw: &RawCredential,
    rules: &EgressRules,
    check: &Check<'_>,
    site: &Site,
) -> Result<CredentialRule, PolicyError> {
    let name = credential_name(
        raw,
        &format!("[[network.credentials]] entry {}", i + 1),
        check,
    )?;
    let what = format!("credential `{name}`");
    let env = credential_env(raw, &what, check)?;
    let source = secret_source(raw, &what, check)?;
    let inject = Inject::parse(raw.inject.as_deref().unwrap_or("bearer"))
        .map_err(|e| check.invalid("network.credentials", format!("{what}: inject {e}")))?;
    let hosts = bound_hosts(raw, rules, &what, check)?;
    Ok(CredentialRule {
        name,
        hosts,
        env,
        source,
        inject,
        site: site.clone(),
    })
}

/// A credential's `name`: short, of a-z, 0-9 and `_`, since it is in the placeholder.
fn credential_name(
    raw: &RawCredential,
    what: &str,
    check: &Check<'_>,
) -> Result<String, PolicyError> {
    let field = "network.credentials";
    let name = raw.name.clone().ok_or_else(|| {
        check.invalid(
            field,
            format!("{what}: `name` is required (e.g. \"github\")"),
        )
    })?;
    if name.is_empty()
        || name.len() > 32
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(check.invalid(
            field,
            format!(
                "{what}: name `{name}` must be 1-32 of a-z, 0-9 and `_` (it is in the placeholder)"
            ),
        ));
    }
    Ok(name)
}

/// A credential's `env`: a variable name cordon does not set itself.
fn credential_env(
    raw: &RawCredential,
    what: &str,
    check: &Check<'_>,
) -> Result<String, PolicyError> {
    let field = "network.credentials";
    let env = raw
        .env
        .clone()
        .ok_or_else(|| check.invalid(field, format!("{what}: `env` is required: the variable the sandbox sees the placeholder in (e.g. \"GITHUB_TOKEN\")")))?;
    let env_ok = env
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let upper = env.to_ascii_uppercase();
    if !env_ok
        || RESERVED_ENV.contains(&upper.as_str())
        || crate::exec::env::CA_BUNDLE_VARIABLES.contains(&upper.as_str())
    {
        return Err(check.invalid(
            field,
            format!(
                "{what}: env `{env}` must be a variable name of letters, digits and `_`, and not one cordon sets itself (proxy and CA variables, PATH, HOME)"
            ),
        ));
    }
    Ok(env)
}

/// Where a credential's real value is read: exactly one of a variable or an absolute file.
fn secret_source(
    raw: &RawCredential,
    what: &str,
    check: &Check<'_>,
) -> Result<SecretSource, PolicyError> {
    let field = "network.credentials";
    let source = match (&raw.from_env, &raw.from_file) {
        (Some(var), None) if !var.is_empty() => SecretSource::Env(var.clone()),
        (None, Some(path)) => {
            let path = super::home::expand_home(path.clone());
            if !path.starts_with('/') {
                return Err(check.invalid(
                    field,
                    format!("{what}: from_file `{path}` must be an absolute path"),
                ));
            }
            SecretSource::File(PathBuf::from(path))
        }
        _ => {
            return Err(check.invalid(
                field,
                format!(
                    "{what}: set exactly one of `from_env` (a variable of the server's environment, e.g. \"CORDON_GITHUB_TOKEN\") or `from_file` (a file of mode 0600, e.g. \"/run/secrets/gh\")"
                ),
            ));
        }
    };
    Ok(source)
}

/// The hosts a credential's real value may go to: allowed by the proxy, plain HTTP only
/// where that is allowed too.
fn bound_hosts(
    raw: &RawCredential,
    rules: &EgressRules,
    what: &str,
    check: &Check<'_>,
) -> Result<Vec<BoundHost>, PolicyError> {
    let field = "network.credentials";
    let hosts_raw = raw.hosts.clone().unwrap_or_default();
    if hosts_raw.is_empty() {
        return Err(check.invalid(
            field,
            format!(
                "{what}: `hosts` is required: the hosts its real value may go to (e.g. [\"github.com\", \"api.github.com\"])"
            ),
        ));
    }
    let mut hosts = Vec::new();
    for h in &hosts_raw {
        let (text, plain_http) = match h.strip_prefix("http://") {
            Some(rest) => (rest, true),
            None => (h.as_str(), false),
        };
        let pattern = HostPattern::parse(text)
            .map_err(|e| check.invalid(field, format!("{what}: host {e}")))?;
        check_allowed(&pattern, rules, check, field, what)?;
        if plain_http {
            check_plain_http(&pattern, rules, check, what)?;
        }
        hosts.push(BoundHost {
            pattern,
            plain_http,
        });
    }
    Ok(hosts)
}

/// A named host must be one the proxy lets through at all (a wildcard is not checked).
fn check_allowed(
    pattern: &HostPattern,
    rules: &EgressRules,
    check: &Check<'_>,
    field: &'static str,
    what: &str,
) -> Result<(), PolicyError> {
    let text = pattern.text.trim_start_matches("*.");
    if pattern.text.starts_with("*.") {
        return Ok(());
    }
    let port = match pattern.ports {
        crate::egress::pattern::PortMatch::One(p) => p,
        _ => 443,
    };
    let host = text.rsplit_once(':').map_or(text, |(h, _)| h);
    let Ok(target) = Target::parse_authority(&format!("{host}:{port}")) else {
        return Ok(());
    };
    match rules.judge(&target) {
        Ok(()) => Ok(()),
        Err(refusal) => Err(check.invalid(
            field,
            format!(
                "{what}: host `{}` would be refused by the proxy before any rule or credential \
                 applies ({}): list it in [network].allow_hosts",
                pattern.text,
                refusal.kind()
            ),
        )),
    }
}

/// Credentials over plain HTTP: only to loopback, and only with loopback in `allow_private`.
fn check_plain_http(
    pattern: &HostPattern,
    rules: &EgressRules,
    check: &Check<'_>,
    what: &str,
) -> Result<(), PolicyError> {
    let host = pattern
        .text
        .rsplit_once(':')
        .map_or(pattern.text.as_str(), |(h, _)| h);
    let loopback_ip: Option<std::net::IpAddr> = match host {
        "localhost" => Some([127, 0, 0, 1].into()),
        other => other
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .ok()
            .filter(|ip| ip.is_loopback()),
    };
    match loopback_ip {
        Some(ip) if rules.allow_private.iter().any(|c| c.contains(ip)) => Ok(()),
        _ => Err(check.invalid(
            "network.credentials",
            format!(
                "{what}: `http://{}` would send the real value over plain HTTP, which anyone on \
                 the path can read; credentials go over HTTPS only (write the host without \
                 `http://`), except to loopback listed in [network].allow_private (tests)",
                pattern.text
            ),
        )),
    }
}

/// A credential's source must be out of the sandbox's reach: its `from_env` not passed on by
/// `[environment] pass`, its `from_file` under no path the filesystem grants (the view holds
/// only those; a file beneath the workspace is refused when the server starts, see
/// `confine`).
pub(super) fn check_reach(
    rules: &EgressRules,
    fs: &super::FilesystemPolicy,
    env: &super::EnvironmentPolicy,
    check: &Check<'_>,
) -> Result<(), PolicyError> {
    for c in &rules.credentials {
        match &c.source {
            SecretSource::Env(var) if env.pass.iter().any(|p| p == var) => {
                return Err(check.invalid(
                    "network.credentials",
                    format!(
                        "credential `{}`: from_env `{var}` is also in [environment] pass, which \
                         would give the sandbox the real value; remove it there",
                        c.name
                    ),
                ));
            }
            SecretSource::File(path) => {
                if let Some(granted) = fs
                    .read_exec
                    .iter()
                    .chain(&fs.read_write)
                    .chain(&fs.toolchains)
                    .find(|g| path.starts_with(g))
                {
                    return Err(check.invalid(
                        "network.credentials",
                        format!(
                            "credential `{}`: from_file {} is beneath {}, which the sandbox can \
                             read; keep the secret where the policy grants nothing (e.g. \
                             /run/secrets)",
                            c.name,
                            path.display(),
                            granted.display()
                        ),
                    ));
                }
            }
            SecretSource::Env(_) => {}
        }
    }
    Ok(())
}

/// Fills in the line of each entry: the N-th `[[network.credentials]]` / `[[network.rules]]`
/// header of the layer that sets the list, and `[network.git]`. `layers` is child first.
pub(super) fn locate(rules: &mut EgressRules, layers: &[(String, String, super::raw::RawPolicy)]) {
    let headers = |header: &str| -> Option<(String, Vec<usize>)> {
        layers.iter().find_map(|(origin, text, _)| {
            let lines: Vec<usize> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| l.trim().split('#').next().unwrap_or_default().trim() == header)
                .map(|(i, _)| i + 1)
                .collect();
            (!lines.is_empty()).then(|| (origin.clone(), lines))
        })
    };
    if let Some((origin, lines)) = headers("[[network.credentials]]") {
        for (c, line) in rules.credentials.iter_mut().zip(lines) {
            c.site = Site {
                origin: origin.clone(),
                line: Some(line),
            };
        }
    }
    if let Some((origin, lines)) = headers("[[network.rules]]") {
        for (r, line) in rules.http_rules.iter_mut().zip(lines) {
            r.site = Site {
                origin: origin.clone(),
                line: Some(line),
            };
        }
    }
    if let (Some(git), Some((origin, lines))) = (rules.git.as_mut(), headers("[network.git]")) {
        git.site = Site {
            origin,
            line: lines.first().copied(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::super::Policy;

    fn load(network: &str) -> Result<Policy, String> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        let text = format!(
            "extends = \"dev\"\n[network]\nproxy = true\nallow_hosts = [\"github.com\", \
             \"api.github.com\", \"localhost:*\"]\nallow_private = [\"127.0.0.0/8\"]\n{network}"
        );
        std::fs::write(&f, text).unwrap();
        Policy::load(f.to_str().unwrap()).map_err(|e| e.to_string())
    }

    const ISSUE_EXAMPLE: &str = r#"
[[network.credentials]]
name = "github"
hosts = ["github.com", "api.github.com"]
env = "GITHUB_TOKEN"
from_env = "CORDON_GITHUB_TOKEN"
inject = "basic:x-access-token"

[[network.rules]]
host = "api.github.com"
methods = ["get", "HEAD"]
paths = ["/repos/acme/*", "/user"]

[network.git]
push_refs = ["refs/heads/agent/*"]
allow_delete = false
"#;

    #[test]
    fn the_issues_example_compiles_with_each_entry_on_its_line() {
        let p = load(ISSUE_EXAMPLE).unwrap();
        let rules = p.network.proxy.unwrap();
        let c = &rules.credentials[0];
        assert_eq!(
            (c.name.as_str(), c.env.as_str()),
            ("github", "GITHUB_TOKEN")
        );
        assert_eq!(c.site.line, Some(7), "{:?}", c.site);
        assert_eq!(rules.http_rules[0].methods, vec!["GET", "HEAD"]);
        assert_eq!(rules.http_rules[0].site.line, Some(14));
        let git = rules.git.as_ref().unwrap();
        assert_eq!(git.site.line, Some(19));
        assert!(!git.allow_delete);
        let t = |s: &str| crate::egress::pattern::Target::parse_authority(s).unwrap();
        assert!(rules.intercepts(&t("api.github.com:443")));
        assert!(rules.intercepts(&t("github.com:443")));
        assert!(
            !rules.intercepts(&t("localhost:8080")),
            "an unnamed host stays opaque"
        );
    }

    #[test]
    fn bad_entries_are_errors_that_say_how_to_fix_them() {
        let cred = |body: &str| format!("[[network.credentials]]\n{body}\n");
        for (network, wanted) in [
            (
                cred("name = \"gh\"\nhosts = [\"github.com\"]\nenv = \"T\""),
                "exactly one of `from_env`",
            ),
            (
                cred(
                    "name = \"gh\"\nhosts = [\"github.com\"]\nenv = \"T\"\nfrom_env = \"X\"\nfrom_file = \"/x\"",
                ),
                "exactly one of",
            ),
            (
                cred("name = \"Gh!\"\nhosts = [\"github.com\"]\nenv = \"T\"\nfrom_env = \"X\""),
                "a-z, 0-9",
            ),
            (
                cred(
                    "name = \"gh\"\nhosts = [\"github.com\"]\nenv = \"HTTPS_PROXY\"\nfrom_env = \"X\"",
                ),
                "not one cordon sets",
            ),
            (
                cred(
                    "name = \"gh\"\nhosts = [\"github.com\"]\nenv = \"T\"\nfrom_env = \"X\"\ninject = \"token\"",
                ),
                "basic:USER",
            ),
            (
                cred("name = \"gh\"\nhosts = [\"evil.example\"]\nenv = \"T\"\nfrom_env = \"X\""),
                "list it in [network].allow_hosts",
            ),
            (
                cred(
                    "name = \"gh\"\nhosts = [\"http://github.com\"]\nenv = \"T\"\nfrom_env = \"X\"",
                ),
                "over HTTPS only",
            ),
            (
                "[[network.rules]]\nhost = \"api.github.com\"\npaths = [\"repos\"]\n".into(),
                "must start with `/`",
            ),
            (
                "[[network.rules]]\nhost = \"api.github.com\"\nmethods = [\"G T\"]\n".into(),
                "not an HTTP method",
            ),
            (
                "[network.git]\nhosts = [\"github.com\"]\n".into(),
                "`push_refs` is required",
            ),
            (
                "[network.git]\nhosts = [\"github.com\"]\npush_refs = [\"agent/*\"]\n".into(),
                "starting with `refs/`",
            ),
            (
                "[network.git]\npush_refs = [\"refs/heads/a\"]\n".into(),
                "names no host",
            ),
            ("extra_roots = [\"ca.pem\"]\n".into(), "absolute path"),
            (
                cred(
                    "name = \"gh\"\nhosts = [\"github.com\"]\nenv = \"T\"\nfrom_file = \"/etc/gh-token\"",
                ),
                "which the sandbox can read",
            ),
            (
                format!(
                    "{}[environment]\npass = [\"X\"]\n",
                    cred("name = \"gh\"\nhosts = [\"github.com\"]\nenv = \"T\"\nfrom_env = \"X\"")
                ),
                "also in [environment] pass",
            ),
        ] {
            let e = load(&network).unwrap_err();
            assert!(e.contains(wanted), "{network}: {e}");
        }
        // Plain HTTP is allowed to loopback listed in allow_private (tests).
        let ok = cred(
            "name = \"t\"\nhosts = [\"http://localhost:8080\"]\nenv = \"T\"\nfrom_env = \"X\"",
        );
        assert!(load(&ok).is_ok(), "{:?}", load(&ok).err());
    }

    #[test]
    fn interception_fields_need_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, "[[network.rules]]\nhost = \"api.github.com\"\n").unwrap();
        let e = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("network.rules") && e.contains("proxy = true"),
            "{e}"
        );
    }
}
