//! How many connections the proxy holds at once, and whose: the bounds that keep one call's
//! sockets from taking the proxy from every other call.
//!
//! A connection goes through three stages, each with its own bound:
//!
//! * **anonymous**: accepted, its credentials not seen yet. All calls share one small pool
//!   ([`Limits::anonymous_heads`]); when it is full, a new connection *evicts the oldest*,
//!   which may go on only with bytes it has already sent (a client that sent its head at
//!   once is never hurt; one holding an idle socket is closed). It also has only
//!   [`Limits::anonymous_timeout`] to send its credentials.
//! * **head of a call**: its credentials named a call but its head is not complete. Each call
//!   has its own bound ([`Limits::heads_per_call`]); one more is refused, in that call's
//!   report.
//! * **established**: head complete and authenticated, being resolved, connected or relayed.
//!   Each call has its own bound ([`Limits::established_per_call`]), the calls and jobs of
//!   one HTTP session together theirs ([`Limits::established_per_session`]), beneath the
//!   proxy's overall one ([`Limits::established`]), so no call and no session can hold them
//!   all.
//!
//! Owns the counting only (slots that give themselves back when dropped); reading heads and
//! telling calls apart is `proxy`'s.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Connections past their head, over all calls.
pub const MAX_ESTABLISHED: usize = 512;
/// Connections past their head, per call (or interpreter session).
pub const MAX_ESTABLISHED_PER_CALL: usize = 64;
/// Connections past their head, over all calls and jobs of one MCP session: a quarter of
/// the proxy's, so it takes four sessions at their bound to fill it (and two calls' worth).
pub(crate) const MAX_ESTABLISHED_PER_SESSION: usize = 128;
const _: () = assert!(
    MAX_ESTABLISHED_PER_SESSION * 4 == MAX_ESTABLISHED
        && MAX_ESTABLISHED_PER_SESSION == 2 * MAX_ESTABLISHED_PER_CALL
);
/// Connections whose credentials are not known yet, over all calls (oldest evicted). Large
/// enough that a flood of sockets must open this many more between a client's `connect` and
/// its first write to evict it; small beside the established bound.
pub(crate) const MAX_ANONYMOUS_HEADS: usize = 128;
/// Connections of one call still sending their head.
pub(crate) const MAX_HEADS_PER_CALL: usize = 16;
/// How long a connection has to send its credentials (the whole head has the proxy's
/// head timeout).
pub(crate) const ANONYMOUS_TIMEOUT: Duration = Duration::from_secs(2);

/// The bounds, all positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub established: usize,
    pub established_per_call: usize,
    pub established_per_session: usize,
    pub anonymous_heads: usize,
    pub heads_per_call: usize,
    pub anonymous_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            established: MAX_ESTABLISHED,
            established_per_call: MAX_ESTABLISHED_PER_CALL,
            established_per_session: MAX_ESTABLISHED_PER_SESSION,
            anonymous_heads: MAX_ANONYMOUS_HEADS,
            heads_per_call: MAX_HEADS_PER_CALL,
            anonymous_timeout: ANONYMOUS_TIMEOUT,
        }
    }
}

/// Why a connection was not admitted to the next stage; the words go to the call's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Crowded {
    /// The call already has this many connections still sending their head.
    CallHeads(usize),
    /// The call already has this many connections open through the proxy.
    CallEstablished(usize),
    /// The calls and jobs of the call's session together have this many open.
    Session(usize),
    /// All calls together have this many open.
    Proxy(usize),
}

impl Crowded {
    /// The HTTP status the client is answered with.
    pub(crate) fn status(self) -> (u16, &'static str) {
        match self {
            Self::CallHeads(_) | Self::CallEstablished(_) | Self::Session(_) => {
                (429, "Too Many Requests")
            }
            Self::Proxy(_) => (503, "Service Unavailable"),
        }
    }
}

impl fmt::Display for Crowded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CallHeads(n) => write!(
                f,
                "too many connections: this call already has {n} connections still sending \
                 their request head, the most the proxy allows one call; send each request \
                 head at once, or close idle connections"
            ),
            Self::CallEstablished(n) => write!(
                f,
                "too many connections: this call already has {n} connections open through the \
                 proxy, the most it allows one call at once; close some (or reuse them) first"
            ),
            Self::Session(n) => write!(
                f,
                "too many connections: this session already has {n} connections open through \
                 the proxy over all its calls and jobs, the most one session may hold so that \
                 others are served too; end some (or close idle connections) first"
            ),
            Self::Proxy(n) => write!(
                f,
                "too many connections: the proxy already serves {n} connections for all calls \
                 together; try again when some have ended"
            ),
        }
    }
}

/// One call's counts, shared by its connections' slots.
#[derive(Debug, Default)]
pub(super) struct CallCounts {
    heads: AtomicUsize,
    established: AtomicUsize,
}

/// The proxy's counts.
pub(super) struct Admission {
    limits: Limits,
    anonymous: Mutex<Anonymous>,
    established: Arc<tokio::sync::Semaphore>,
}

#[derive(Default)]
struct Anonymous {
    next: u64,
    /// Waiting connections by age (ids only grow), each with the token that evicts it.
    waiting: BTreeMap<u64, CancellationToken>,
}

impl Admission {
    pub(super) fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits: Limits {
                established: limits.established.max(1),
                established_per_call: limits.established_per_call.max(1),
                established_per_session: limits.established_per_session.max(1),
                anonymous_heads: limits.anonymous_heads.max(1),
                heads_per_call: limits.heads_per_call.max(1),
                anonymous_timeout: limits.anonymous_timeout,
            },
            anonymous: Mutex::new(Anonymous::default()),
            established: Arc::new(tokio::sync::Semaphore::new(limits.established.max(1))),
        })
    }

    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A slot for a connection just accepted. Never refuses: when the pool is full, the
    /// oldest waiting connection is evicted instead (its token is cancelled).
    pub(super) fn anonymous(self: &Arc<Self>) -> AnonymousSlot {
        let mut pool = lock(&self.anonymous);
        while pool.waiting.len() >= self.limits.anonymous_heads {
            match pool.waiting.pop_first() {
                Some((_, oldest)) => oldest.cancel(),
                None => break,
            }
        }
        let id = pool.next;
        pool.next += 1;
        let evicted = CancellationToken::new();
        pool.waiting.insert(id, evicted.clone());
        AnonymousSlot {
            admission: Arc::clone(self),
            id,
            evicted,
        }
    }

    /// A slot among the call's connections still sending their head.
    pub(super) fn head_of_call(&self, counts: &Arc<CallCounts>) -> Result<CallSlot, Crowded> {
        let max = self.limits.heads_per_call;
        take(&counts.heads, max).ok_or(Crowded::CallHeads(max))?;
        Ok(CallSlot {
            counts: Arc::clone(counts),
            stage: Stage::Head,
        })
    }

    /// A slot among the call's, its session's (when it has one) and the proxy's established
    /// connections.
    pub(super) fn establish(
        &self,
        counts: &Arc<CallCounts>,
        session: Option<&Arc<CallCounts>>,
    ) -> Result<Established, Crowded> {
        let max = self.limits.established_per_call;
        take(&counts.established, max).ok_or(Crowded::CallEstablished(max))?;
        let call = CallSlot {
            counts: Arc::clone(counts),
            stage: Stage::Established,
        };
        let session = match session {
            Some(shared) => {
                let max = self.limits.established_per_session;
                take(&shared.established, max).ok_or(Crowded::Session(max))?;
                Some(CallSlot {
                    counts: Arc::clone(shared),
                    stage: Stage::Established,
                })
            }
            None => None,
        };
        let permit = Arc::clone(&self.established)
            .try_acquire_owned()
            .map_err(|_| Crowded::Proxy(self.limits.established))?;
        Ok(Established {
            _call: call,
            _session: session,
            _permit: permit,
        })
    }
}

/// A connection in the anonymous pool; leaves it when dropped.
pub(super) struct AnonymousSlot {
    admission: Arc<Admission>,
    id: u64,
    evicted: CancellationToken,
}

impl AnonymousSlot {
    /// Cancelled when a newer connection took this one's place.
    pub(super) fn evicted(&self) -> &CancellationToken {
        &self.evicted
    }
}

impl Drop for AnonymousSlot {
    fn drop(&mut self) {
        lock(&self.admission.anonymous).waiting.remove(&self.id);
    }
}

enum Stage {
    Head,
    Established,
}

/// One of a call's counted connections; counted down when dropped.
pub(super) struct CallSlot {
    counts: Arc<CallCounts>,
    stage: Stage,
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        let counter = match self.stage {
            Stage::Head => &self.counts.heads,
            Stage::Established => &self.counts.established,
        };
        counter.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An established connection's place, in its call's count and the proxy's.
pub(super) struct Established {
    _call: CallSlot,
    _session: Option<CallSlot>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Counts one up unless that would pass `max`.
fn take(counter: &AtomicUsize, max: usize) -> Option<()> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| ())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Arc<Admission> {
        Admission::new(Limits {
            established: 3,
            established_per_call: 2,
            established_per_session: 3,
            anonymous_heads: 2,
            heads_per_call: 1,
            anonymous_timeout: Duration::from_secs(1),
        })
    }

    #[test]
    fn a_full_anonymous_pool_evicts_its_oldest() {
        let a = small();
        let first = a.anonymous();
        let second = a.anonymous();
        assert!(!first.evicted().is_cancelled());
        let third = a.anonymous();
        assert!(first.evicted().is_cancelled());
        assert!(!second.evicted().is_cancelled() && !third.evicted().is_cancelled());
        // A slot that left gives its place back: no eviction for the next one.
        drop(second);
        let fourth = a.anonymous();
        assert!(!third.evicted().is_cancelled() && !fourth.evicted().is_cancelled());
        drop(first);
        assert_eq!(lock(&a.anonymous).waiting.len(), 2);
    }

    #[test]
    fn per_call_bounds_are_per_call_and_given_back() {
        let a = small();
        let (one, two) = (Arc::default(), Arc::default());
        let head = a.head_of_call(&one).unwrap();
        assert_eq!(a.head_of_call(&one).err(), Some(Crowded::CallHeads(1)));
        let _other_head = a.head_of_call(&two).unwrap();
        drop(head);
        let _again = a.head_of_call(&one).unwrap();

        let e1 = a.establish(&one, None).unwrap();
        let _e2 = a.establish(&one, None).unwrap();
        assert_eq!(
            a.establish(&one, None).err(),
            Some(Crowded::CallEstablished(2))
        );
        let _e3 = a.establish(&two, None).unwrap();
        // Three in all: the proxy's own bound, whoever asks.
        assert_eq!(a.establish(&two, None).err(), Some(Crowded::Proxy(3)));
        // The refused attempt gave its per-call place back.
        assert_eq!(two.established.load(Ordering::Acquire), 1);
        drop(e1);
        let _e4 = a.establish(&two, None).unwrap();
    }

    #[test]
    fn a_sessions_calls_share_one_bound_beneath_the_proxys() {
        let a = Admission::new(Limits {
            established: 10,
            established_per_session: 3,
            ..small().limits
        });
        let session: Arc<CallCounts> = Arc::default();
        let calls: Vec<Arc<CallCounts>> = (0..3).map(|_| Arc::default()).collect();
        let _held: Vec<_> = [0, 0, 1]
            .iter()
            .map(|&i| a.establish(&calls[i], Some(&session)).unwrap())
            .collect();
        assert_eq!(
            a.establish(&calls[2], Some(&session)).err(),
            Some(Crowded::Session(3))
        );
        assert_eq!(calls[2].established.load(Ordering::Acquire), 0);
        assert!(
            a.establish(&calls[2], None).is_ok(),
            "another session's call"
        );
    }
}
