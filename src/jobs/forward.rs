//! Host ports that reach jobs' servers: `[jobs] forward`, the operator's explicit opt-in.
//!
//! Under a policy whose sandbox has a private network namespace, a server a job starts on
//! `127.0.0.1:PORT` is reachable from the sandbox's own loopback only. For each forwarded
//! port the server listens on the host's 127.0.0.1 and relays every connection into the
//! sandbox's loopback at the same port. The sockets toward the sandbox are made by one thread
//! that entered the sandbox's network namespace (a socket belongs to the namespace it was made
//! in, whichever thread uses it later); nothing else of the server changes namespace.
//!
//! Owns the listeners, the relays and their bounds; not which ports (`policy::jobs`).

use std::os::fd::OwnedFd;
use std::sync::{Arc, mpsc};
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

/// Forwarded connections open at once, all ports together; more wait for one to end.
const MAX_CONNECTIONS: usize = 128;

/// The network namespace of the sandbox init in force (it changes when the view is rebuilt).
pub type NamespaceSource = Box<dyn Fn() -> Option<Arc<OwnedFd>> + Send + Sync>;

/// The host side of the forwarded ports.
pub struct Forwarder {
    /// Ports listened on; those that could not be bound are in `problems`.
    pub listening: Vec<u16>,
    /// Why forwarding is refused or partial, in words (also in results).
    pub problems: Vec<String>,
    dialer: Option<Dialer>,
    stop: CancellationToken,
    /// The sandbox's listening ports as last read, and when: reading them walks kernel tables
    /// (milliseconds), so results reuse a reading for up to [`LISTENING_TTL`].
    listening_seen: std::sync::Mutex<Option<(std::time::Instant, Vec<u16>)>>,
}

/// How long one reading of the sandbox's listening ports is reused.
const LISTENING_TTL: std::time::Duration = std::time::Duration::from_secs(1);

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

enum Request {
    Socket(oneshot::Sender<std::io::Result<OwnedFd>>),
    Listening(oneshot::Sender<Vec<u16>>),
}

/// The thread inside the sandbox's network namespace.
#[derive(Clone)]
struct Dialer {
    requests: mpsc::Sender<Request>,
}

impl Forwarder {
    /// Binds `ports` on the host's 127.0.0.1 and starts relaying. `namespace` None: the sandbox
    /// has no private loopback (no namespaces, or a policy that shares the host's network), so
    /// forwarding is refused and says why.
    pub async fn start(
        ports: &[u16],
        namespace: NamespaceSource,
        private_loopback: Result<(), String>,
    ) -> Self {
        let stop = CancellationToken::new();
        let mut me = Self {
            listening: Vec::new(),
            problems: Vec::new(),
            dialer: None,
            stop: stop.clone(),
            listening_seen: std::sync::Mutex::new(None),
        };
        if ports.is_empty() {
            return me;
        }
        if let Err(why) = private_loopback {
            me.problems.push(format!(
                "`[jobs] forward` is refused: {why}; jobs' servers are not forwarded"
            ));
            return me;
        }
        let dialer = match Dialer::start(namespace) {
            Ok(d) => d,
            Err(e) => {
                me.problems.push(format!(
                    "`[jobs] forward` is refused: cannot enter the sandbox's network namespace: {e}"
                ));
                return me;
            }
        };
        let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        for &port in ports {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => {
                    me.listening.push(port);
                    tokio::spawn(accept(
                        listener,
                        port,
                        dialer.clone(),
                        Arc::clone(&permits),
                        stop.clone(),
                    ));
                }
                Err(e) => me.problems.push(format!(
                    "host port 127.0.0.1:{port} (`[jobs] forward`) could not be bound: {e}"
                )),
            }
        }
        me.dialer = Some(dialer);
        for problem in &me.problems {
            tracing::warn!("{problem}");
        }
        if !me.listening.is_empty() {
            tracing::info!(
                "forwarding host 127.0.0.1 ports {:?} to the sandbox's loopback",
                me.listening
            );
        }
        me
    }

    /// The host URLs of forwarded ports on which something in the sandbox listens now.
    pub async fn serving(&self) -> Vec<String> {
        let Some(dialer) = &self.dialer else {
            return Vec::new();
        };
        let fresh = self
            .listening_seen
            .lock()
            .ok()
            .and_then(|seen| seen.clone())
            .filter(|(at, _)| at.elapsed() < LISTENING_TTL)
            .map(|(_, ports)| ports);
        let listening = match fresh {
            Some(ports) => ports,
            None => {
                let (tx, rx) = oneshot::channel();
                if dialer.requests.send(Request::Listening(tx)).is_err() {
                    return Vec::new();
                }
                let ports = rx.await.unwrap_or_default();
                if let Ok(mut seen) = self.listening_seen.lock() {
                    *seen = Some((std::time::Instant::now(), ports.clone()));
                }
                ports
            }
        };
        self.listening
            .iter()
            .filter(|p| listening.contains(p))
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }
}

impl Dialer {
    fn start(namespace: NamespaceSource) -> std::io::Result<Self> {
        let first = namespace().ok_or_else(|| std::io::Error::other("the sandbox has none"))?;
        let (requests, incoming) = mpsc::channel::<Request>();
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("cordon-forward".into())
            .spawn(move || {
                let mut entered = Arc::clone(&first);
                let enter = |fd: &OwnedFd| {
                    rustix::thread::move_into_link_name_space(
                        std::os::fd::AsFd::as_fd(fd),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                };
                let _ = ready_tx.send(enter(&first).map_err(std::io::Error::from));
                for request in incoming {
                    // A rebuilt view has its own init: follow it to its namespace.
                    if let Some(now) = namespace()
                        && !Arc::ptr_eq(&now, &entered)
                        && enter(&now).is_ok()
                    {
                        entered = now;
                    }
                    match request {
                        Request::Socket(reply) => {
                            let _ = reply.send(
                                rustix::net::socket_with(
                                    rustix::net::AddressFamily::INET,
                                    rustix::net::SocketType::STREAM,
                                    rustix::net::SocketFlags::NONBLOCK
                                        | rustix::net::SocketFlags::CLOEXEC,
                                    None,
                                )
                                .map_err(Into::into),
                            );
                        }
                        Request::Listening(reply) => {
                            let _ = reply.send(listening_ports());
                        }
                    }
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the forwarding thread did not start"))??;
        Ok(Self { requests })
    }

    async fn connect(&self, port: u16) -> std::io::Result<tokio::net::TcpStream> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Socket(tx))
            .map_err(|_| std::io::Error::other("the forwarding thread is gone"))?;
        let fd = rx
            .await
            .map_err(|_| std::io::Error::other("the forwarding thread is gone"))??;
        let socket = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(fd));
        socket
            .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .await
    }
}

/// Listening TCP ports on 127.0.0.1 or any address of the namespace this thread is in.
///
/// The kernel lists listening sockets first, then walks its whole established-connection
/// table (shared by every namespace: milliseconds on a busy host), so reading stops at the
/// first line that is not a listener, and at 1 MiB in any case.
fn listening_ports() -> Vec<u16> {
    use std::io::{BufRead, Read};
    let Ok(f) = std::fs::File::open("/proc/thread-self/net/tcp") else {
        return Vec::new();
    };
    let mut text = String::new();
    for line in std::io::BufReader::with_capacity(4096, f.take(1 << 20))
        .lines()
        .map_while(Result::ok)
    {
        let state = line.split_whitespace().nth(3);
        if !text.is_empty() && state != Some("0A") {
            break;
        }
        text.push_str(&line);
        text.push('\n');
    }
    parse_listening(&text)
}

/// Ports in state LISTEN (0A) bound to 127.0.0.1 or 0.0.0.0, from `/proc/net/tcp` text.
fn parse_listening(text: &str) -> Vec<u16> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            let (addr, port) = local.split_once(':')?;
            (state == "0A" && (addr == "0100007F" || addr == "00000000"))
                .then(|| u16::from_str_radix(port, 16).ok())
                .flatten()
        })
        .collect()
}

async fn accept(
    listener: tokio::net::TcpListener,
    port: u16,
    dialer: Dialer,
    permits: Arc<Semaphore>,
    stop: CancellationToken,
) {
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            _ = stop.cancelled() => return,
        };
        let (mut client, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(_) => {
                    // Out of descriptors, say: do not spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let (dialer, stop) = (dialer.clone(), stop.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(mut upstream) = dialer.connect(port).await else {
                // Nothing listens there in the sandbox: the client sees a closed connection.
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_on_loopback_or_any_only() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue\n\
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
   1: 00000000:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n\
   2: 0100007F:1F41 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n\
   3: 0A00000A:1F42 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1\n";
        assert_eq!(parse_listening(text), vec![8000, 3000]);
    }
}
