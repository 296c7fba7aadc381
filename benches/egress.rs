//! The egress proxy's cost: the extra latency of one proxied request to a loopback origin,
//! and the throughput of a 100 MB transfer through it, each beside a direct connection to
//! the same origin, interleaved in one run (one sample of every variant per round, so all see
//! the same background load).
//!
//! Latency variants, each a complete connect → request → response read to EOF:
//!
//! * `direct`: TCP connect to the origin, `GET /`, read. **The baseline.**
//! * `forward`: to the proxy, `GET http://localhost:PORT/` with the call's credentials: the
//!   proxy parses the head, judges the name, resolves `localhost` (getaddrinfo, /etc/hosts),
//!   checks the address against `allow_private`, connects, forwards, relays.
//! * `connect`: to the proxy, `CONNECT localhost:PORT`, read the 200, then `GET /` through the
//!   tunnel (what every HTTPS client does, minus TLS).
//!
//! Throughput: `GET /big` of 100 MB (`BENCH_MB`), direct, through a CONNECT tunnel, and as a
//! plain forwarded request, `BENCH_ROUNDS` interleaved rounds.
//!
//! The proxy runs in process on its own runtime, as in `cordon serve`, serving a listener on
//! the host's loopback; in the server the listener lives in the sandbox's network namespace
//! (the descriptor crosses it; the path through the kernel is loopback either way).
//!
//! Interception (issue 20), against a loopback HTTPS origin whose certificate a test CA
//! signed (given to the proxy as `extra_roots`), each sample a fresh TCP + TLS connection:
//!
//! * `tls-direct`: TLS to the origin itself. **The baseline.**
//! * `tls-tunnel`: `CONNECT 127.0.0.1:PORT` (a host nobody names: an opaque tunnel), the
//!   client's own TLS end to end.
//! * `tls-intercept`: `CONNECT localhost:PORT` (named by a credential and a rule): the proxy
//!   terminates the client's TLS with its cached leaf, judges the request, puts the credential
//!   in, verifies the origin's TLS, relays the response through the scrubber.
//! * `tls-intercept-cold`: the same with the leaf cache emptied before each sample (a key
//!   pair and a certificate minted per request).
//!
//! Then a 100 MB download through each, and the proxy's CPU per intercepted request (the
//! runtime threads' own time from `/proc/self/task/*/schedstat`, over a batch).
//!
//! Knobs: `BENCH_N` (latency rounds, default 400), `BENCH_MB` (100), `BENCH_ROUNDS` (5),
//! `BENCH_TLS_N` (TLS latency rounds, 200).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An origin answering `/` with 13 bytes and `/big?n=N` with N bytes, one thread per
/// connection, `Connection: close`.
fn origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let path = line.split(' ').nth(1).unwrap_or("/");
                let n: usize = path
                    .split_once("?n=")
                    .and_then(|(_, n)| n.parse().ok())
                    .unwrap_or(13);
                let mut s = stream;
                let _ = s.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
                let chunk = vec![b'x'; 256 * 1024];
                let mut left = n;
                while left > 0 {
                    let k = left.min(chunk.len());
                    if s.write_all(&chunk[..k]).is_err() {
                        return;
                    }
                    left -= k;
                }
            });
        }
    });
    port
}

/// Reads to EOF; returns the bytes read.
fn drain(s: &mut TcpStream) -> u64 {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n as u64,
        }
    }
}

/// Reads a response head (to the empty line) byte by byte.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[derive(Clone, Copy)]
enum Mode {
    Direct,
    Forward,
    Connect,
}

struct Setup {
    origin: u16,
    proxy: SocketAddr,
    auth: String,
}

/// One request for `path` in `mode`; returns the bytes received (head and body).
fn request(s: &Setup, mode: Mode, path: &str) -> u64 {
    let host = format!("localhost:{}", s.origin);
    match mode {
        Mode::Direct => {
            let mut c = TcpStream::connect(("127.0.0.1", s.origin)).unwrap();
            let _ = c.set_nodelay(true);
            c.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                .unwrap();
            drain(&mut c)
        }
        Mode::Forward => {
            let mut c = TcpStream::connect(s.proxy).unwrap();
            let _ = c.set_nodelay(true);
            c.write_all(
                format!(
                    "GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n{}\r\n",
                    s.auth
                )
                .as_bytes(),
            )
            .unwrap();
            drain(&mut c)
        }
        Mode::Connect => {
            let mut c = TcpStream::connect(s.proxy).unwrap();
            let _ = c.set_nodelay(true);
            c.write_all(
                format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n{}\r\n", s.auth).as_bytes(),
            )
            .unwrap();
            let head = read_head(&mut c);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            c.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                .unwrap();
            drain(&mut c)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Interception (issue 20)
// ---------------------------------------------------------------------------------------

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A test CA and an HTTPS origin whose leaf it signed (`localhost` and `127.0.0.1`), answering
/// like [`origin`].
fn https_origin() -> (u16, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let mut reader = BufReader::new(&mut tls);
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let n: usize = line
                    .split(' ')
                    .nth(1)
                    .and_then(|p| p.split_once("?n="))
                    .and_then(|(_, n)| n.parse().ok())
                    .unwrap_or(13);
                let _ = tls.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
                let chunk = vec![b'x'; 256 * 1024];
                let mut left = n;
                while left > 0 {
                    let k = left.min(chunk.len());
                    if tls.write_all(&chunk[..k]).is_err() {
                        return;
                    }
                    left -= k;
                }
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    (port, ca_pem)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tls {
    Direct,
    Tunnel,
    Intercept,
    InterceptCold,
}

struct TlsSetup {
    port: u16,
    proxy: SocketAddr,
    auth: String,
    client: Arc<rustls::ClientConfig>,
}

/// One HTTPS request in `mode`; returns the bytes of the response (head and body).
fn tls_request(s: &TlsSetup, mode: Tls, path: &str) -> u64 {
    let (host, name) = match mode {
        Tls::Direct | Tls::Tunnel => (
            format!("127.0.0.1:{}", s.port),
            rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into()),
        ),
        Tls::Intercept | Tls::InterceptCold => (
            format!("localhost:{}", s.port),
            rustls::pki_types::ServerName::try_from("localhost").unwrap(),
        ),
    };
    if mode == Tls::InterceptCold {
        cordon::testing::egress::tls::Authority::global().forget_leaves();
    }
    let mut tcp = match mode {
        Tls::Direct => TcpStream::connect(("127.0.0.1", s.port)).unwrap(),
        _ => {
            let mut c = TcpStream::connect(s.proxy).unwrap();
            c.write_all(
                format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n{}\r\n", s.auth).as_bytes(),
            )
            .unwrap();
            let head = read_head(&mut c);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            c
        }
    };
    let _ = tcp.set_nodelay(true);
    let conn = rustls::ClientConnection::new(Arc::clone(&s.client), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, &mut tcp);
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match tls.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return total,
            Err(e) => panic!("{mode:?}: {e}"),
        }
    }
}

/// CPU time (ns) of this process's threads named `cordon-egress` (the proxy's runtime).
fn proxy_cpu_ns() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != "cordon-egress" {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

fn interception(n: usize, mb: usize, rounds: usize) {
    let (port, ca_pem) = https_origin();
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("ca.pem");
    std::fs::write(&roots, &ca_pem).unwrap();
    let secret = dir.path().join("token");
    std::fs::write(&secret, "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let policy = cordon::testing::policy::Policy::from_toml(
        &format!(
            "extends = \"dev\"\n[network]\nproxy = true\nallow_hosts = [\"localhost:*\", \
             \"127.0.0.1:*\"]\nallow_private = [\"127.0.0.0/8\"]\nmax_connections_per_call = \
             1000000\nmax_mb_per_connection = 4096\nextra_roots = [\"{}\"]\n\n\
             [[network.credentials]]\nname = \"bench\"\nhosts = [\"localhost:{port}\"]\n\
             env = \"BENCH_TOKEN\"\nfrom_file = \"{}\"\n\n[[network.rules]]\n\
             host = \"localhost:{port}\"\nmethods = [\"GET\"]\npaths = [\"/*\"]\n",
            roots.display(),
            secret.display()
        ),
        "bench-tls.toml",
    )
    .expect("bench interception policy");
    let proxy =
        cordon::testing::egress::Proxy::start(policy.network.proxy.clone().expect("proxy mode"))
            .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let _guard = proxy.serve_std(listener).unwrap();
    let ticket = proxy.open_call();
    let url = ticket.url(addr);
    let cred = url.trim_start_matches("http://").split('@').next().unwrap();
    let mut roots_store = rustls::RootCertStore::empty();
    for pem in [
        ca_pem.as_str(),
        cordon::testing::egress::tls::Authority::global().cert_pem(),
    ] {
        use rustls::pki_types::pem::PemObject;
        roots_store
            .add(rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
            .unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .unwrap()
        .with_root_certificates(roots_store)
        .with_no_client_auth();
    let setup = TlsSetup {
        port,
        proxy: addr,
        auth: format!(
            "Proxy-Authorization: {}\r\n",
            cordon::testing::egress::credentials::basic_authorization(cred)
        ),
        client: Arc::new(client),
    };
    let modes = [
        ("tls-direct", Tls::Direct),
        ("tls-tunnel", Tls::Tunnel),
        ("tls-intercept", Tls::Intercept),
        ("tls-intercept-cold", Tls::InterceptCold),
    ];
    for (_, mode) in modes {
        for _ in 0..10 {
            tls_request(&setup, mode, "/");
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); modes.len()];
    for _ in 0..n {
        for (i, (_, mode)) in modes.iter().enumerate() {
            let t = Instant::now();
            let got = tls_request(&setup, *mode, "/");
            samples[i].push(t.elapsed());
            assert!(got > 13, "short answer");
        }
    }
    let direct = stats(samples[0].clone());
    println!("\nHTTPS latency, connect + TLS + GET + response to EOF (ms, {n} rounds):");
    println!(
        "{:<20} {:>8} {:>8} {:>14}",
        "variant", "median", "p90", "extra (median)"
    );
    for (i, (name, _)) in modes.iter().enumerate() {
        let (median, p90) = stats(samples[i].clone());
        println!(
            "{name:<20} {median:>8.3} {p90:>8.3} {:>+14.3}",
            median - direct.0
        );
    }

    let bytes = (mb * 1_000_000) as u64;
    let path = format!("/big?n={bytes}");
    let big = &modes[..3];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); big.len()];
    for _ in 0..rounds {
        for (i, (_, mode)) in big.iter().enumerate() {
            let t = Instant::now();
            let got = tls_request(&setup, *mode, &path);
            let secs = t.elapsed().as_secs_f64();
            assert!(got >= bytes, "{got} < {bytes}");
            rates[i].push(bytes as f64 / 1e6 / secs);
        }
    }
    println!("\nHTTPS throughput, one {mb} MB response (MB/s, {rounds} rounds):");
    println!(
        "{:<20} {:>8} {:>8} {:>8}",
        "variant", "median", "min", "max"
    );
    for (i, (name, _)) in big.iter().enumerate() {
        let mut r = rates[i].clone();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{name:<20} {:>8.0} {:>8.0} {:>8.0}",
            r[r.len() / 2],
            r[0],
            r[r.len() - 1]
        );
    }

    println!("\nproxy CPU per request (its runtime threads, {n} requests each):");
    for (name, mode) in [
        ("tls-tunnel", Tls::Tunnel),
        ("tls-intercept", Tls::Intercept),
        ("tls-intercept-cold", Tls::InterceptCold),
    ] {
        let before = proxy_cpu_ns();
        for _ in 0..n {
            tls_request(&setup, mode, "/");
        }
        // The last connection's record is written as it unwinds.
        std::thread::sleep(Duration::from_millis(50));
        let per = (proxy_cpu_ns() - before) as f64 / n as f64 / 1e3;
        println!("{name:<20} {per:>8.0} µs");
    }
    let report = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(ticket.finish());
    let intercepted = report.connections.iter().filter(|c| c.intercepted).count();
    let injected = report
        .connections
        .iter()
        .filter(|c| c.credential.is_some())
        .count();
    println!(
        "\n{} connections recorded, {intercepted} intercepted, {injected} with the credential \
         injected (the first {} listed)",
        report.connections.len() as u64 + report.omitted,
        report.connections.len()
    );
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]))
}

fn main() {
    let n = env_usize("BENCH_N", 400);
    let mb = env_usize("BENCH_MB", 100);
    let rounds = env_usize("BENCH_ROUNDS", 5);
    let port = origin();
    let policy = cordon::testing::policy::Policy::from_toml(
        "extends = \"dev\"\n[network]\nproxy = true\nallow_hosts = [\"localhost:*\"]\n\
         allow_private = [\"127.0.0.0/8\"]\nmax_connections_per_call = 1000000\n\
         max_mb_per_connection = 4096\n",
        "bench.toml",
    )
    .expect("bench policy");
    let proxy =
        cordon::testing::egress::Proxy::start(policy.network.proxy.clone().expect("proxy mode"))
            .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let _guard = proxy.serve_std(listener).unwrap();
    let ticket = proxy.open_call();
    let url = ticket.url(addr);
    let cred = url.trim_start_matches("http://").split('@').next().unwrap();
    let setup = Setup {
        origin: port,
        proxy: addr,
        auth: format!(
            "Proxy-Authorization: {}\r\n",
            cordon::testing::egress::credentials::basic_authorization(cred)
        ),
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "egress proxy bench: {n} latency rounds, {rounds} x {mb} MB; load {}",
        load.trim()
    );

    // Warm up every path (the resolver, the runtime's threads, the origin's).
    for mode in [Mode::Direct, Mode::Forward, Mode::Connect] {
        for _ in 0..20 {
            request(&setup, mode, "/");
        }
    }
    let modes = [
        ("direct", Mode::Direct),
        ("forward", Mode::Forward),
        ("connect", Mode::Connect),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); modes.len()];
    for _ in 0..n {
        for (i, (_, mode)) in modes.iter().enumerate() {
            let t = Instant::now();
            let got = request(&setup, *mode, "/");
            samples[i].push(t.elapsed());
            assert!(got > 13, "short answer");
        }
    }
    let direct = stats(samples[0].clone());
    println!("\nlatency, connect + GET + response to EOF (ms):");
    println!(
        "{:<10} {:>8} {:>8} {:>14}",
        "variant", "median", "p90", "extra (median)"
    );
    for (i, (name, _)) in modes.iter().enumerate() {
        let (median, p90) = stats(samples[i].clone());
        println!(
            "{name:<10} {median:>8.3} {p90:>8.3} {:>+14.3}",
            median - direct.0
        );
    }

    let bytes = (mb * 1_000_000) as u64;
    let path = format!("/big?n={bytes}");
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..rounds {
        for (i, (_, mode)) in modes.iter().enumerate() {
            let t = Instant::now();
            let got = request(&setup, *mode, &path);
            let secs = t.elapsed().as_secs_f64();
            assert!(got >= bytes, "{got} < {bytes}");
            rates[i].push(bytes as f64 / 1e6 / secs);
        }
    }
    println!("\nthroughput, one {mb} MB response (MB/s, {rounds} rounds):");
    println!(
        "{:<10} {:>8} {:>8} {:>8}",
        "variant", "median", "min", "max"
    );
    for (i, (name, _)) in modes.iter().enumerate() {
        let mut r = rates[i].clone();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{name:<10} {:>8.0} {:>8.0} {:>8.0}",
            r[r.len() / 2],
            r[0],
            r[r.len() - 1]
        );
    }
    let report = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(ticket.finish());
    let refused = report.connections.iter().filter(|c| !c.allowed).count();
    println!(
        "\n{} connections recorded through the proxy, {refused} refused",
        report.connections.len()
    );
    interception(env_usize("BENCH_TLS_N", 200), mb, rounds);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load at the end: {}", load.trim());
}
