//! Credentials the sandbox never holds (`[[network.credentials]]`): the real value stays in
//! the server's memory, the sandbox's environment gets a placeholder
//! (`cordon-cred-<name>-<random>`), and the proxy puts the real value into requests toward the
//! hosts the credential is bound to, only those, and there only into one place: the field its
//! `inject` names.
//!
//! Owns the credential rules as the policy compiled them, loading their values at start
//! (`from_env`, or `from_file`: a regular file of mode 0600 or stricter, never through a
//! link), and the pure byte work on requests and responses: replacing a placeholder in the
//! `inject` field of a request to a bound host (also inside a `Basic` userinfo), adding the
//! credential in its `inject` form when such a request carries none, refusing a placeholder
//! anywhere else (another field, the request target, the body: toward a bound host that is a
//! read-back channel, since a server may echo any of them; toward any other host, an
//! exfiltration attempt), and scrubbing an echoed real value out of a response, verbatim or
//! base64-encoded at any alignment. Fuzzed by `fuzz/fuzz_targets/intercept_bytes.rs`. Where
//! requests are read and sent, and responses de-chunked, is `intercept`'s.

use super::credentials::{base64_decode_within, base64_encode};
use super::pattern::{HostPattern, Target};
use super::site::Site;
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;

/// Longest real value accepted (a header value has to carry it).
pub(crate) const MAX_SECRET: usize = 4096;
/// Longest `Authorization: Basic` value decoded to look for a placeholder inside.
const MAX_BASIC: usize = 16 * 1024;
/// Random characters of a placeholder at least (more when the real value is longer, so that
/// a scrubbed response keeps its length: see [`Vault::scrubber`]).
const MIN_RANDOM: usize = 16;

/// How the real value goes into a request to a bound host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inject {
    /// `Authorization: Bearer <value>`.
    Bearer,
    /// `Authorization: Basic base64(<user>:<value>)` (git over HTTPS: `x-access-token`).
    Basic(String),
    /// `<Name>: <value>`.
    Header(String),
}

impl fmt::Display for Inject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bearer => f.write_str("bearer"),
            Self::Basic(user) => write!(f, "basic:{user}"),
            Self::Header(name) => write!(f, "header:{name}"),
        }
    }
}

impl Inject {
    /// Parses `bearer`, `basic:USER` or `header:NAME`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        match text.split_once(':') {
            None if text == "bearer" => Ok(Self::Bearer),
            Some(("basic", user)) if token(user) => Ok(Self::Basic(user.to_owned())),
            Some(("header", name)) if token(name) => {
                if ["host", "content-length", "transfer-encoding", "connection"]
                    .contains(&name.to_ascii_lowercase().as_str())
                {
                    return Err(format!("`{name}` frames the request; name another header"));
                }
                Ok(Self::Header(name.to_owned()))
            }
            _ => Err(format!(
                "`{text}` is not `bearer`, `basic:USER` (e.g. `basic:x-access-token` for git over \
                 HTTPS) or `header:NAME` (e.g. `header:X-Api-Key`)"
            )),
        }
    }

    /// The header field this form uses.
    pub fn field(&self) -> &str {
        match self {
            Self::Bearer | Self::Basic(_) => "Authorization",
            Self::Header(name) => name,
        }
    }

    fn value(&self, secret: &str) -> String {
        match self {
            Self::Bearer => format!("Bearer {secret}"),
            Self::Basic(user) => format!(
                "Basic {}",
                base64_encode(format!("{user}:{secret}").as_bytes())
            ),
            Self::Header(_) => secret.to_owned(),
        }
    }
}

/// Where the real value is read from, once, when the server starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(name) => write!(f, "from_env = \"{name}\""),
            Self::File(path) => write!(f, "from_file = \"{}\"", path.display()),
        }
    }
}

/// A host a credential is bound to: over HTTPS (intercepted), or also over plain HTTP when
/// written `http://host` (loopback only, for tests; `policy check` refuses anything else).
#[derive(Debug, Clone, Serialize)]
pub struct BoundHost {
    #[serde(serialize_with = "as_text")]
    pub pattern: HostPattern,
    pub plain_http: bool,
}

fn as_text<S: serde::Serializer, T: fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// One `[[network.credentials]]` entry, as the policy compiled it (no value yet).
#[derive(Debug, Clone, Serialize)]
pub struct CredentialRule {
    pub name: String,
    pub hosts: Vec<BoundHost>,
    /// The variable the sandbox sees, holding the placeholder.
    pub env: String,
    #[serde(serialize_with = "as_text")]
    pub source: SecretSource,
    #[serde(serialize_with = "as_text")]
    pub inject: Inject,
    #[serde(skip)]
    pub site: Site,
}

impl CredentialRule {
    /// Whether this credential goes to `target` (over TLS, or plain HTTP).
    pub fn binds(&self, target: &Target, tls: bool) -> bool {
        self.hosts
            .iter()
            .any(|h| (tls || h.plain_http) && h.pattern.matches(target))
    }

    /// Whether `target` is named at all (so the proxy intercepts it).
    pub fn names(&self, target: &Target) -> bool {
        self.hosts.iter().any(|h| h.pattern.matches(target))
    }

    /// The hosts it is bound to, as a policy writes them (`http://` before a plain-HTTP one),
    /// comma-separated: for refusals and `cordon policy check`.
    pub fn host_list(&self) -> String {
        self.hosts
            .iter()
            .map(|h| {
                if h.plain_http {
                    format!("http://{}", h.pattern)
                } else {
                    h.pattern.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Why a credential could not be loaded at start.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "credential `{name}`: the server's environment has no `{var}` (set it before starting \
         cordon, or use from_file)"
    )]
    MissingEnv { name: String, var: String },
    #[error("credential `{name}`: {path}: {why}")]
    File {
        name: String,
        path: PathBuf,
        why: String,
    },
    #[error(
        "credential `{name}`: the value is {why}; a credential is one line of at most \
         {MAX_SECRET} printable characters"
    )]
    Value { name: String, why: &'static str },
}

/// One loaded credential: its rule, its real value and the placeholder the sandbox sees.
pub struct Secret {
    pub rule: CredentialRule,
    real: String,
    placeholder: String,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the real value, not even in a debug print.
        f.debug_struct("Secret")
            .field("name", &self.rule.name)
            .field("placeholder", &self.placeholder)
            .finish_non_exhaustive()
    }
}

impl Secret {
    /// A credential with a known value (tests and the fuzzer; the server uses [`Vault::load`]).
    pub fn new(rule: CredentialRule, real: String) -> Result<Self, SecretError> {
        check_value(&rule.name, &real)?;
        let prefix = format!("cordon-cred-{}-", rule.name);
        let random = MIN_RANDOM.max(real.len().saturating_sub(prefix.len()));
        let placeholder = format!("{prefix}{}", random_hex(random));
        Ok(Self {
            rule,
            real,
            placeholder,
        })
    }

    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// What an echoed real value is replaced with in a response: the placeholder, cut to the
    /// real value's length when that is shorter (so no framing changes).
    fn mask(&self) -> &[u8] {
        &self.placeholder.as_bytes()[..self.real.len()]
    }
}

fn check_value(name: &str, value: &str) -> Result<(), SecretError> {
    let why = if value.is_empty() {
        Some("empty")
    } else if value.len() > MAX_SECRET {
        Some("too long")
    } else if !value.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        Some("not printable ASCII on one line")
    } else if value.starts_with("cordon-cred-") {
        Some("a cordon placeholder, not a real credential")
    } else {
        None
    };
    match why {
        Some(why) => Err(SecretError::Value {
            name: name.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// A placeholder found where its credential is not bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exfiltration {
    pub credential: String,
    /// `the X-Foo header`, `the request target`, `the request body`.
    pub place: String,
    /// Where the credential is bound, and where it is written in the policy.
    pub bound_to: String,
    pub site: Site,
    /// Set when the host is one the credential is bound to, but the placeholder was not in
    /// the one field the real value goes into: that field, and the `inject` form.
    pub misplaced: Option<Box<(String, String)>>,
}

impl fmt::Display for Exfiltration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.misplaced {
            None => write!(
                f,
                "exfiltration attempt: the placeholder of credential `{}` was sent in {} to a \
                 host it is not bound to (it is bound to {} only: [[network.credentials]] `{}`, \
                 {}); the request was not forwarded",
                self.credential, self.place, self.bound_to, self.credential, self.site
            ),
            Some(m) => write!(
                f,
                "exfiltration attempt: the placeholder of credential `{}` was sent in {}; cordon \
                 puts the real value only into the `{}` header (inject = \"{}\", \
                 [[network.credentials]] `{}`, {}), since a server may echo anything else it \
                 is sent; send the placeholder there, or send none and cordon adds it; the \
                 request was not forwarded",
                self.credential, self.place, m.0, m.1, self.credential, self.site
            ),
        }
    }
}

/// The credentials of one server, loaded.
#[derive(Debug, Default)]
pub struct Vault {
    secrets: Vec<Secret>,
}

/// What rewriting a request head did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Injected {
    /// Credentials whose real value went into the head (by name, in policy order).
    pub names: Vec<String>,
}

impl Vault {
    /// Reads every credential's value (the server's start: the only time).
    pub fn load(rules: &[CredentialRule]) -> Result<Self, SecretError> {
        let mut secrets = Vec::new();
        for rule in rules {
            let real = match &rule.source {
                SecretSource::Env(var) => {
                    std::env::var(var).map_err(|_| SecretError::MissingEnv {
                        name: rule.name.clone(),
                        var: var.clone(),
                    })?
                }
                SecretSource::File(path) => read_secret_file(&rule.name, path)?,
            };
            secrets.push(Secret::new(rule.clone(), real)?);
        }
        Ok(Self { secrets })
    }

    pub fn from_secrets(secrets: Vec<Secret>) -> Self {
        Self { secrets }
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    pub fn secrets(&self) -> &[Secret] {
        &self.secrets
    }

    /// The sandbox's variables: each credential's `env` with its placeholder.
    pub fn env(&self) -> Vec<(String, String)> {
        self.secrets
            .iter()
            .map(|s| (s.rule.env.clone(), s.placeholder.clone()))
            .collect()
    }

    /// Rewrites the head of a request to `target` in place. A placeholder of a credential
    /// bound there is replaced by the real value only in the field its `inject` names (also
    /// inside a `Basic` userinfo); a bound credential the request does not carry is added in
    /// its `inject` form. A placeholder anywhere else in the head (another field, the request
    /// target), or of a credential *not* bound to `target`, is an [`Exfiltration`] (nothing is
    /// changed then). With a credential injected, `Accept-Encoding` becomes `identity` and
    /// `Range`/`If-Range` are dropped, so the response is one whole unencoded body in which an
    /// echo can be scrubbed.
    pub fn rewrite(
        &self,
        path: &str,
        headers: &mut Vec<(String, String)>,
        target: &Target,
        tls: bool,
    ) -> Result<Injected, Exfiltration> {
        if let Some(secret) = self.secrets.iter().find(|s| path.contains(&s.placeholder)) {
            return Err(self.refusal(secret, "the request target", target, tls));
        }
        let mut used = vec![false; self.secrets.len()];
        let mut new_headers = Vec::with_capacity(headers.len() + 3);
        for (name, value) in headers.iter() {
            let mut value = value.clone();
            for (i, secret) in self.secrets.iter().enumerate() {
                if !carries(&value, &secret.placeholder) {
                    continue;
                }
                let field = secret.rule.inject.field();
                if !secret.rule.binds(target, tls) || !name.eq_ignore_ascii_case(field) {
                    return Err(self.refusal(secret, &format!("the `{name}` header"), target, tls));
                }
                value = substitute(&value, secret);
                used[i] = true;
            }
            new_headers.push((name.clone(), value));
        }
        for (i, secret) in self.secrets.iter().enumerate() {
            if !secret.rule.binds(target, tls) {
                continue;
            }
            let field = secret.rule.inject.field();
            if !used[i]
                && !new_headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case(field))
            {
                new_headers.push((field.to_owned(), secret.rule.inject.value(&secret.real)));
                used[i] = true;
            }
        }
        let mut injected = Injected::default();
        for (i, secret) in self.secrets.iter().enumerate() {
            if used[i] {
                injected.names.push(secret.rule.name.clone());
            }
        }
        if !injected.names.is_empty() {
            new_headers.retain(|(n, _)| {
                !["accept-encoding", "range", "if-range"].contains(&n.to_ascii_lowercase().as_str())
            });
            new_headers.push(("Accept-Encoding".into(), "identity".into()));
        }
        *headers = new_headers;
        Ok(injected)
    }

    /// The refusal of `secret`'s placeholder found in `place` of a request to `target`.
    fn refusal(&self, secret: &Secret, place: &str, target: &Target, tls: bool) -> Exfiltration {
        Exfiltration {
            credential: secret.rule.name.clone(),
            place: place.to_owned(),
            bound_to: secret.rule.host_list(),
            site: secret.rule.site.clone(),
            misplaced: secret.rule.binds(target, tls).then(|| {
                Box::new((
                    secret.rule.inject.field().to_owned(),
                    secret.rule.inject.to_string(),
                ))
            }),
        }
    }

    /// A placeholder anywhere in `bytes` (a request body, or a whole plain request): the first
    /// one, refused as an [`Exfiltration`] in `place` (the real value goes only into a head).
    pub fn placeholder_in(
        &self,
        bytes: &[u8],
        target: &Target,
        tls: bool,
        place: &str,
    ) -> Option<Exfiltration> {
        self.secrets
            .iter()
            .find(|s| find(bytes, s.placeholder.as_bytes()).is_some())
            .map(|s| self.refusal(s, place, target, tls))
    }

    /// The longest placeholder (a streaming search keeps this many bytes less one).
    pub fn longest_placeholder(&self) -> usize {
        self.secrets
            .iter()
            .map(|s| s.placeholder.len())
            .max()
            .unwrap_or(0)
    }

    /// A scrubber for a response: every real value, and its base64 encoding at each of the
    /// three alignments (standard and URL-safe alphabets), is replaced by the placeholder's
    /// (of the same length, so framing holds).
    pub fn scrubber(&self) -> Scrubber {
        let mut needles: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for s in &self.secrets {
            let (real, mask) = (s.real.as_bytes(), s.mask());
            needles.push((real.to_vec(), mask.to_vec()));
            for skip in 0..3 {
                for url_safe in [false, true] {
                    let (Some(n), Some(m)) = (
                        aligned_base64(real, skip, url_safe),
                        aligned_base64(mask, skip, url_safe),
                    ) else {
                        continue;
                    };
                    if !needles.iter().any(|(have, _)| *have == n) {
                        needles.push((n, m));
                    }
                }
            }
        }
        let keep = needles.iter().map(|(n, _)| n.len()).max().unwrap_or(1) - 1;
        Scrubber {
            needles,
            carry: Vec::new(),
            keep,
        }
    }
}

/// Shortest base64 needle searched for: shorter ones would match ordinary text.
const MIN_BASE64_NEEDLE: usize = 8;

/// The characters of any base64 text that encodes `value` starting `3 - skip` bytes into a
/// group (or at its start, `skip` 0): the whole groups of `value[skip..]`, which do not depend
/// on what surrounds it.
fn aligned_base64(value: &[u8], skip: usize, url_safe: bool) -> Option<Vec<u8>> {
    let rest = value.get(skip..)?;
    let whole = rest.len() / 3 * 3;
    let text = base64_encode(&rest[..whole]);
    if text.len() < MIN_BASE64_NEEDLE {
        return None;
    }
    let mut bytes = text.into_bytes();
    if url_safe {
        for b in bytes.iter_mut() {
            *b = match *b {
                b'+' => b'-',
                b'/' => b'_',
                other => other,
            };
        }
    }
    Some(bytes)
}

/// Whether a field value holds `placeholder`, as text or inside a `Basic` userinfo.
fn carries(value: &str, placeholder: &str) -> bool {
    value.contains(placeholder)
        || basic_userinfo(value).is_some_and(|decoded| decoded.contains(placeholder))
}

/// The decoded userinfo of a `Basic` value (a URL's `https://x:TOKEN@host`).
fn basic_userinfo(value: &str) -> Option<String> {
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    String::from_utf8(base64_decode_within(encoded.trim(), MAX_BASIC)?).ok()
}

/// `value` with `secret`'s placeholder replaced by its real value, as text and inside a
/// `Basic` userinfo.
fn substitute(value: &str, secret: &Secret) -> String {
    let mut out = value.replace(&secret.placeholder, &secret.real);
    if let Some(decoded) = basic_userinfo(&out)
        && decoded.contains(&secret.placeholder)
        && let Some((scheme, _)) = out.split_once(' ')
    {
        let replaced = decoded.replace(&secret.placeholder, &secret.real);
        out = format!("{scheme} {}", base64_encode(replaced.as_bytes()));
    }
    out
}

/// Replaces real values in a byte stream fed in pieces, across piece boundaries: it holds
/// back the last (longest value − 1) bytes until more come or the stream ends.
pub struct Scrubber {
    needles: Vec<(Vec<u8>, Vec<u8>)>,
    carry: Vec<u8>,
    keep: usize,
}

impl Scrubber {
    /// The bytes of `data` (and what was held back) that can go on now, scrubbed.
    pub fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        self.carry.extend_from_slice(data);
        self.replace();
        let emit = self.carry.len().saturating_sub(self.keep);
        self.carry.drain(..emit).collect()
    }

    /// What is still held back, at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        self.replace();
        std::mem::take(&mut self.carry)
    }

    fn replace(&mut self) {
        for (needle, mask) in &self.needles {
            let mut from = 0;
            while let Some(at) = find(&self.carry[from..], needle) {
                let at = from + at;
                self.carry[at..at + needle.len()].copy_from_slice(mask);
                from = at + needle.len();
            }
        }
    }
}

/// Finds placeholders in a byte stream fed in pieces (a request body): none belongs there.
pub struct Detector<'a> {
    vault: &'a Vault,
    target: Target,
    tls: bool,
    tail: Vec<u8>,
}

impl<'a> Detector<'a> {
    pub fn new(vault: &'a Vault, target: &Target, tls: bool) -> Self {
        Self {
            vault,
            target: target.clone(),
            tls,
            tail: Vec::new(),
        }
    }

    /// An exfiltration attempt once `data` completes a placeholder (with what came before).
    pub fn feed(&mut self, data: &[u8]) -> Option<Exfiltration> {
        let keep = self.vault.longest_placeholder().saturating_sub(1);
        if keep == 0 {
            return None;
        }
        self.tail.extend_from_slice(data);
        let found =
            self.vault
                .placeholder_in(&self.tail, &self.target, self.tls, "the request body");
        let cut = self.tail.len().saturating_sub(keep);
        self.tail.drain(..cut);
        found
    }
}

/// A secret file: regular, not a link, readable by its owner only, small.
fn read_secret_file(name: &str, path: &std::path::Path) -> Result<String, SecretError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let err = |why: String| SecretError::File {
        name: name.to_owned(),
        path: path.to_path_buf(),
        why,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            err(format!(
                "cannot open it ({e}); it must be a regular file, not a link"
            ))
        })?;
    let meta = file.metadata().map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("not a regular file".into()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(err(format!(
            "its mode is {:04o}; a credential file must be readable by its owner only \
             (`chmod 600 {}`)",
            meta.mode() & 0o7777,
            path.display()
        )));
    }
    let mut text = String::new();
    file.take(MAX_SECRET as u64 + 2)
        .read_to_string(&mut text)
        .map_err(|e| err(format!("cannot read it as text: {e}")))?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    let value = value.strip_suffix('\r').unwrap_or(value);
    Ok(value.to_owned())
}

/// The first occurrence of `needle`: a scan for its first byte, then a compare (a response is
/// scrubbed with this at relay speed).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, _) = needle.split_first()?;
    let last_start = haystack.len().checked_sub(needle.len())?;
    let mut at = 0;
    while at <= last_start {
        at += haystack[at..=last_start].iter().position(|&b| b == first)?;
        if &haystack[at..at + needle.len()] == needle {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// `n` random hexadecimal characters.
fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n.div_ceil(2)];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !filled {
        // The placeholder is not a secret (it only names a credential), but unpredictable.
        let mut x = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9)
            ^ u64::from(std::process::id()) << 32;
        for b in bytes.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }
    let mut out: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn rule(name: &str, hosts: &[&str], inject: Inject) -> CredentialRule {
        CredentialRule {
            name: name.into(),
            hosts: hosts
                .iter()
                .map(|h| BoundHost {
                    pattern: HostPattern::parse(h).unwrap(),
                    plain_http: false,
                })
                .collect(),
            env: "TOKEN".into(),
            source: SecretSource::Env("REAL".into()),
            inject,
            site: Site {
                origin: "p.toml".into(),
                line: Some(7),
            },
        }
    }

    fn target(s: &str) -> Target {
        Target::parse_authority(s).unwrap()
    }

    const REAL: &str = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";

    fn vault() -> Vault {
        Vault::from_secrets(vec![
            Secret::new(
                rule(
                    "github",
                    &["github.com"],
                    Inject::Basic("x-access-token".into()),
                ),
                REAL.into(),
            )
            .unwrap(),
        ])
    }

    #[test]
    fn a_placeholder_has_the_real_values_length_when_it_can() {
        let v = vault();
        let p = v.secrets()[0].placeholder();
        assert!(p.starts_with("cordon-cred-github-"), "{p}");
        assert_eq!(p.len(), REAL.len());
        let short = Secret::new(rule("k", &["h"], Inject::Bearer), "abc".into()).unwrap();
        assert_eq!(
            short.placeholder().len(),
            "cordon-cred-k-".len() + MIN_RANDOM
        );
        assert_eq!(short.mask().len(), 3);
        assert!(Secret::new(rule("k", &["h"], Inject::Bearer), "a\nb".into()).is_err());
    }

    #[test]
    fn a_bound_host_gets_the_real_value_only_in_the_inject_field() {
        let v = vault();
        let p = v.secrets()[0].placeholder().to_owned();
        let basic = format!(
            "Basic {}",
            base64_encode(format!("x-access-token:{p}").as_bytes())
        );
        let path = "/x?page=2".to_owned();
        let mut headers = vec![
            ("authorization".to_owned(), basic),
            ("Accept-Encoding".to_owned(), "gzip".to_owned()),
            ("Range".to_owned(), "bytes=0-9".to_owned()),
            ("If-Range".to_owned(), "\"e\"".to_owned()),
        ];
        let got = v
            .rewrite(&path, &mut headers, &target("github.com:443"), true)
            .unwrap();
        assert_eq!(got.names, vec!["github".to_owned()]);
        assert_eq!(path, "/x?page=2");
        let want = format!(
            "Basic {}",
            base64_encode(format!("x-access-token:{REAL}").as_bytes())
        );
        assert_eq!(headers[0].1, want);
        assert_eq!(
            headers.last().unwrap(),
            &("Accept-Encoding".into(), "identity".into())
        );
        assert_eq!(headers.len(), 2, "Range and If-Range dropped: {headers:?}");
        let mut bearer = vec![("Authorization".to_owned(), format!("Bearer {p}"))];
        v.rewrite(&path, &mut bearer, &target("github.com:443"), true)
            .unwrap();
        assert_eq!(bearer[0].1, format!("Bearer {REAL}"));
        // Anywhere else toward the bound host: refused, nothing substituted.
        for (path, headers, place) in [
            (format!("/x?token={p}"), vec![], "the request target"),
            (
                "/".to_owned(),
                vec![("X-Other".to_owned(), format!("t {p}"))],
                "the `X-Other` header",
            ),
            (
                "/".to_owned(),
                vec![(
                    "Cookie".to_owned(),
                    format!("Basic {}", base64_encode(format!("u:{p}").as_bytes())),
                )],
                "the `Cookie` header",
            ),
        ] {
            let (path, mut headers) = (path, headers);
            let before = (path.clone(), headers.clone());
            let e = v
                .rewrite(&path, &mut headers, &target("github.com:443"), true)
                .unwrap_err();
            assert!(e.misplaced.is_some(), "{e}");
            let text = e.to_string();
            assert!(text.contains(place), "{text}");
            assert!(
                text.contains("only into the `Authorization` header"),
                "{text}"
            );
            assert_eq!((path, headers), before, "nothing changed");
        }
    }

    #[test]
    fn a_bound_host_without_the_credential_gets_it_added() {
        let v = vault();
        let path = "/".to_owned();
        let mut headers = vec![("Host".to_owned(), "github.com".to_owned())];
        v.rewrite(&path, &mut headers, &target("github.com:443"), true)
            .unwrap();
        let auth = headers.iter().find(|(n, _)| n == "Authorization").unwrap();
        let decoded = base64_decode_within(auth.1.strip_prefix("Basic ").unwrap(), 1000).unwrap();
        assert_eq!(decoded, format!("x-access-token:{REAL}").into_bytes());
        // Over plain HTTP it is not bound (no `http://` host), so nothing is added.
        let mut headers = vec![("Host".to_owned(), "github.com".to_owned())];
        let got = v
            .rewrite(&path, &mut headers, &target("github.com:80"), false)
            .unwrap();
        assert!(got.names.is_empty() && headers.len() == 1);
    }

    #[test]
    fn a_placeholder_to_an_unbound_host_is_an_exfiltration() {
        let v = vault();
        let p = v.secrets()[0].placeholder().to_owned();
        for (path, headers) in [
            (format!("/?t={p}"), vec![]),
            ("/".to_owned(), vec![("X-Leak".to_owned(), p.clone())]),
            (
                "/".to_owned(),
                vec![(
                    "Authorization".to_owned(),
                    format!("Basic {}", base64_encode(format!("u:{p}").as_bytes())),
                )],
            ),
        ] {
            let (path, mut headers) = (path, headers);
            let before = (path.clone(), headers.clone());
            let e = v
                .rewrite(&path, &mut headers, &target("evil.example:443"), true)
                .unwrap_err();
            assert_eq!(e.credential, "github");
            assert!(e.to_string().contains("policy line 7 of p.toml"), "{e}");
            assert_eq!((path, headers), before, "nothing changed");
        }
        let body = format!("data={p}&x=1");
        let mut d = Detector::new(&v, &target("evil.example:443"), true);
        let (a, b) = body.as_bytes().split_at(10);
        assert!(d.feed(a).is_none());
        assert!(d.feed(b).is_some(), "found across pieces");
        let mut d = Detector::new(&v, &target("github.com:443"), true);
        let e = d
            .feed(body.as_bytes())
            .expect("bound: misplaced in the body");
        assert!(
            e.misplaced.is_some() && e.place == "the request body",
            "{e}"
        );
    }

    #[test]
    fn an_echoed_real_value_is_scrubbed_across_pieces() {
        let v = vault();
        let p = v.secrets()[0].placeholder().to_owned();
        let text = format!("{{\"auth\":\"{REAL}\",\"again\":\"{REAL}\"}}");
        for split in [0, 5, 12, 20, text.len()] {
            let mut s = v.scrubber();
            let (a, b) = text.as_bytes().split_at(split);
            let mut out = s.feed(a);
            out.extend(s.feed(b));
            out.extend(s.finish());
            assert_eq!(out.len(), text.len());
            let out = String::from_utf8(out).unwrap();
            assert!(!out.contains(REAL), "{out}");
            assert_eq!(out.matches(&p).count(), 2, "{out}");
        }
    }

    #[test]
    fn a_base64_echo_is_scrubbed_at_every_alignment() {
        let v = vault();
        for prefix in ["", "x", "xy", "Bearer ", "x-access-token:"] {
            for url_safe in [false, true] {
                let mut encoded = base64_encode(format!("{prefix}{REAL}!").as_bytes());
                if url_safe {
                    encoded = encoded.replace('+', "-").replace('/', "_");
                }
                let mut s = v.scrubber();
                let mut out = s.feed(encoded.as_bytes());
                out.extend(s.finish());
                assert_eq!(out.len(), encoded.len());
                let std_text = String::from_utf8(out).unwrap();
                let decoded =
                    base64_decode_within(&std_text.replace('-', "+").replace('_', "/"), 4096)
                        .unwrap();
                let decoded = String::from_utf8_lossy(&decoded);
                assert!(!decoded.contains(REAL), "{prefix:?}: {decoded}");
                // At most two characters at each end survive (the groups they share).
                assert!(
                    !decoded.contains(&REAL[2..REAL.len() - 2]),
                    "{prefix:?}: {decoded}"
                );
            }
        }
    }

    #[test]
    fn inject_forms_parse_and_explain_themselves() {
        assert_eq!(Inject::parse("bearer"), Ok(Inject::Bearer));
        assert_eq!(
            Inject::parse("basic:x-access-token"),
            Ok(Inject::Basic("x-access-token".into()))
        );
        assert_eq!(
            Inject::parse("header:X-Api-Key"),
            Ok(Inject::Header("X-Api-Key".into()))
        );
        for bad in ["", "Bearer", "basic:", "header:a b", "header:Host", "token"] {
            assert!(Inject::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_secret_file_must_be_private_and_not_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tok");
        std::fs::write(&f, "s3cret\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_secret_file("t", &f).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret_file("t", &f).unwrap(), "s3cret");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(read_secret_file("t", &link).is_err());
    }
}
