//! Who made an authenticated request.
//!
//! A request's [`Subject`] is a tagged value, compared as such: the static token's holder,
//! a JWT's (issuer, `sub`) pair, or anonymous. No `sub` a token carries can make it equal
//! another kind's subject, and the same `sub` of two issuers are two subjects; sessions and
//! stateless scopes belong to one.
//!
//! Its display is what the audit log names: distinct subjects always display differently.

/// Who made an authenticated request, put in the request's extensions for the session
/// owner check, the stateless scopes and the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// No authentication is required (loopback without a token): every client is this one.
    Anonymous,
    /// The holder of the static token: one token, one subject.
    StaticToken,
    /// A named holder of a token file of several entries (`token_file`).
    TokenHolder(String),
    /// A JWT access token's `sub`, as its issuer vouched for it.
    Jwt { issuer: String, sub: String },
}

/// What a request's credentials grant: every tool (the static token's holder, or a server
/// that needs no token), or the tools whose `[server.http.scopes]` scope a JWT's `scope`
/// claim names. Put in the request's extensions beside its [`Subject`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    Everything,
    Scopes(std::collections::BTreeSet<String>),
}

impl Granted {
    pub fn allows(&self, scope: &str) -> bool {
        match self {
            Self::Everything => true,
            Self::Scopes(scopes) => scopes.contains(scope),
        }
    }

    /// The scopes granted, for a message (`everything` for the static token).
    pub fn describe(&self) -> String {
        match self {
            Self::Everything => "every scope".into(),
            Self::Scopes(s) if s.is_empty() => "no scope".into(),
            Self::Scopes(s) => s.iter().cloned().collect::<Vec<_>>().join(" "),
        }
    }
}

/// The groups a request's credentials put its subject in (a JWT's group claim, a token
/// file entry's `group=` words): they select the policy of the subject's workspace
/// (`server::workspaces`). Put in the request's extensions beside its [`Subject`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Groups(pub std::collections::BTreeSet<String>);

/// How the static token's holder is named in the audit log.
pub(crate) const BEARER_SUBJECT: &str = "bearer";

impl std::fmt::Display for Subject {
    /// `anonymous`, `bearer`, or `jwt:<issuer>#<sub>` with `%`, `#` and control characters
    /// of both percent-encoded: distinct subjects are always displayed differently.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Anonymous => f.write_str("anonymous"),
            Self::StaticToken => f.write_str(BEARER_SUBJECT),
            // Names are `[A-Za-z0-9._-]`: nothing to escape, and `bearer:` is no JWT's prefix.
            Self::TokenHolder(name) => write!(f, "{BEARER_SUBJECT}:{name}"),
            Self::Jwt { issuer, sub } => {
                write!(f, "jwt:{}#{}", escape(issuer), escape(sub))
            }
        }
    }
}

/// Percent-encodes what would make a displayed JWT subject ambiguous or unprintable.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' || c == '#' || c.is_control() {
            let mut bytes = [0u8; 4];
            for b in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}
