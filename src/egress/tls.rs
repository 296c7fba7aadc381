//! The TLS of interception: cordon's certificate authority, the leaf it mints per intercepted
//! host, and the client side that verifies the real upstream.
//!
//! Owns the keys and configurations. The authority is made once per server process (a new
//! key each start, kept in memory only: nothing of it is ever written but its certificate);
//! a leaf per host is minted on first use, valid for a day, and cached for half of that. The
//! upstream side trusts the host's system roots plus the policy's `extra_roots`, nothing
//! else, and never the authority itself: a failed verification is a refusal with rustls'
//! reason, never a fall-back. Both sides speak TLS 1.2 and 1.3 and offer ALPN `http/1.1`
//! only (no h2: the proxy reads HTTP/1.1 requests). The `ring` provider throughout.
//!
//! The sandbox trusts the authority through a bundle (the system bundle plus its
//! certificate) that the view binds over the distribution's bundle paths
//! ([`BUNDLE_PATHS`]), and the variables clients read ([`CA_BUNDLE_VARIABLES`]).

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The variables that point clients at a CA bundle, set (to the sandbox's bundle: the system
/// one plus cordon's interception CA, bound over the distribution's path by the view) when a
/// proxy-mode policy intercepts any host: OpenSSL and Python's `ssl` (`SSL_CERT_FILE`),
/// requests, curl, Node (in addition to its own store), git and pip.
pub(crate) const CA_BUNDLE_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

use super::pattern::Host;

/// The CA bundle paths of the common distributions (Debian/Ubuntu/Alpine, Fedora/RHEL,
/// openSUSE, and `cert.pem`); the view binds the sandbox's bundle over each that is a regular
/// file, and the variables name the first.
pub(crate) const BUNDLE_PATHS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
/// How long a minted leaf is valid (it is re-minted after half of it).
const LEAF_VALIDITY: Duration = Duration::from_secs(24 * 3600);
/// Largest system bundle copied into the sandbox's.
const MAX_BUNDLE: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make the interception certificate: {0}")]
    Mint(String),
    #[error("[network].extra_roots: {path}: {why}")]
    Roots { path: PathBuf, why: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// cordon's certificate authority for this server process.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    leaves: Mutex<HashMap<String, (Instant, Arc<rustls::ServerConfig>)>>,
}

impl Authority {
    /// The process's authority, made on first use.
    pub fn global() -> &'static Authority {
        static AUTHORITY: OnceLock<Authority> = OnceLock::new();
        AUTHORITY.get_or_init(|| Authority::new().expect("rcgen makes a P-256 CA in memory"))
    }

    fn new() -> Result<Self, TlsError> {
        let mint = |e: rcgen::Error| TlsError::Mint(e.to_string());
        let key = KeyPair::generate().map_err(mint)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(mint)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "cordon egress interception CA");
        dn.push(
            DnType::OrganizationName,
            "cordon (this server process only)",
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        // As long as the server may run: the CA lives (and its key exists, in memory only) for
        // this process alone, and is never renewed, so a 30-day CA broke every intercepted host
        // of a server up for a month. Leaves (24 h) always end inside it.
        params.not_after = now + time::Duration::days(3650);
        let cert = params.self_signed(&key).map_err(mint)?;
        Ok(Self {
            issuer: Issuer::new(params, key),
            cert_pem: cert.pem(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The authority's certificate (public), PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The server side of an intercepted connection to `host`: a leaf for it (cached).
    pub fn server_config(&self, host: &Host) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let key = host.to_string();
        if let Some((minted, config)) = lock(&self.leaves).get(&key)
            && minted.elapsed() < LEAF_VALIDITY / 2
        {
            return Ok(Arc::clone(config));
        }
        let config = Arc::new(self.mint(host)?);
        let mut leaves = lock(&self.leaves);
        if leaves.len() > 4096 {
            leaves.clear(); // a bound, not a policy: hosts are the policy's few
        }
        leaves.insert(key, (Instant::now(), Arc::clone(&config)));
        Ok(config)
    }

    /// Forgets every cached leaf (the benchmark's "without a cached leaf").
    pub fn forget_leaves(&self) {
        lock(&self.leaves).clear();
    }

    fn mint(&self, host: &Host) -> Result<rustls::ServerConfig, TlsError> {
        let mint = |e: rcgen::Error| TlsError::Mint(e.to_string());
        let key = KeyPair::generate().map_err(mint)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(mint)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.to_string());
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match host {
            Host::Ip(ip) => SanType::IpAddress(*ip),
            Host::Name(name) => SanType::DnsName(name.clone().try_into().map_err(mint)?),
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + time::Duration::seconds(LEAF_VALIDITY.as_secs() as i64);
        let cert = params.signed_by(&key, &self.issuer).map_err(mint)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The upstream side: the system roots plus `extra_roots` (PEM files), ALPN `http/1.1`.
pub(crate) fn client_config(
    extra_roots: &[PathBuf],
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if added == 0 && extra_roots.is_empty() {
        tracing::warn!(
            "egress: no system root certificates found; intercepted hosts will fail verification"
        );
    }
    for path in extra_roots {
        let err = |why: String| TlsError::Roots {
            path: path.clone(),
            why,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| err(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| err(e.to_string()))?;
        if certs.is_empty() {
            return Err(err("no PEM certificate in it".into()));
        }
        for c in certs {
            roots.add(c).map_err(|e| err(e.to_string()))?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The name the upstream certificate must carry.
pub(crate) fn server_name(host: &Host) -> Result<ServerName<'static>, TlsError> {
    match host {
        Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        Host::Name(n) => {
            ServerName::try_from(n.clone()).map_err(|e| TlsError::Config(format!("`{n}`: {e}")))
        }
    }
}

/// The bundle the sandbox trusts: the host's system bundle (the first of [`BUNDLE_PATHS`]
/// that is a file) followed by the authority's certificate.
pub(crate) fn sandbox_bundle() -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Some(path) = host_bundle() {
        let _ =
            std::fs::File::open(path).and_then(|f| f.take(MAX_BUNDLE).read_to_string(&mut text));
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# cordon egress interception CA (this server process only)\n");
    text.push_str(Authority::global().cert_pem());
    text
}

/// The first distribution bundle that is a regular file on this host: where the sandbox's
/// bundle is bound, and what the CA variables name.
pub(crate) fn host_bundle() -> Option<&'static Path> {
    BUNDLE_PATHS
        .iter()
        .map(Path::new)
        .find(|p| p.symlink_metadata().is_ok_and(|m| m.is_file()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_is_minted_once_per_host_and_chains_to_the_authority() {
        let a = Authority::global();
        let host = Host::Name("api.example.test".into());
        let one = a.server_config(&host).unwrap();
        let two = a.server_config(&host).unwrap();
        assert!(Arc::ptr_eq(&one, &two), "cached");
        assert!(a.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!a.cert_pem().contains("PRIVATE KEY"));
        let bundle = sandbox_bundle();
        assert!(bundle.ends_with(a.cert_pem()));
        assert!(!bundle.contains("PRIVATE KEY"));
        // The upstream side never trusts the authority itself.
        let ca = CertificateDer::from_pem_slice(a.cert_pem().as_bytes()).unwrap();
        let config = client_config(&[]).unwrap();
        let _ = (ca, config);
    }

    #[test]
    fn extra_roots_must_hold_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        let e = client_config(std::slice::from_ref(&empty))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = client_config(&[dir.path().join("missing.pem")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, Authority::global().cert_pem()).unwrap();
        assert!(client_config(&[ca]).is_ok());
    }
}
