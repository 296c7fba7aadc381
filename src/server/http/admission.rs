//! Which TCP connections the HTTP port keeps: the bound on connections, split by whether a
//! connection has proved anything yet.
//!
//! A connection is *unauthenticated* from accept until one of its requests arrives with a
//! complete head that authenticates (a valid token, or any head when the server needs none).
//! Unauthenticated connections cost nothing to open, so they get little: at most
//! [`MAX_UNAUTHENTICATED`] of them, at most [`MAX_UNAUTHENTICATED_PER_SOURCE`] from one source
//! (an IPv4 address, or an IPv6 /64, which one host can fill), and [`UNAUTHENTICATED_TIMEOUT`]
//! from accept to authenticate. When a bound is full, the *oldest* unauthenticated connection
//! (of that source, or of all) is closed to make room: a new connection is never refused for
//! them, so idle sockets, however many and however fast they reconnect, cannot keep a client
//! that sends its head at once from being served. The oldest is chosen among connections
//! that have *had their chance*: the server read bytes from them, then all their client had
//! sent, and found no authenticated head ([`Watched`] says when), or they are older than
//! [`FRESH`]. A connection accepted a moment ago whose head is still on its way is evicted
//! only when no other is left, so a flood of reconnecting sockets from the same address (a
//! reverse proxy's, or loopback's) does not close it before its task gets to read it; and
//! the accept loop waits (briefly) for each new connection's first read before it accepts
//! the next, so it cannot run ahead of the tasks it spawns and evict a connection whose
//! head was waiting to be read ([`Ticket::first_read`]). Authenticated connections have their own bound,
//! [`MAX_AUTHENTICATED`]; past it the request gets 503.
//!
//! Owns the bookkeeping ([`Admission`], a [`Ticket`] per connection); closing a connection is
//! its task's (`http::serve`), which watches [`Ticket::evicted`] and the timeout.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// How long a connection may take from accept to a complete, authenticated request head.
pub(crate) const UNAUTHENTICATED_TIMEOUT: Duration = Duration::from_secs(2);
/// Unauthenticated connections kept at once; the oldest goes when another arrives.
pub(crate) const MAX_UNAUTHENTICATED: usize = 256;
/// Unauthenticated connections kept from one source (IPv4 address, IPv6 /64).
pub(crate) const MAX_UNAUTHENTICATED_PER_SOURCE: usize = 64;
/// Authenticated connections served at once (each holds a task and buffers).
pub(crate) const MAX_AUTHENTICATED: usize = 512;
/// Younger than this and not yet stalled, a connection is evicted only if every other is too.
pub(crate) const FRESH: Duration = Duration::from_millis(20);
/// Evictions are logged at most this often (an attack would otherwise flood the log).
const EVICTION_LOG_EVERY: Duration = Duration::from_secs(10);

/// Where connections come from, as far as the per-source bound cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4(u32),
    /// The upper 64 bits: one host is given a whole /64.
    V6(u64),
}

impl Source {
    fn of(peer: &SocketAddr) -> Self {
        match peer.ip() {
            IpAddr::V4(v4) => Self::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(u32::from(v4)),
                None => Self::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// The bounds in force (the constants above, smaller in unit tests).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub unauthenticated: usize,
    pub per_source: usize,
    pub authenticated: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            unauthenticated: MAX_UNAUTHENTICATED,
            per_source: MAX_UNAUTHENTICATED_PER_SOURCE,
            authenticated: MAX_AUTHENTICATED,
        }
    }
}

pub(crate) struct Admission {
    bounds: Bounds,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Accept order: a later connection gets a larger number.
    next: u64,
    /// Unauthenticated connections by number (the first is the oldest).
    unauthenticated: BTreeMap<u64, Waiting>,
    /// Per source, its unauthenticated connections' numbers (oldest first).
    by_source: HashMap<Source, BTreeMap<u64, ()>>,
    authenticated: usize,
    evicted_unlogged: u64,
    last_log: Option<Instant>,
}

struct Waiting {
    source: Source,
    evict: CancellationToken,
    /// Set once the server read bytes, then everything the client had sent (see
    /// [`Watched`]).
    stalled: Arc<AtomicBool>,
    accepted: Instant,
}

impl Waiting {
    /// Whether it had its chance to authenticate.
    fn had_its_chance(&self) -> bool {
        self.stalled.load(Ordering::Relaxed) || self.accepted.elapsed() >= FRESH
    }
}

/// Why a connection's request may not be served as authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// It was closed to make room (its task is closing it).
    Evicted,
    /// [`MAX_AUTHENTICATED`] authenticated connections are open.
    Full(usize),
}

/// One connection's place; dropping it (the connection ended) frees the place.
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    evicted: CancellationToken,
    authenticated: AtomicBool,
    stalled: Arc<AtomicBool>,
    first_read: tokio::sync::Notify,
}

impl Admission {
    pub(crate) fn new(bounds: Bounds) -> Arc<Self> {
        Arc::new(Self {
            bounds,
            state: Mutex::new(State::default()),
        })
    }

    /// A place for a connection just accepted from `peer`, unauthenticated; the oldest
    /// unauthenticated connection of its source (or of all, if every place is taken) is
    /// evicted first when its bound is full.
    pub(crate) fn admit(self: &Arc<Self>, peer: &SocketAddr) -> Ticket {
        let source = Source::of(peer);
        let evict = CancellationToken::new();
        let stalled = Arc::new(AtomicBool::new(false));
        let mut state = self.lock();
        let own = state.by_source.get(&source).map_or(0, BTreeMap::len);
        let victim = if own >= self.bounds.per_source {
            let ids = state.by_source.get(&source);
            state.oldest_of(ids.into_iter().flat_map(|ids| ids.keys().copied()))
        } else if state.unauthenticated.len() >= self.bounds.unauthenticated {
            state.oldest_of(state.unauthenticated.keys().copied())
        } else {
            None
        };
        if let Some(victim) = victim
            && let Some(waiting) = state.remove_waiting(victim)
        {
            waiting.evict.cancel();
            state.evicted_unlogged += 1;
            let due = state
                .last_log
                .is_none_or(|at| at.elapsed() >= EVICTION_LOG_EVERY);
            if due {
                tracing::warn!(
                    "closed {} unauthenticated connection(s) to make room (at most {} at once, \
                     {} per source, {}s to authenticate); the latest came from {peer}",
                    state.evicted_unlogged,
                    self.bounds.unauthenticated,
                    self.bounds.per_source,
                    UNAUTHENTICATED_TIMEOUT.as_secs()
                );
                state.evicted_unlogged = 0;
                state.last_log = Some(Instant::now());
            }
        }
        let id = state.next;
        state.next += 1;
        state.unauthenticated.insert(
            id,
            Waiting {
                source,
                evict: evict.clone(),
                stalled: Arc::clone(&stalled),
                accepted: Instant::now(),
            },
        );
        state.by_source.entry(source).or_default().insert(id, ());
        drop(state);
        Ticket {
            admission: Arc::clone(self),
            id,
            evicted: evict,
            authenticated: AtomicBool::new(false),
            stalled,
            first_read: tokio::sync::Notify::new(),
        }
    }

    /// Unauthenticated connections kept now.
    #[cfg(test)]
    pub(crate) fn unauthenticated(&self) -> usize {
        self.lock().unauthenticated.len()
    }

    /// Authenticated connections open now.
    #[cfg(test)]
    pub(crate) fn authenticated(&self) -> usize {
        self.lock().authenticated
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// The eviction victim among `ids` (oldest first): the oldest that had its chance, or,
    /// when none had, the oldest.
    fn oldest_of(&self, ids: impl Iterator<Item = u64> + Clone) -> Option<u64> {
        let stalled = ids.clone().find(|id| {
            self.unauthenticated
                .get(id)
                .is_some_and(Waiting::had_its_chance)
        });
        stalled.or_else(|| ids.into_iter().next())
    }

    fn remove_waiting(&mut self, id: u64) -> Option<Waiting> {
        let waiting = self.unauthenticated.remove(&id)?;
        if let Some(ids) = self.by_source.get_mut(&waiting.source) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_source.remove(&waiting.source);
            }
        }
        Some(waiting)
    }
}

impl Ticket {
    /// Fires when this connection was evicted: its task closes it.
    pub(crate) fn evicted(&self) -> &CancellationToken {
        &self.evicted
    }

    /// Completes once the connection's task first tried to read (whatever it found); a
    /// waiter that comes later still sees it.
    pub(crate) async fn first_read(&self) {
        self.first_read.notified().await;
    }

    pub(crate) fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Acquire)
    }

    /// The server read bytes and then everything the client had sent so far, and no
    /// authenticated head was in it (else [`Ticket::authenticate`] would have run first).
    fn mark_stalled(&self) {
        if !self.stalled.load(Ordering::Relaxed) && !self.is_authenticated() {
            self.stalled.store(true, Ordering::Relaxed);
        }
    }

    /// This connection just sent a complete head that authenticated: it leaves the
    /// unauthenticated bounds (and their timeout) for the authenticated one. Idempotent.
    pub(crate) fn authenticate(&self) -> Result<(), Refused> {
        if self.is_authenticated() {
            return Ok(());
        }
        let mut state = self.admission.lock();
        if !state.unauthenticated.contains_key(&self.id) {
            return Err(Refused::Evicted);
        }
        if state.authenticated >= self.admission.bounds.authenticated {
            return Err(Refused::Full(self.admission.bounds.authenticated));
        }
        state.remove_waiting(self.id);
        state.authenticated += 1;
        self.authenticated.store(true, Ordering::Release);
        Ok(())
    }
}

/// A connection's stream that tells its [`Ticket`] when, after some bytes came, a read finds
/// nothing more to read (the client sent all it had, and it did not authenticate): from then
/// on it is a candidate for eviction. A read that finds nothing before any byte came says
/// nothing: the head may be on its way.
pub(crate) struct Watched<S> {
    inner: S,
    ticket: Arc<Ticket>,
    got_bytes: bool,
    read_once: bool,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, ticket: Arc<Ticket>) -> Self {
        Self {
            inner,
            ticket,
            got_bytes: false,
            read_once: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match polled {
            Poll::Pending if self.got_bytes => self.ticket.mark_stalled(),
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.got_bytes = true,
            _ => {}
        }
        if !self.read_once {
            self.read_once = true;
            // `notify_one` keeps a permit when nobody waits yet.
            self.ticket.first_read.notify_one();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.admission.lock();
        if self.is_authenticated() {
            state.authenticated -= 1;
        } else {
            state.remove_waiting(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn small() -> Arc<Admission> {
        Admission::new(Bounds {
            unauthenticated: 4,
            per_source: 2,
            authenticated: 2,
        })
    }

    #[test]
    fn a_full_source_loses_its_oldest_connection_not_the_new_one() {
        let a = small();
        let first = a.admit(&peer("10.0.0.1:1000"));
        let second = a.admit(&peer("10.0.0.1:1001"));
        let third = a.admit(&peer("10.0.0.1:1002"));
        assert!(
            first.evicted().is_cancelled(),
            "the oldest of the source goes"
        );
        assert!(!second.evicted().is_cancelled());
        assert!(!third.evicted().is_cancelled());
        assert_eq!(a.unauthenticated(), 2);
        // The newest can still authenticate; the evicted one cannot.
        assert_eq!(third.authenticate(), Ok(()));
        assert_eq!(first.authenticate(), Err(Refused::Evicted));
    }

    #[test]
    fn a_full_server_loses_its_oldest_connection_of_any_source() {
        let a = small();
        let tickets: Vec<Ticket> = (1..=4)
            .map(|i| a.admit(&peer(&format!("10.0.0.{i}:80"))))
            .collect();
        let newest = a.admit(&peer("10.0.0.9:80"));
        assert!(tickets[0].evicted().is_cancelled());
        assert!(tickets[1..].iter().all(|t| !t.evicted().is_cancelled()));
        assert!(!newest.evicted().is_cancelled());
        assert_eq!(a.unauthenticated(), 4);
    }

    #[test]
    fn one_ipv6_host_is_one_source_whatever_address_of_its_64_it_uses() {
        let a = small();
        let first = a.admit(&peer("[2001:db8::1]:80"));
        let _second = a.admit(&peer("[2001:db8::2]:80"));
        let _third = a.admit(&peer("[2001:db8::ffff:1]:80"));
        assert!(first.evicted().is_cancelled());
        let other = a.admit(&peer("[2001:db8:0:1::1]:80"));
        assert!(
            !other.evicted().is_cancelled(),
            "another /64 is another source"
        );
    }

    #[test]
    fn authenticated_connections_leave_the_unauthenticated_bound_and_have_their_own() {
        let a = small();
        let one = a.admit(&peer("10.0.0.1:1"));
        let two = a.admit(&peer("10.0.0.1:2"));
        assert_eq!(one.authenticate(), Ok(()));
        assert_eq!(one.authenticate(), Ok(()), "idempotent");
        assert_eq!(two.authenticate(), Ok(()));
        assert_eq!(a.unauthenticated(), 0);
        // Two more from the same source evict nobody authenticated.
        let three = a.admit(&peer("10.0.0.1:3"));
        let _four = a.admit(&peer("10.0.0.1:4"));
        let _five = a.admit(&peer("10.0.0.1:5"));
        assert!(!one.evicted().is_cancelled() && !two.evicted().is_cancelled());
        assert!(three.evicted().is_cancelled());
        let six = a.admit(&peer("10.0.0.2:6"));
        assert_eq!(six.authenticate(), Err(Refused::Full(2)));
        drop(one);
        assert_eq!(a.authenticated(), 1);
        assert_eq!(six.authenticate(), Ok(()));
        drop(six);
        drop(two);
        assert_eq!(a.authenticated(), 0);
    }

    #[test]
    fn a_connection_not_read_yet_outlives_older_ones_that_were() {
        let a = small();
        let stalled = a.admit(&peer("127.0.0.1:1"));
        stalled.mark_stalled();
        let fresh = a.admit(&peer("127.0.0.1:2"));
        // Older, but its task has not read yet: the stalled one goes first.
        let _third = a.admit(&peer("127.0.0.1:3"));
        assert!(stalled.evicted().is_cancelled());
        assert!(!fresh.evicted().is_cancelled());
        // None stalled: the oldest goes.
        let _fourth = a.admit(&peer("127.0.0.1:4"));
        assert!(fresh.evicted().is_cancelled());
    }

    #[test]
    fn ended_connections_free_their_places() {
        let a = small();
        let t = a.admit(&peer("127.0.0.1:1"));
        assert_eq!(a.unauthenticated(), 1);
        drop(t);
        assert_eq!(a.unauthenticated(), 0);
        assert!(a.lock().by_source.is_empty());
    }
}
