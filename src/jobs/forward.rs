//! Host ports that reach jobs' servers: `[jobs] forward`, the operator's explicit opt-in.
//!
//! Under a policy whose sandbox has a private network namespace, a server a job starts on
//! `127.0.0.1:PORT` (or `[::1]:PORT`, or a wildcard) is reachable from the sandbox's own
//! loopback only. For each forwarded port the server listens on the host's 127.0.0.1 and
//! relays every connection into the sandbox's loopback at the same port, to the address the
//! server there listens on: 127.0.0.1 for an IPv4 listener, `::1` for an IPv6-only one (Node's
//! and Vite's `localhost` where `/etc/hosts` says `::1 localhost`). The sockets toward the sandbox are made by one thread
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
pub(crate) type NamespaceSource = Box<dyn Fn() -> Option<Arc<OwnedFd>> + Send + Sync>;

/// The host side of the forwarded ports.
pub struct Forwarder {
    /// Ports listened on; those that could not be bound are in `problems`.
    pub listening: Vec<u16>,
    /// Why forwarding is refused or partial, in words (also in results).
    pub problems: Vec<String>,
    table: Option<Arc<Table>>,
    stop: CancellationToken,
}

/// How long one reading of the sandbox's listening ports is reused.
const LISTENING_TTL: std::time::Duration = std::time::Duration::from_secs(1);

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A listening socket in the sandbox, on its loopback or any address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Listener {
    port: u16,
    pub(super) inode: u64,
    /// Reached over IPv6 only (bound to `::1` or `::`), not through 127.0.0.1.
    v6: bool,
}

enum Request {
    Socket(
        rustix::net::AddressFamily,
        oneshot::Sender<std::io::Result<OwnedFd>>,
    ),
    Listening(oneshot::Sender<Vec<Listener>>),
}

/// The thread inside the sandbox's network namespace.
#[derive(Clone)]
struct Dialer {
    requests: mpsc::Sender<Request>,
}

/// The dialer and the sandbox's listening sockets as last read, shared by the relays.
struct Table {
    dialer: Dialer,
    /// Reading them walks kernel tables (milliseconds), so results and relays reuse a
    /// reading for up to [`LISTENING_TTL`].
    seen: std::sync::Mutex<Option<(std::time::Instant, Vec<Listener>)>>,
    /// When a relayed connection last began or ended, by the inode of the listening socket
    /// it reached: a job serving them is not idle (`[jobs] idle_kill_secs`).
    served: std::sync::Mutex<std::collections::HashMap<u64, std::time::Instant>>,
}

/// Listening sockets whose last relayed connection is remembered; past it the older half goes.
const MAX_SERVED: usize = 1024;

impl Table {
    async fn listeners(&self) -> Vec<Listener> {
        let fresh = self
            .seen
            .lock()
            .ok()
            .and_then(|seen| seen.clone())
            .filter(|(at, _)| at.elapsed() < LISTENING_TTL)
            .map(|(_, listeners)| listeners);
        if let Some(listeners) = fresh {
            return listeners;
        }
        let (tx, rx) = oneshot::channel();
        if self.dialer.requests.send(Request::Listening(tx)).is_err() {
            return Vec::new();
        }
        let listeners = rx.await.unwrap_or_default();
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Some((std::time::Instant::now(), listeners.clone()));
        }
        listeners
    }

    /// A relayed connection reached (or left) the listeners of `port` now.
    fn note_served(&self, listeners: &[Listener], port: u16) {
        let now = std::time::Instant::now();
        let Ok(mut served) = self.served.lock() else {
            return;
        };
        if served.len() >= MAX_SERVED {
            let mut times: Vec<_> = served.values().copied().collect();
            times.sort_unstable();
            let median = times[times.len() / 2];
            served.retain(|_, at| *at >= median);
        }
        for l in listeners.iter().filter(|l| l.port == port) {
            served.insert(l.inode, now);
        }
    }
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
            table: None,
            stop: stop.clone(),
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
        let table = Arc::new(Table {
            dialer,
            seen: std::sync::Mutex::new(None),
            served: std::sync::Mutex::default(),
        });
        let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        for &port in ports {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => {
                    me.listening.push(port);
                    tokio::spawn(accept(
                        listener,
                        port,
                        Arc::clone(&table),
                        Arc::clone(&permits),
                        stop.clone(),
                    ));
                }
                Err(e) => me.problems.push(format!(
                    "host port 127.0.0.1:{port} (`[jobs] forward`) could not be bound: {e}"
                )),
            }
        }
        me.table = Some(table);
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

    /// The host URLs of forwarded ports on which a process of `members` (one job) listens
    /// now, over IPv4 or IPv6: another job's servers are that job's.
    pub async fn serving(&self, members: super::sockets::Members) -> Vec<String> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        let listeners: Vec<Listener> = table
            .listeners()
            .await
            .into_iter()
            .filter(|l| self.listening.contains(&l.port))
            .collect();
        // Nothing listens on a forwarded port: no need to look at the job's descriptors.
        if listeners.is_empty() {
            return Vec::new();
        }
        let inodes = tokio::task::spawn_blocking(move || members.socket_inodes())
            .await
            .unwrap_or_default();
        self.listening
            .iter()
            .filter(|p| {
                listeners
                    .iter()
                    .any(|l| l.port == **p && inodes.contains(&l.inode))
            })
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    /// When a relayed connection last began or ended at one of these listening sockets.
    pub fn last_served(
        &self,
        inodes: &std::collections::HashSet<u64>,
    ) -> Option<std::time::Instant> {
        let served = self.table.as_ref()?.served.lock().ok()?;
        inodes.iter().filter_map(|i| served.get(i)).max().copied()
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
                        Request::Socket(family, reply) => {
                            let _ = reply.send(
                                rustix::net::socket_with(
                                    family,
                                    rustix::net::SocketType::STREAM,
                                    rustix::net::SocketFlags::NONBLOCK
                                        | rustix::net::SocketFlags::CLOEXEC,
                                    None,
                                )
                                .map_err(Into::into),
                            );
                        }
                        Request::Listening(reply) => {
                            let _ = reply.send(listening());
                        }
                    }
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the forwarding thread did not start"))??;
        Ok(Self { requests })
    }

    /// A connection to `port` on the sandbox's loopback, over IPv6 (`::1`) or IPv4.
    async fn connect(&self, port: u16, v6: bool) -> std::io::Result<tokio::net::TcpStream> {
        let family = if v6 {
            rustix::net::AddressFamily::INET6
        } else {
            rustix::net::AddressFamily::INET
        };
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Socket(family, tx))
            .map_err(|_| std::io::Error::other("the forwarding thread is gone"))?;
        let fd = rx
            .await
            .map_err(|_| std::io::Error::other("the forwarding thread is gone"))??;
        let socket = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(fd));
        let address = if v6 {
            std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))
        } else {
            std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port))
        };
        socket.connect(address).await
    }
}

/// Listening TCP sockets on the loopback or any address of the namespace this thread is in,
/// IPv4 and IPv6.
fn listening() -> Vec<Listener> {
    let mut listeners = read_listening("/proc/thread-self/net/tcp", false);
    listeners.extend(read_listening("/proc/thread-self/net/tcp6", true));
    listeners
}

/// One table's listeners.
///
/// The kernel lists listening sockets first, then walks its whole established-connection
/// table (shared by every namespace: milliseconds on a busy host), so reading stops at the
/// first line that is not a listener, and at 1 MiB in any case.
pub(super) fn read_listening(path: &str, v6: bool) -> Vec<Listener> {
    use std::io::{BufRead, Read};
    let Ok(f) = std::fs::File::open(path) else {
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
    parse_listening(&text, v6)
}

/// Sockets in state LISTEN (0A) bound to a loopback or any address, from `/proc/net/tcp`
/// text (`v6`: `/proc/net/tcp6`, whose addresses are four 32-bit words in host order).
fn parse_listening(text: &str, v6: bool) -> Vec<Listener> {
    // 127.0.0.1 and 0.0.0.0; ::1, ::, and the IPv4-mapped 127.0.0.1 (reached over IPv4).
    let v4_any = |a: &str| a == "0100007F" || a == "00000000";
    let v6_kind = |a: &str| -> Option<bool> {
        let word = |i: usize| {
            a.get(i * 8..i * 8 + 8)
                .and_then(|h| u32::from_str_radix(h, 16).ok())
        };
        if a.len() != 32 || word(0)? != 0 || word(1)? != 0 {
            return None;
        }
        match (word(2)?, word(3)?) {
            (0, 0) => Some(true),
            (0, l) if l == u32::from_be(1) => Some(true),
            (m, l) if m == u32::from_be(0xffff) && l == u32::from_be(0x7f00_0001) => Some(false),
            _ => None,
        }
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            let (addr, port) = local.split_once(':')?;
            if *state != "0A" {
                return None;
            }
            let v6 = match v6 {
                false => v4_any(addr).then_some(false)?,
                true => v6_kind(addr)?,
            };
            Some(Listener {
                port: u16::from_str_radix(port, 16).ok()?,
                inode: inode.parse().ok()?,
                v6,
            })
        })
        .collect()
}

async fn accept(
    listener: tokio::net::TcpListener,
    port: u16,
    table: Arc<Table>,
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
        let (table, stop) = (Arc::clone(&table), stop.clone());
        tokio::spawn(async move {
            let _permit = permit;
            // The address the server listens on first; the other if the reading is a second
            // old and the server moved (or a dual-stack wildcard refuses one of them).
            let listeners = table.listeners().await;
            let on = |v6: bool| listeners.iter().any(|l| l.port == port && l.v6 == v6);
            let v6_first = on(true) && !on(false);
            let upstream = match table.dialer.connect(port, v6_first).await {
                Ok(u) => Ok(u),
                Err(_) => table.dialer.connect(port, !v6_first).await,
            };
            let Ok(mut upstream) = upstream else {
                // Nothing listens there in the sandbox: the client sees a closed connection.
                return;
            };
            table.note_served(&listeners, port);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                _ = stop.cancelled() => {}
            }
            // A long answer (a download, a stream) counts until its end.
            table.note_served(&listeners, port);
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
        let ports: Vec<(u16, u64, bool)> = parse_listening(text, false)
            .iter()
            .map(|l| (l.port, l.inode, l.v6))
            .collect();
        assert_eq!(ports, vec![(8000, 1, false), (3000, 2, false)]);
    }

    #[test]
    fn ipv6_listeners_on_loopback_or_any_only() {
        let v6 = |addr: &str, port: &str, inode: u32| {
            format!(
                "   0: {addr}:{port} 00000000000000000000000000000000:0000 0A \
                 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n"
            )
        };
        let loopback = format!("{:08X}", u32::from_be(1));
        let mapped = format!(
            "0000000000000000{:08X}{:08X}",
            u32::from_be(0xffff),
            u32::from_be(0x7f00_0001)
        );
        let text = format!(
            "  sl  local_address remote_address st\n{}{}{}{}",
            v6(&format!("000000000000000000000000{loopback}"), "1F40", 7),
            v6(&"0".repeat(32), "0BB8", 8),
            v6(&mapped, "1F41", 9),
            v6("20010DB8000000000000000000000001", "1F42", 10),
        );
        let found: Vec<(u16, u64, bool)> = parse_listening(&text, true)
            .iter()
            .map(|l| (l.port, l.inode, l.v6))
            .collect();
        assert_eq!(
            found,
            vec![(8000, 7, true), (3000, 8, true), (8001, 9, false)]
        );
    }
}
