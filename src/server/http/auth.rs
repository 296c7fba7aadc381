//! Bearer-token authentication of every HTTP request.
//!
//! The operator gives the token in a file (`--http-token-file`) or names an environment
//! variable that holds it (`--http-token-env`); never on the command line, where `ps` shows
//! it. The server keeps only its SHA-256 digest and compares digests in constant time, so
//! neither the comparison's timing nor a memory dump of the request path gives the token
//! away. With `[server.http.oauth]`, JWT access tokens are accepted too (`oauth`). A request
//! without a token, or with another, gets 401 with `WWW-Authenticate: Bearer` (RFC 6750:
//! `error="invalid_token"` for a wrong one). The token is never logged,
//! audited or echoed in an error; the audit log names the subject `bearer`.
//!
//! A request's [`Subject`] (`subject`) is what checking it gives.
//!
//! Owns loading and checking the token; the decision to refuse a non-loopback bind without
//! one is the caller's (`http::serve`).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

pub(crate) use super::subject::{Granted, Groups, Subject};

/// Where the token comes from.
#[derive(Debug, Clone)]
pub enum TokenSource {
    File(PathBuf),
    Env(String),
}

/// Shortest token accepted without a warning (bytes).
const WEAK_TOKEN_LEN: usize = 32;

pub struct Authenticator {
    digest: Option<[u8; 32]>,
    /// A token file of several named holders, each with its scopes (`token_file`).
    holders: Vec<super::token_file::Holder>,
    /// `[server.http.oauth]`: JWT access tokens, besides the static token.
    jwt: Option<super::oauth::JwtVerifier>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read the HTTP token file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the HTTP token file {0} is empty: put a long random token in it (e.g. `openssl rand -hex 32 > FILE`)"
    )]
    EmptyFile(PathBuf),
    #[error("the environment variable {0} named by --http-token-env is not set")]
    EnvUnset(String),
    #[error(
        "the environment variable {0} named by --http-token-env is empty: set it to a long random token"
    )]
    EnvEmpty(String),
    #[error(
        "the HTTP token from {0} holds characters a bearer token cannot (RFC 6750 allows letters, digits and -._~+/ with trailing =); a hex or base64 token fits"
    )]
    BadCharacters(String),
    #[error(
        "the HTTP token file {path} is a file of holders (its first entry starts with sha256:), but {why}; each entry is `sha256:<hex of the token's SHA-256> <name> <scope>...` (`*`: every scope)"
    )]
    Entries { path: PathBuf, why: String },
}

/// Why a request was not authenticated (the 401's `WWW-Authenticate` differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A bearer token that is not this server's.
    Invalid,
}

impl Authenticator {
    /// No authentication (loopback only; the caller enforces that).
    pub fn none() -> Self {
        Self {
            digest: None,
            holders: Vec::new(),
            jwt: None,
        }
    }

    /// Also accepts JWT access tokens this verifier finds valid.
    pub fn with_jwt(mut self, jwt: super::oauth::JwtVerifier) -> Self {
        self.jwt = Some(jwt);
        self
    }

    pub fn jwt(&self) -> Option<&super::oauth::JwtVerifier> {
        self.jwt.as_ref()
    }

    pub fn load(source: &TokenSource) -> Result<Self, AuthError> {
        let (token, named) = match source {
            TokenSource::File(path) => {
                warn_if_readable_by_others(path);
                let text = std::fs::read_to_string(path).map_err(|source| AuthError::ReadFile {
                    path: path.clone(),
                    source,
                })?;
                if super::token_file::is_entries(&text) {
                    let holders =
                        super::token_file::parse(&text).map_err(|why| AuthError::Entries {
                            path: path.clone(),
                            why,
                        })?;
                    return Ok(Self {
                        digest: None,
                        holders,
                        jwt: None,
                    });
                }
                // One trailing newline (an editor's, `echo`'s) is not part of the token.
                let token = text.trim_end_matches(['\n', '\r']).to_owned();
                if token.is_empty() {
                    return Err(AuthError::EmptyFile(path.clone()));
                }
                (token, path.display().to_string())
            }
            TokenSource::Env(var) => {
                let token = std::env::var(var).map_err(|_| AuthError::EnvUnset(var.clone()))?;
                if token.is_empty() {
                    return Err(AuthError::EnvEmpty(var.clone()));
                }
                (token, format!("${var}"))
            }
        };
        if !is_token68(&token) {
            return Err(AuthError::BadCharacters(named));
        }
        if token.len() < WEAK_TOKEN_LEN {
            tracing::warn!(
                "the HTTP token from {named} is only {} characters; use at least {WEAK_TOKEN_LEN} \
                 random ones",
                token.len()
            );
        }
        Ok(Self {
            digest: Some(Sha256::digest(token.as_bytes()).into()),
            holders: Vec::new(),
            jwt: None,
        })
    }

    pub fn is_required(&self) -> bool {
        self.digest.is_some() || !self.holders.is_empty() || self.jwt.is_some()
    }

    /// Checks a request's `Authorization` headers (the tests' view: who it is).
    #[cfg(test)]
    pub fn check(&self, headers: &http::HeaderMap) -> Result<Subject, Unauthenticated> {
        self.authenticate(headers).map(|(subject, _, _)| subject)
    }

    /// Checks a request's `Authorization` headers: who it is, what its token grants and
    /// which groups it names.
    pub fn authenticate(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<(Subject, Granted, Groups), Unauthenticated> {
        if !self.is_required() {
            return Ok((Subject::Anonymous, Granted::Everything, Groups::default()));
        }
        let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            // None, or several (which one would a proxy have checked?).
            return Err(if headers.contains_key(http::header::AUTHORIZATION) {
                Unauthenticated::Invalid
            } else {
                Unauthenticated::Missing
            });
        };
        let Some(presented) = bearer_token(value.as_bytes()) else {
            return Err(Unauthenticated::Missing);
        };
        let digest: [u8; 32] = Sha256::digest(presented).into();
        if let Some(expected) = &self.digest
            && bool::from(digest.ct_eq(expected))
        {
            return Ok((Subject::StaticToken, Granted::Everything, Groups::default()));
        }
        // Every holder's digest is compared (no early end): which one matched is not timed.
        let mut matched = None;
        for holder in &self.holders {
            if bool::from(digest.ct_eq(&holder.digest)) {
                matched = Some(holder);
            }
        }
        if let Some(holder) = matched {
            let granted = match &holder.scopes {
                None => Granted::Everything,
                Some(scopes) => Granted::Scopes(scopes.clone()),
            };
            return Ok((
                Subject::TokenHolder(holder.name.clone()),
                granted,
                Groups(holder.groups.clone()),
            ));
        }
        self.jwt
            .as_ref()
            .and_then(|jwt| {
                std::str::from_utf8(presented)
                    .ok()
                    .and_then(|t| jwt.verify_granting(t))
            })
            .map(|v| (v.subject, Granted::Scopes(v.scopes), Groups(v.groups)))
            .ok_or(Unauthenticated::Invalid)
    }

    /// The `WWW-Authenticate` value of a 401: RFC 6750's, with RFC 9728's
    /// `resource_metadata` when cordon is an OAuth resource server.
    pub fn challenge(&self, why: Unauthenticated) -> String {
        let mut value = "Bearer realm=\"cordon\"".to_owned();
        if let Some(jwt) = &self.jwt {
            value.push_str(&format!(", resource_metadata=\"{}\"", jwt.metadata_url()));
        }
        if why == Unauthenticated::Invalid {
            value.push_str(
                ", error=\"invalid_token\", error_description=\"the bearer token is not valid \
                 for this server\"",
            );
        }
        value
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive), or `None` for another scheme.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn is_token68(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

/// A token file others can read is a token others have.
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode();
        if mode & 0o044 != 0 {
            tracing::warn!(
                "the HTTP token file {} is readable by its group or others (mode {:o}); \
                 `chmod 600` it",
                path.display(),
                mode & 0o777
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_token(token: &str) -> Authenticator {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, format!("{token}\n")).unwrap();
        Authenticator::load(&TokenSource::File(path)).unwrap()
    }

    fn headers(values: &[&str]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for v in values {
            h.append(http::header::AUTHORIZATION, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_file_of_holders_names_each_holder_with_its_scopes() {
        let hex = |t: &str| {
            Sha256::digest(t.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(
            &path,
            format!(
                "sha256:{} rita cordon:read\nsha256:{} ops *\n",
                hex("rita-token-0123456789abcdef0123456789"),
                hex("ops-token-0123456789abcdef0123456789ab")
            ),
        )
        .unwrap();
        let auth = Authenticator::load(&TokenSource::File(path.clone())).unwrap();
        let (who, granted, _) = auth
            .authenticate(&headers(&["Bearer rita-token-0123456789abcdef0123456789"]))
            .unwrap();
        assert_eq!(who, Subject::TokenHolder("rita".into()));
        assert!(granted.allows("cordon:read") && !granted.allows("cordon:exec"));
        let (who, granted, _) = auth
            .authenticate(&headers(&["Bearer ops-token-0123456789abcdef0123456789ab"]))
            .unwrap();
        assert_eq!(who.to_string(), "bearer:ops");
        assert_eq!(granted, Granted::Everything);
        assert_eq!(
            auth.check(&headers(&["Bearer rita"])),
            Err(Unauthenticated::Invalid)
        );
        std::fs::write(&path, "sha256:00 rita x\n").unwrap();
        let e = Authenticator::load(&TokenSource::File(path)).err().unwrap();
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    #[test]
    fn only_the_exact_token_is_accepted() {
        let auth = with_token("s3cret-token-0123456789abcdef0123456789");
        let ok = auth.check(&headers(&[
            "Bearer s3cret-token-0123456789abcdef0123456789",
        ]));
        assert_eq!(ok, Ok(Subject::StaticToken));
        assert!(
            auth.check(&headers(&[
                "bearer s3cret-token-0123456789abcdef0123456789"
            ]))
            .is_ok()
        );
        for wrong in [
            "Bearer s3cret-token-0123456789abcdef012345678",
            "Bearer s3cret-token-0123456789abcdef0123456789x",
            "Bearer S3CRET-TOKEN-0123456789ABCDEF0123456789",
        ] {
            assert_eq!(
                auth.check(&headers(&[wrong])),
                Err(Unauthenticated::Invalid),
                "{wrong}"
            );
        }
        assert_eq!(auth.check(&headers(&[])), Err(Unauthenticated::Missing));
        assert_eq!(
            auth.check(&headers(&["Basic dXNlcjpwYXNz"])),
            Err(Unauthenticated::Missing)
        );
        assert_eq!(
            auth.check(&headers(&[
                "Bearer s3cret-token-0123456789abcdef0123456789",
                "Bearer other"
            ])),
            Err(Unauthenticated::Invalid),
            "two Authorization headers are refused"
        );
    }

    #[test]
    fn no_jwt_subject_equals_or_displays_as_another_subject() {
        let jwt = |issuer: &str, sub: &str| Subject::Jwt {
            issuer: issuer.into(),
            sub: sub.into(),
        };
        let all = [
            Subject::Anonymous,
            Subject::StaticToken,
            jwt("https://a.example", "bearer"),
            jwt("https://a.example", "jwt:bearer"),
            jwt("https://a.example", "anonymous"),
            jwt("https://b.example", "bearer"),
            // What a naive `issuer#sub` display would confuse.
            jwt("https://a.example#x", "y"),
            jwt("https://a.example", "x#y"),
            jwt("https://a.example", "x%23y"),
        ];
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                assert_eq!(i == j, a == b, "{a:?} vs {b:?}");
                assert_eq!(
                    i == j,
                    a.to_string() == b.to_string(),
                    "{a} displays like {b}"
                );
            }
        }
        assert_eq!(Subject::StaticToken.to_string(), "bearer");
        assert_eq!(
            jwt("https://a.example", "alice").to_string(),
            "jwt:https://a.example#alice"
        );
        assert_eq!(jwt("i", "a\nb").to_string(), "jwt:i#a%0Ab");
    }

    #[test]
    fn empty_and_malformed_tokens_are_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(matches!(
            Authenticator::load(&TokenSource::File(empty)),
            Err(AuthError::EmptyFile(_))
        ));
        let spaced = dir.path().join("spaced");
        std::fs::write(&spaced, "two words").unwrap();
        let err = Authenticator::load(&TokenSource::File(spaced))
            .err()
            .unwrap()
            .to_string();
        assert!(
            !err.contains("two words"),
            "the token is never echoed: {err}"
        );
        assert!(matches!(
            Authenticator::load(&TokenSource::Env("CORDON_TEST_SURELY_UNSET_VAR".into())),
            Err(AuthError::EnvUnset(_))
        ));
    }
}
