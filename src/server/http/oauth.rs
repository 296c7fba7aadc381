//! cordon as an OAuth 2.1 resource server (`[server.http.oauth]`): JWT access tokens of one
//! authorization server, checked against the keys of a JWKS file, and the protected-resource
//! metadata (RFC 9728) that tells a client where to get one.
//!
//! A token is accepted only when its signature verifies with a key of the file under an
//! algorithm of the allow-list (asymmetric only: no `none`, no HS*, so a public key can never
//! serve as an HMAC secret), and its `iss`, `aud`, `exp` (and `nbf`, when present) hold, with a
//! minute of clock leeway; `sub` names the subject in the audit log. The key is chosen by the
//! header's `kid` (or is the file's only key) and must be of the header algorithm's family.
//! cordon fetches nothing: rotating keys means replacing the file and restarting. It does not
//! own the static token (`auth`) nor the 401 responses (`http`).

use crate::policy::OAuthPolicy;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use std::collections::HashSet;
use std::path::PathBuf;
use std::str::FromStr;

/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 60;

/// Where the metadata is served, for the server's one endpoint (`/mcp`): RFC 9728 §3.1 puts a
/// resource's path after the well-known prefix; the bare prefix is served too.
pub(crate) const METADATA_PATHS: [&str; 2] = [
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-protected-resource",
];

pub struct JwtVerifier {
    keys: Vec<Key>,
    /// The one issuer whose tokens are accepted: half of every JWT subject.
    issuer: String,
    validation: Validation,
    required_scopes: Vec<String>,
    /// The metadata document, built once.
    metadata: String,
    /// Its URL, for `WWW-Authenticate: Bearer resource_metadata="…"`.
    metadata_url: String,
    /// The claim naming a token's groups (`server.http.group_claim`).
    group_claim: String,
}

struct Key {
    kid: Option<String>,
    /// The JWK's own `alg`, when it names one: then only that algorithm may use it.
    alg: Option<Algorithm>,
    key: DecodingKey,
    family: jsonwebtoken::AlgorithmFamily,
}

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("cannot read the JWKS file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the JWKS file {path} is not a JSON Web Key Set ({{\"keys\": [...]}}): {message}")]
    Parse { path: PathBuf, message: String },
    #[error("the JWKS file {path} holds no key cordon can use: {why}")]
    NoKeys { path: PathBuf, why: String },
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    /// The other claims, for the group claim (`server.http.group_claim`).
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// Most groups read from a token, and the longest name kept: a token is the authorization
/// server's word, but its size is not ours to trust.
const MAX_GROUPS: usize = 256;
const MAX_GROUP_NAME: usize = 256;

/// The groups a claim's value names: a string is one group, an array its strings (anything
/// else, or a name too long, names none).
fn groups_of(value: Option<&serde_json::Value>) -> std::collections::BTreeSet<String> {
    let keep = |s: &str| !s.is_empty() && s.len() <= MAX_GROUP_NAME;
    match value {
        Some(serde_json::Value::String(s)) if keep(s) => std::iter::once(s.clone()).collect(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(serde_json::Value::as_str)
            .filter(|s| keep(s))
            .take(MAX_GROUPS)
            .map(str::to_owned)
            .collect(),
        _ => Default::default(),
    }
}

/// What a valid token says: who, the scopes granted, the groups named.
pub struct Verified {
    pub subject: super::subject::Subject,
    pub scopes: std::collections::BTreeSet<String>,
    pub groups: std::collections::BTreeSet<String>,
}

impl JwtVerifier {
    /// `tool_scopes`: the scopes the tools need (`[server.http.scopes]`), listed in the
    /// metadata's `scopes_supported` with the required ones.
    pub fn load(policy: &OAuthPolicy, tool_scopes: &[String]) -> Result<Self, OAuthError> {
        let path = &policy.jwks_file;
        let text = std::fs::read_to_string(path).map_err(|source| OAuthError::Read {
            path: path.clone(),
            source,
        })?;
        let set: JwkSet = serde_json::from_str(&text).map_err(|e| OAuthError::Parse {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let mut keys = Vec::new();
        let mut skipped = Vec::new();
        for jwk in &set.keys {
            match key_of(jwk) {
                Ok(key) => keys.push(key),
                Err(why) => skipped.push(why),
            }
        }
        for s in &skipped {
            tracing::warn!("JWKS {}: key skipped: {s}", path.display());
        }
        if keys.is_empty() {
            return Err(OAuthError::NoKeys {
                path: path.clone(),
                why: if skipped.is_empty() {
                    "it is empty".into()
                } else {
                    skipped.join("; ")
                },
            });
        }
        let validation = validation(policy);
        let origin = url_origin(&policy.resource);
        let metadata_url = format!("{origin}{}", METADATA_PATHS[0]);
        let mut metadata = serde_json::json!({
            "resource": policy.resource,
            "authorization_servers": [policy.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "cordon",
        });
        let supported: std::collections::BTreeSet<&String> =
            policy.required_scopes.iter().chain(tool_scopes).collect();
        if !supported.is_empty() {
            metadata["scopes_supported"] = serde_json::json!(supported);
        }
        Ok(Self {
            keys,
            issuer: policy.issuer.clone(),
            validation,
            required_scopes: policy.required_scopes.clone(),
            metadata: metadata.to_string(),
            metadata_url,
            group_claim: "groups".to_owned(),
        })
    }

    /// Reads a token's groups from `claim` instead of `groups`.
    pub fn with_group_claim(mut self, claim: &str) -> Self {
        self.group_claim = claim.to_owned();
        self
    }

    /// The subject (issuer and `sub`) of a valid token, or `None` (the tests' view).
    #[cfg(test)]
    pub fn verify(&self, token: &str) -> Option<super::subject::Subject> {
        self.verify_granting(token).map(|v| v.subject)
    }

    /// The subject of a valid token, the scopes its `scope` claim grants and the groups its
    /// group claim names.
    pub fn verify_granting(&self, token: &str) -> Option<Verified> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        if !self.validation.algorithms.contains(&header.alg) {
            return None;
        }
        let candidates: Vec<&Key> = match &header.kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(|k| k.kid.as_deref() == Some(kid))
                .collect(),
            None if self.keys.len() == 1 => self.keys.iter().collect(),
            None => return None,
        };
        let key = candidates
            .into_iter()
            .find(|k| k.family == header.alg.family() && k.alg.is_none_or(|a| a == header.alg))?;
        // jsonwebtoken wants every listed algorithm of the key's family: list just this one
        // (it is on the allow-list, checked above).
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &validation).ok()?;
        let granted: HashSet<&str> = data
            .claims
            .scope
            .as_deref()
            .unwrap_or("")
            .split_ascii_whitespace()
            .collect();
        if !self
            .required_scopes
            .iter()
            .all(|s| granted.contains(s.as_str()))
        {
            return None;
        }
        // `iss` was validated to be this issuer.
        let sub = data.claims.sub.filter(|s| !s.is_empty())?;
        let scopes = granted.iter().map(|s| (*s).to_owned()).collect();
        let groups = groups_of(data.claims.rest.get(&self.group_claim));
        Some(Verified {
            subject: super::subject::Subject::Jwt {
                issuer: self.issuer.clone(),
                sub,
            },
            scopes,
            groups,
        })
    }

    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }
}

/// One key of the JWKS as the verifier uses it, or why it is skipped (symmetric, an
/// unsupported type or algorithm, a malformed key).
fn key_of(jwk: &jsonwebtoken::jwk::Jwk) -> Result<Key, String> {
    let kid = jwk.common.key_id.clone();
    let name = kid.clone().unwrap_or_else(|| "(no kid)".into());
    let family = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => jsonwebtoken::AlgorithmFamily::Rsa,
        AlgorithmParameters::EllipticCurve(_) => jsonwebtoken::AlgorithmFamily::Ec,
        AlgorithmParameters::OctetKeyPair(p) => {
            // The verifier reads 32 bytes of `x`; a shorter one is no Ed25519 key.
            let x = base64_url_len(&p.x);
            if x != Some(32) {
                return Err(format!("{name}: an OKP key whose x is not 32 bytes"));
            }
            jsonwebtoken::AlgorithmFamily::Ed
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err(format!("{name}: a symmetric (oct) key"));
        }
        _ => {
            return Err(format!("{name}: an unsupported key type"));
        }
    };
    let alg = match jwk.common.key_algorithm {
        Some(a) => match Algorithm::from_str(&a.to_string()) {
            Ok(a) => Some(a),
            Err(_) => {
                return Err(format!("{name}: algorithm {a} is not a signature one"));
            }
        },
        None => None,
    };
    match DecodingKey::from_jwk(jwk) {
        Ok(key) => Ok(Key {
            kid,
            alg,
            key,
            family,
        }),
        Err(e) => Err(format!("{name}: {e}")),
    }
}

/// What every token is checked against: the policy's algorithms, issuer and audience, a
/// small leeway, and the claims that must be there.
fn validation(policy: &OAuthPolicy) -> Validation {
    let algorithms: Vec<Algorithm> = policy
        .algorithms
        .iter()
        .filter_map(|a| Algorithm::from_str(a).ok())
        .collect();
    let mut validation = Validation::new(algorithms[0]);
    validation.algorithms = algorithms;
    validation.set_issuer(&[&policy.issuer]);
    validation.set_audience(&[&policy.audience]);
    validation.validate_nbf = true;
    validation.leeway = LEEWAY_SECS;
    validation.required_spec_claims = ["exp", "iss", "aud", "sub"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect::<HashSet<_>>();
    validation
}

/// `scheme://authority` of a URL (the metadata lives at the origin's well-known path).
fn url_origin(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(uri) => match (uri.scheme_str(), uri.authority()) {
            (Some(scheme), Some(authority)) => format!("{scheme}://{authority}"),
            _ => url.trim_end_matches('/').to_owned(),
        },
        Err(_) => url.trim_end_matches('/').to_owned(),
    }
}

/// The decoded length of unpadded base64url text, if it is such.
fn base64_url_len(text: &str) -> Option<usize> {
    let valid = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (valid && text.len() % 4 != 1).then(|| text.len() * 3 / 4)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};

    /// A test-only Ed25519 key pair (PKCS#8 DER, and the public key's `x`), and another key
    /// the JWKS does not hold.
    pub(crate) const TRUSTED_DER: &str = "302e020100300506032b657004220420764680f3dc521693994272b5f3a247f186a57bc91c0c1d6666f9ed074bab63b2";
    pub(crate) const TRUSTED_X: &str = "qTgB9HSbavbEQHGFS2H-9bGmF-loX2WiqgSHXXx2Tgc";
    pub(crate) const STRANGER_DER: &str = "302e020100300506032b6570042204207cc52f027d1a4607bd0c9967425158a837c780a0c8a20bf367e712078fffdb36";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn sign(der: &str, claims: serde_json::Value, kid: Option<&str>) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ed_der(&hex(der))).unwrap()
    }

    fn claims(extra: serde_json::Value) -> serde_json::Value {
        let mut c = serde_json::json!({
            "iss": "https://auth.example", "aud": "https://cordon.example/mcp",
            "sub": "alice", "exp": now() + 600, "scope": "mcp:tools other"
        });
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    }

    fn verifier(dir: &std::path::Path, extra_keys: serde_json::Value) -> JwtVerifier {
        let mut keys = vec![serde_json::json!({
            "kty": "OKP", "crv": "Ed25519", "x": TRUSTED_X, "kid": "k1", "alg": "EdDSA"})];
        keys.extend(extra_keys.as_array().unwrap().iter().cloned());
        let path = dir.join("jwks.json");
        std::fs::write(&path, serde_json::json!({ "keys": keys }).to_string()).unwrap();
        JwtVerifier::load(
            &OAuthPolicy {
                issuer: "https://auth.example".into(),
                audience: "https://cordon.example/mcp".into(),
                jwks_file: path,
                resource: "https://cordon.example/mcp".into(),
                algorithms: vec!["EdDSA".into(), "RS256".into()],
                required_scopes: vec!["mcp:tools".into()],
            },
            &[],
        )
        .unwrap()
    }

    #[test]
    fn a_valid_token_names_its_subject_and_every_broken_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let v = verifier(dir.path(), serde_json::json!([]));
        let good = sign(TRUSTED_DER, claims(serde_json::json!({})), Some("k1"));
        assert_eq!(
            v.verify(&good),
            Some(super::super::subject::Subject::Jwt {
                issuer: "https://auth.example".into(),
                sub: "alice".into()
            })
        );
        let cases = [
            (
                "wrong issuer",
                sign(
                    TRUSTED_DER,
                    claims(serde_json::json!({"iss": "https://evil"})),
                    Some("k1"),
                ),
            ),
            (
                "wrong audience",
                sign(
                    TRUSTED_DER,
                    claims(serde_json::json!({"aud": "https://other/mcp"})),
                    Some("k1"),
                ),
            ),
            (
                "expired",
                sign(
                    TRUSTED_DER,
                    claims(serde_json::json!({"exp": now() - 3600})),
                    Some("k1"),
                ),
            ),
            (
                "not yet valid",
                sign(
                    TRUSTED_DER,
                    claims(serde_json::json!({"nbf": now() + 3600})),
                    Some("k1"),
                ),
            ),
            (
                "missing scope",
                sign(
                    TRUSTED_DER,
                    claims(serde_json::json!({"scope": "other"})),
                    Some("k1"),
                ),
            ),
            (
                "signed by a stranger",
                sign(STRANGER_DER, claims(serde_json::json!({})), Some("k1")),
            ),
            (
                "unknown kid",
                sign(TRUSTED_DER, claims(serde_json::json!({})), Some("k9")),
            ),
        ];
        for (what, token) in cases {
            assert_eq!(v.verify(&token), None, "{what} was accepted");
        }
        // A token with `alg: none` and one whose signature was cut off.
        let parts: Vec<&str> = good.split('.').collect();
        // base64url of {"alg":"none","typ":"JWT","kid":"k1"}
        let none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIiwia2lkIjoiazEifQ";
        assert_eq!(v.verify(&format!("{none}.{}.", parts[1])), None);
        assert_eq!(v.verify(&format!("{}.{}.", parts[0], parts[1])), None);
        assert_eq!(v.verify("not-a-jwt"), None);
    }

    #[test]
    fn an_hmac_token_made_with_a_public_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // An oct key in the file is skipped, never used.
        let v = verifier(
            dir.path(),
            serde_json::json!([{"kty": "oct", "k": "c2VjcmV0", "kid": "hs"}]),
        );
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        let forged = jsonwebtoken::encode(
            &header,
            &claims(serde_json::json!({})),
            &EncodingKey::from_secret(TRUSTED_X.as_bytes()).unwrap(),
        )
        .unwrap();
        assert_eq!(v.verify(&forged), None);
        header.kid = Some("hs".into());
        let with_oct = jsonwebtoken::encode(
            &header,
            &claims(serde_json::json!({})),
            &EncodingKey::from_secret(b"secret").unwrap(),
        )
        .unwrap();
        assert_eq!(v.verify(&with_oct), None);
    }

    #[test]
    fn the_metadata_names_the_resource_and_its_authorization_server() {
        let dir = tempfile::tempdir().unwrap();
        let v = verifier(dir.path(), serde_json::json!([]));
        let m: serde_json::Value = serde_json::from_str(v.metadata()).unwrap();
        assert_eq!(m["resource"], "https://cordon.example/mcp");
        assert_eq!(m["authorization_servers"][0], "https://auth.example");
        assert_eq!(m["scopes_supported"][0], "mcp:tools");
        assert_eq!(
            v.metadata_url(),
            "https://cordon.example/.well-known/oauth-protected-resource/mcp"
        );
    }
}
