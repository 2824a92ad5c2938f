//! Leased tokens: a slice of a key's token buckets taken from a shared
//! backend (Redis, PostgreSQL) in the same call as a decision and granted
//! here, in memory, until it is spent or its time has passed — exactly,
//! fleet-wide. This is the backend-independent half: which keys lease and
//! how much, the bound on the server's time, the grants from a lease, and
//! the bookkeeping of what to give back. Each backend crate sends the lease
//! call and the give-back in its own protocol (the Redis script's `l` and
//! `g` operations, PostgreSQL's `ratomic_v1_lease` and
//! `ratomic_v1_give_back`), and both keep the same rules on the server:
//! the proof below holds for either.
//!
//! # Why it is exact
//!
//! A token bucket's state on the server is its TAT: the end of the emission
//! slots granted so far, one slot of `T` µs per token. A grant of a token
//! at time `t` takes a slot starting in `[t, t + (B − 1)·T]` (GCRA: the
//! slot starts at `max(TAT, t)`, and it is granted only if that is at most
//! `(B − 1)·T` ahead). Slots never overlap, so the tokens granted at times
//! in any `[a, b]` start in `[a, b + (B − 1)·T]` and number at most
//! `B + (b − a)/T`: the conformance bound, over every process.
//!
//! A lease of `k` tokens is the next `k` slots after the call's own, the
//! range `[end − k·T, end)`, and the server moves the TAT to `end`: no one
//! else is granted those slots. Here, a call at time `t` takes the next slot
//! of the range at or after `t` (`start = max(next, t)`) if it fits in the
//! range and is at most `(B − 1)·T` ahead of `t` — the same two conditions
//! as on the server, on slots no one else has. So the bound holds for the fleet
//! whatever the interleaving; a slot whose time passes unused is lost, as a
//! full bucket's refill is.
//!
//! `t` must be on the server's timeline. Each lease reply carries the
//! server's `now`, read at some local instant `s` between this process
//! sending the call (local time `l1`, taken *before* the bytes go out) and
//! receiving the reply (`l2`, taken *after* they are in), so the server's
//! time at a later local instant `x` is `now + (x − s)·r` for a rate `r`
//! within [`DRIFT_PPM`] of 1: at least `x + now − l2 − ε·(x − l2)` and at
//! most `x + now − l1 + ε·(x − l1)` (the upper bound's drift counted from
//! the send, the lower's from the receipt; plus the µs both clocks round
//! away). A call takes its slot at or after the *latest* server time that
//! interval allows and checks how far ahead it is from the *earliest*:
//! each condition holds for the true time. The width costs slots, never
//! exactness — but only if `l1` is no later than the real send: whoever
//! reports it must take it before sending (a duration measured elsewhere
//! and subtracted from a later instant is not such a bound).
//!
//! # What it costs
//!
//! Tokens leased to a process are unavailable to the others until it spends
//! them, gives them back ([`Leases::drain`], sent by the backend's
//! `begin_give_backs`), or
//! their slots' time passes: at most one lease per key and process, so at
//! most `processes × max` tokens of a key are held at once, per limit
//! (`max` the lease's largest size, [`Lease`]: under `Auto`, an eighth of
//! the smallest burst, at least 1), and a lease never takes more than half
//! of what the tightest limit has left. Measured (the server test
//! `idle_leases_withhold_at_most_processes_times_the_largest_lease`, figures
//! in BENCHMARKS.md): four processes gone idle on a hot key withheld 876–878 of
//! a bound of 2,000 under `Auto` (burst 4,000).
//!
//! A give-back returns a lease's unused slots only while the bucket's TAT is
//! still that lease's end (nothing granted on the key since): of the leases
//! several processes hold on one key, only the last taken can come back; the
//! others' tokens come back as their slots' time passes (at most `max × T`
//! past the bucket's backlog). A lease this process drops unspent — evicted
//! from a full table of keys, left for a call on the other timeline (server
//! time or the caller's), or whose last slots are too far ahead to grant
//! within the uncertainty of the server's time — is not given back either:
//! its slots stay out until their time passes, beside the next lease this
//! process takes on the key. A decision answered from a lease says
//! what the fleet has left as of the lease's round trip plus what the lease
//! still holds: its `remaining` may be higher than the fleet's by what other
//! processes took since.
//!
//! # Sizes
//!
//! A key seen once takes no lease: its call is one round trip, as without
//! leases. A key whose previous call came less than a second ago, and
//! within the time the lease it would take covers (its size × the fastest
//! limit's `T`: a key called less often would spend one token of it at
//! most), takes a lease of 2 tokens; each lease spent within half its time
//! doubles the next, up to `max`; each that ends with tokens unused halves
//! it.
//!
//! A lease's first slots may pass during its own round trip (from a full
//! bucket they start at the server's `now`): on a fast key (`T` below the
//! round trip) a lease of 2 would be in the past on arrival, end unused and
//! never grow. So a lease that starts or grows covers at least two round
//! trips of the fastest limit's slots (`2·rtt/T`, the key's last round trip,
//! at most `max`). This costs the fleet nothing: slots that pass during the
//! round trip of a lease taken from a full bucket are refill the full
//! bucket would have dropped, and from a drained bucket they lie ahead.

use std::collections::HashMap;
use std::hash::BuildHasher;
// loom's mutex under `--cfg ratomic_loom`: the model at the end of this
// file checks the local half of a lease under every interleaving.
#[cfg(ratomic_loom)]
use loom::sync::Mutex;
#[cfg(not(ratomic_loom))]
use std::sync::Mutex;

use smallvec::SmallVec;
use std::time::{Duration, Instant};

use crate::decision::Decision;

/// Clocks of two hosts may drift apart by up to this much (parts per
/// million) while a lease is held: NTP slews a clock by at most 500 ppm, so
/// two slewed in opposite directions part by 1,000.
pub const DRIFT_PPM: u64 = 1_000;

/// A key whose previous round trip was this recent takes a lease.
const WARM: u64 = 1_000_000;

/// Shards of the table of keys (each behind its own lock).
const SHARDS: usize = 16;

/// Whether a limiter on a shared backend (Redis, PostgreSQL) leases tokens.
///
/// Under a lease, a process takes a slice of a key's tokens from the server
/// in the same call as a decision and grants the next calls on that key
/// from it, in memory, until it is spent or its time has passed. Exact
/// fleet-wide (never more than burst + rate·time per key and limit, over
/// every process, whatever the interleaving); what it costs:
///
/// - tokens a process holds are not available to the others until it
///   spends them, gives them back (the backend limiter's `give_back`; the
///   C, Python and Node faces also do it when a limiter is freed or
///   closed), or their time passes: at most `processes × max` tokens of a key at
///   once, and a lease never takes more than half of what the bucket has
///   left, so near the limit the fleet grants fewer than the bucket allows,
///   never more;
/// - a decision answered from a lease (the backend's `Source::Lease`) says what the fleet had left at the lease's round trip plus what the
///   lease still holds;
/// - the server's time is known here within the lease's round trip (plus
///   [`DRIFT_PPM`]), and slots whose time may have passed are skipped.
///
/// A key seen once takes no lease. Only token buckets lease (a window's
/// count cannot be sliced exactly); a batch (`allow_many`) and a `peek`
/// always go to the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lease {
    /// No leases: every decision is a round trip (or the deny cache's).
    #[default]
    Off,
    /// Lease where it is exact — limiters whose limits are all token
    /// buckets; others take no lease — at most an eighth of the smallest
    /// burst at a time (at least 1).
    Auto,
    /// Lease at most this many tokens at a time; a limiter with a window
    /// limit is refused (a window's count cannot be sliced exactly).
    Max(u64),
}

impl std::str::FromStr for Lease {
    type Err = String;

    /// `off`, `auto`, or the most tokens a lease takes (a whole number
    /// >= 1), as the command line and configuration files write it.
    fn from_str(s: &str) -> Result<Lease, String> {
        match s.trim() {
            "off" => Ok(Lease::Off),
            "auto" => Ok(Lease::Auto),
            n => match n.parse::<u64>() {
                Ok(n) if n >= 1 => Ok(Lease::Max(n)),
                _ => Err(format!("{s:?} must be off, auto or the most tokens a lease takes (a whole number >= 1)")),
            },
        }
    }
}

/// Each limit's answer to a call granted from a lease, in the limiter's
/// order (one inline: a single rule allocates nothing).
pub type Answers = SmallVec<[Decision; 1]>;

/// What a lease call brought back from the server: the tokens leased beyond
/// the call's own cost, the server's time (µs) when it decided, and each
/// limit's lease end (server µs: the bucket's TAT after the call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Tokens leased (0: none).
    pub taken: u64,
    /// The server's time of the decision, µs.
    pub now: u64,
    /// Per limit, the lease's end, µs.
    pub ends: Vec<u64>,
}

/// One key's lease, held here.
#[derive(Debug)]
struct Held {
    /// Taken at a time the caller gave (`*_at` calls: its own timeline,
    /// known exactly) rather than at the server's.
    caller: bool,
    /// Per limit: the next slot not granted (server µs) and the lease's end.
    next: Vec<u64>,
    end: Vec<u64>,
    /// `server µs − local µs` bounds at the lease's round trip (0 for a
    /// caller's timeline).
    off_lo: i64,
    off_hi: i64,
    /// When its call was sent (local µs; the caller's µs on its timeline):
    /// the upper bound's drift runs from here.
    sent: u64,
    /// When it arrived: local µs, or the caller's µs.
    at: u64,
    /// Tokens it held.
    size: u64,
}

#[derive(Debug, Default)]
struct Entry {
    held: Option<Held>,
    /// The next lease's size (0: none).
    next_size: u64,
    /// Local µs of the key's last round trip (0: none yet).
    last_trip: u64,
    /// Local µs of the key's last call, answered here or not (0: none yet).
    last_call: u64,
    /// How long that round trip took, local µs (0: not known).
    rtt: u64,
    /// Local µs when a call asking for a lease was handed out, until its
    /// reply (or failure) is in (0: none). Meanwhile the key's other calls
    /// ask for none: two leases at once would leave all but the last one
    /// kept idle until their time passes. Forgotten after [`WARM`] (a call
    /// its caller dropped).
    asking: u64,
}

/// One shard of the table of keys (keys hashed with a seed of this table:
/// a caller cannot aim keys at one shard, or at one bucket of its map).
type Shard = Mutex<HashMap<Box<[u8]>, Entry, foldhash::fast::RandomState>>;

/// Per limit, one value (inline for up to four limits).
type PerLimit = SmallVec<[u64; 4]>;

/// A give-back to send: the key, and per limit its lease's end and first
/// unused slot. The server takes the slots `[next, end)` back only while
/// the bucket's TAT (and the fence of its latest lease) is still `end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unused {
    /// The user's key.
    pub key: Vec<u8>,
    /// Per limit, the lease's end (server µs).
    pub ends: Vec<u64>,
    /// Per limit, the first slot not granted (server µs).
    pub next: Vec<u64>,
}

/// The leases of one limiter, by key.
#[derive(Debug)]
pub struct Leases {
    /// `T` µs and `B` of each limit (all token buckets).
    rules: Box<[(u64, u64)]>,
    /// The fastest limit's `T` (at least 1 µs).
    t_min: u64,
    max: u64,
    per_shard: usize,
    shards: Box<[Shard]>,
    hasher: foldhash::fast::RandomState,
    base: Instant,
}

impl Leases {
    /// Leases for a limiter's limits under `mode`, keeping at most `keys`
    /// keys (at least one per shard); `None` when the limiter takes none.
    /// Each limit is `Some((T, B))` for a token bucket (`T` µs a token, a
    /// burst of `B`), `None` for any other kind. `Err` names why an
    /// explicit `Lease::Max` cannot be honoured.
    pub fn new(limits: &[Option<(u64, u64)>], mode: Lease, keys: usize) -> Result<Option<Self>, String> {
        let buckets: Option<Vec<(u64, u64)>> = limits.iter().copied().collect();
        let max = match (mode, &buckets) {
            (Lease::Off, _) | (Lease::Auto, None) | (Lease::Max(0), _) => return Ok(None),
            (Lease::Max(_), None) => {
                return Err("leases need every limit to be a token bucket: a window's count cannot be sliced \
                            exactly (use Lease::Auto, which leases only token buckets, or Lease::Off)"
                    .into())
            }
            (Lease::Max(n), Some(_)) => n,
            (Lease::Auto, Some(b)) => (b.iter().map(|&(_, cap)| cap).min().unwrap_or(1) / 8).max(1),
        };
        let rules = buckets.expect("token buckets").into_boxed_slice();
        Ok(Some(Leases {
            t_min: rules.iter().map(|&(t, _)| t).min().unwrap_or(1).max(1),
            rules,
            max,
            per_shard: keys.div_ceil(SHARDS).max(1),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::default())).collect(),
            hasher: foldhash::fast::RandomState::default(),
            base: Instant::now(),
        }))
    }

    /// The largest lease.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Local µs since this table was made.
    pub fn local_us(&self) -> u64 {
        self.local_us_at(Instant::now())
    }

    /// Local µs from this table's making to `at` (0 if earlier).
    pub fn local_us_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        // The top bits: the maps inside use the low ones.
        &self.shards[(self.hasher.hash_one(key) >> 60) as usize % SHARDS]
    }

    /// Grants `cost` on `key` from its lease at local time `local` (µs) —
    /// or, for a call at a time the caller gave, at `caller` (µs on its
    /// timeline) — if it can: each limit's answer, as the in-memory engine
    /// words them. Otherwise the size of lease the round trip should ask for
    /// (at least `demand`, the tokens other calls on the key wait for, when
    /// it asks for one at all; never with `ask` false: 0, and nothing marks
    /// a lease on its way).
    pub fn grant(
        &self,
        key: &[u8],
        cost: u64,
        local: u64,
        caller: Option<u64>,
        demand: u64,
        ask: bool,
    ) -> Result<Answers, u64> {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = shard.get_mut(key) else { return Err(0) };
        let previous = std::mem::replace(&mut entry.last_call, local.max(1));
        if entry.held.as_ref().is_some_and(|h| h.caller != caller.is_some()) {
            // A lease on the other timeline: of no use to this call.
            entry.held = None;
        }
        let x = caller.unwrap_or(local);
        if let Some(held) = &mut entry.held {
            if let Some(answers) = held.take(&self.rules, cost, x) {
                return Ok(answers);
            }
            // Spent (or its time passed): size the next one by how it went.
            let server_elapsed = x.saturating_sub(held.at);
            let lasted = held.end.iter().zip(&held.next).all(|(e, n)| n >= e);
            let nominal = self.rules.iter().map(|&(t, _)| t * held.size).max().unwrap_or(0);
            entry.next_size = if lasted && server_elapsed.saturating_mul(2) < nominal {
                (held.size.max(1) * 2).max(self.outrun(entry.rtt)).min(self.max)
            } else if lasted {
                held.size.clamp(1, self.max)
            } else {
                held.size / 2
            };
            entry.held = None;
        }
        // Warm: its previous call came within the time the lease it would
        // take covers (and within WARM). A key called less often spends no
        // more than one token of any lease before its slots pass: no lease.
        let size = match entry.next_size {
            0 => 2.max(self.outrun(entry.rtt)).min(self.max),
            n => n,
        };
        let span = size.saturating_mul(self.t_min);
        if previous == 0 || local.saturating_sub(previous) >= WARM.min(span) {
            entry.next_size = 0;
            return Err(0);
        }
        entry.next_size = size;
        if !ask || (entry.asking != 0 && local.saturating_sub(entry.asking) < WARM) {
            return Err(0); // not asked for, or one for this key is on its way
        }
        entry.asking = local.max(1);
        Err(entry.next_size.max(demand).min(self.max))
    }

    /// The tokens whose slots span two round trips of `rtt` µs on the
    /// fastest limit: a lease at least this large still holds slots ahead
    /// when it arrives.
    fn outrun(&self, rtt: u64) -> u64 {
        rtt.saturating_mul(2).div_ceil(self.t_min)
    }

    /// A call on `key` failed: whatever lease it asked for is not coming.
    pub fn failed(&self, key: &[u8]) {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = shard.get_mut(key) {
            entry.asking = 0;
        }
    }

    /// Records a round trip for `key` at local time `x` (its lease, if
    /// `grant` brought one, received with the server's time bounded by the
    /// call's send and receive times `sent` and `x`; or, for a call at a
    /// time the caller gave, on the caller's timeline).
    /// `lease_reply`: the reply was a lease call's (kept or not, the lease
    /// asked for is no longer on its way).
    pub fn arrived(&self, key: &[u8], sent: u64, x: u64, caller: bool, grant: Option<Grant>, lease_reply: bool) {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if !shard.contains_key(key) && shard.len() >= self.per_shard {
            // Full: make room. A lease dropped here is not given back; its
            // tokens come back to the fleet as its slots' time passes.
            if let Some(victim) = shard.keys().next().cloned() {
                shard.remove(&victim);
            }
        }
        let entry = shard.entry(key.into()).or_default();
        entry.last_trip = x.max(1);
        if entry.last_call == 0 {
            entry.last_call = sent.max(1);
        }
        entry.rtt = if caller { 0 } else { x.saturating_sub(sent) };
        if lease_reply {
            entry.asking = 0;
        }
        let Some(g) = grant.filter(|g| g.taken > 0 && g.ends.len() == self.rules.len()) else { return };
        let now = i64::try_from(g.now).unwrap_or(i64::MAX);
        let next = self.rules.iter().zip(&g.ends).map(|(&(t, _), &e)| e.saturating_sub(g.taken * t)).collect();
        entry.held = Some(if caller {
            Held { caller, next, end: g.ends, off_lo: 0, off_hi: 0, sent: g.now, at: g.now, size: g.taken }
        } else {
            let sent = sent.min(x);
            Held {
                caller,
                next,
                end: g.ends,
                off_lo: now - x as i64,
                off_hi: now - sent as i64,
                sent,
                at: x,
                size: g.taken,
            }
        });
    }

    /// Gives `tokens` back to `key`'s lease at local time `x`, if it holds
    /// one whose last granted slots can take them all: those slots are free
    /// again (every limit's `tokens` slots, all still ahead of the server's
    /// time and within the lease). Whether it did; if not, nothing changed.
    pub fn refund(&self, key: &[u8], tokens: u64, x: u64) -> bool {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let Some(held) = shard.get_mut(key).and_then(|e| e.held.as_mut()).filter(|h| !h.caller) else {
            return false;
        };
        let (_, hi) = held.server_time(x);
        let back: Option<Vec<u64>> = held
            .next
            .iter()
            .zip(&held.end)
            .zip(self.rules.iter())
            .map(|((&next, &end), &(t, _))| {
                let first = end.saturating_sub(held.size * t).max(hi);
                next.checked_sub(tokens.checked_mul(t)?).filter(|&n| n >= first)
            })
            .collect();
        match back {
            Some(back) => {
                held.next = back;
                true
            }
            None => false,
        }
    }

    /// Takes every lease held (none is used afterwards): what to give back.
    pub fn drain(&self) -> Vec<Unused> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for (key, entry) in shard.iter_mut() {
                if let Some(held) = entry.held.take() {
                    if held.next.iter().zip(&held.end).any(|(n, e)| n < e) {
                        out.push(Unused { key: key.to_vec(), ends: held.end, next: held.next });
                    }
                }
            }
        }
        out
    }

    /// Leases held now (tests, stats).
    pub fn held(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).values().filter(|e| e.held.is_some()).count())
            .sum()
    }
}

impl Held {
    /// The server's time at local `x`, as an interval that holds it (for a
    /// caller's timeline, `x` is that time).
    fn server_time(&self, x: u64) -> (u64, u64) {
        if self.caller {
            return (x, x);
        }
        // Drift since the receipt (the earliest time) and since the send
        // (the latest), rounded up; and 2 µs for the clocks' rounding: the
        // server's TIME and these local µs are both whole µs rounded down.
        let drift = |since: u64| (x.saturating_sub(since).saturating_mul(DRIFT_PPM)).div_ceil(1_000_000) + 2;
        let lo = (x as i64).saturating_add(self.off_lo).saturating_sub(drift(self.at) as i64).max(0) as u64;
        let hi = (x as i64).saturating_add(self.off_hi).saturating_add(drift(self.sent) as i64).max(0) as u64;
        (lo, hi)
    }

    /// Grants `cost` from every limit's slice at local time `x`, or none.
    fn take(&mut self, rules: &[(u64, u64)], cost: u64, x: u64) -> Option<Answers> {
        let (lo, hi) = self.server_time(x);
        let mut after = PerLimit::new();
        for (i, &(t, b)) in rules.iter().enumerate() {
            // The next free slot at or after the latest time it may be...
            let start = self.next[i].max(hi);
            let new = start.checked_add(cost.checked_mul(t)?)?;
            // ...in the lease, and at most (B − 1)·T ahead of the earliest.
            if new > self.end[i] || new - lo > b * t {
                return None;
            }
            after.push(new);
        }
        let answers = rules
            .iter()
            .zip(&after)
            .map(|(&(t, b), &new)| {
                let ahead = new - lo;
                Decision {
                    allowed: true,
                    remaining: (b * t - ahead) / t,
                    limit: b,
                    retry_after: Duration::ZERO,
                    reset_after: Duration::from_micros(ahead),
                }
            })
            .collect();
        self.next.copy_from_slice(&after);
        Some(answers)
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use super::*;

    fn bucket(t: u64, b: u64) -> Option<(u64, u64)> {
        Some((t, b))
    }

    fn leases(max: u64) -> Leases {
        Leases::new(&[bucket(1_000, 100)], Lease::Max(max), 100).unwrap().unwrap()
    }

    #[test]
    fn a_lease_grants_its_slots_once_each_and_no_more() {
        let l = leases(10);
        // A round trip at local 100..=110 µs; the server read its clock at
        // 5_000 µs and leased 10 tokens ending at 5_000 + 11 ms (the call's
        // own token, then ten).
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 10, now: 5_000, ends: vec![16_000] }), true);
        let mut granted = 0;
        while l.grant(b"k", 1, 111, None, 0, true).is_ok() {
            granted += 1;
        }
        // The server time is known within [5_000 + 1 − 1, 5_000 + 11 + 1]:
        // the slots start at 6_000 ms, all ahead of it, so all ten fit.
        assert_eq!(granted, 10);
        assert!(l.grant(b"k", 1, 112, None, 0, true).is_err(), "spent");
    }

    #[test]
    fn slots_whose_time_passed_are_not_granted() {
        let l = leases(10);
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 10, now: 5_000, ends: vec![16_000] }), true);
        // 8.5 ms later on this clock: the slots before ~13_500 µs of server
        // time have passed; the ones left start at 14_000 and 15_000.
        let x = 110 + 8_500;
        let mut granted = 0;
        while l.grant(b"k", 1, x, None, 0, true).is_ok() {
            granted += 1;
        }
        assert_eq!(granted, 2);
    }

    #[test]
    fn a_slot_is_never_more_than_the_burst_ahead_of_the_earliest_server_time() {
        // B = 3, T = 1 ms: a lease of 2 after the call's token ends 3 ms
        // after the server's reading. The round trip took 0.5 ms, so right
        // after it the server's time is known within [reading, reading +
        // 0.5 ms] (and 1 µs of drift): the first slot (11 ms) is ahead of
        // the latest, and fits; the second would end more than B·T = 3 ms
        // ahead of the earliest.
        let l = Leases::new(&[bucket(1_000, 3)], Lease::Max(2), 10).unwrap().unwrap();
        l.arrived(b"k", 1_500, 2_000, false, Some(Grant { taken: 2, now: 10_000, ends: vec![13_000] }), true);
        let d = l.grant(b"k", 1, 2_000, None, 0, true).unwrap();
        assert!(d[0].allowed);
        assert!(
            l.grant(b"k", 1, 2_000, None, 0, true).is_err(),
            "the last slot's end is over B·T ahead of the earliest time"
        );
        // Had the round trip taken 2 ms, the first slot might be in the
        // past already (the server's time up to 12 ms): nothing is granted
        // before the call's reading is behind it.
        let slow = Leases::new(&[bucket(1_000, 3)], Lease::Max(2), 10).unwrap().unwrap();
        slow.arrived(b"k", 0, 2_000, false, Some(Grant { taken: 2, now: 10_000, ends: vec![13_000] }), true);
        assert!(slow.grant(b"k", 1, 2_000, None, 0, true).is_err());
    }

    #[test]
    fn the_latest_server_time_drifts_from_the_send_not_the_receipt() {
        // A round trip of 1 s (sent at local 0, received at 1_000_000 µs);
        // the server read TIME = N somewhere in it. One slot leased,
        // [N + 2_001_500, N + 2_002_000) on a bucket of T = 500 µs.
        const N: u64 = 10_000_000;
        let l = Leases::new(&[bucket(500, 10_000)], Lease::Max(10), 10).unwrap().unwrap();
        l.arrived(b"k", 0, 1_000_000, false, Some(Grant { taken: 1, now: N, ends: vec![N + 2_002_000] }), true);
        // At local 2_000_000 the server's time may be N + 2 s (read at the
        // send) plus 1,000 ppm of the 2 s since the send: N + 2_002_000,
        // past the slot's start. Drift counted from the receipt (1 s: 1 ms)
        // would put the latest time at N + 2_001_001 and grant a slot whose
        // time may have passed.
        assert!(l.grant(b"k", 1, 2_000_000, None, 0, true).is_err(), "the slot may be in the server's past");
    }

    #[test]
    fn several_limits_are_granted_all_or_nothing() {
        let l = Leases::new(&[bucket(1_000, 100), bucket(10_000, 100)], Lease::Max(5), 10).unwrap().unwrap();
        l.arrived(b"k", 0, 1, false, Some(Grant { taken: 2, now: 0, ends: vec![3_000, 30_000] }), true);
        assert!(l.grant(b"k", 2, 1, None, 0, true).is_ok());
        assert!(l.grant(b"k", 1, 1, None, 0, true).is_err());
    }

    #[test]
    fn a_lease_is_read_as_the_command_line_writes_it() {
        assert_eq!("off".parse::<Lease>(), Ok(Lease::Off));
        assert_eq!(" auto ".parse::<Lease>(), Ok(Lease::Auto));
        assert_eq!("16".parse::<Lease>(), Ok(Lease::Max(16)));
        for bad in ["0", "-1", "always", "", "1.5"] {
            let e = bad.parse::<Lease>().unwrap_err();
            assert!(e.contains("must be off, auto or the most tokens a lease takes"), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_grow_for_hot_keys_and_a_cold_key_takes_none() {
        let l = leases(64);
        assert_eq!(l.grant(b"k", 1, 10, None, 0, true), Err(0), "never seen");
        l.arrived(b"k", 10, 20, false, None, false);
        assert_eq!(l.grant(b"k", 1, 30, None, 0, true), Err(2), "warm: a lease of two");
        l.arrived(b"k", 30, 40, false, Some(Grant { taken: 2, now: 1_000, ends: vec![4_000] }), true);
        assert!(l.grant(b"k", 1, 41, None, 0, true).is_ok());
        assert!(l.grant(b"k", 1, 42, None, 0, true).is_ok());
        assert_eq!(l.grant(b"k", 1, 43, None, 0, true), Err(4), "spent at once: twice as large");
        assert_eq!(l.grant(b"k", 1, 43 + WARM, None, 0, true), Err(0), "cold again");
    }

    #[test]
    fn a_fast_key_s_lease_covers_two_round_trips() {
        // T = 1 µs; round trips of 150 µs: a lease of 2 would be in the
        // past on arrival. The first is 300 tokens; doubling keeps above it.
        let l = Leases::new(&[bucket(1, 1_000_000)], Lease::Max(100_000), 10).unwrap().unwrap();
        l.arrived(b"k", 0, 150, false, None, false);
        assert_eq!(l.grant(b"k", 1, 200, None, 0, true), Err(300));
        // It arrives after another 150 µs round trip: slots [10_001, 10_301)
        // with the server at 10_000 somewhere in [200, 350] local.
        l.arrived(b"k", 200, 350, false, Some(Grant { taken: 300, now: 10_000, ends: vec![10_301] }), true);
        let mut granted = 0;
        let next = loop {
            match l.grant(b"k", 1, 351, None, 0, true) {
                Ok(_) => granted += 1,
                Err(size) => break size,
            }
        };
        assert!(granted > 100, "most of it is still ahead: {granted}");
        assert_eq!(next, 600, "spent at once: the next doubles");
        // A slow key (T = 10 ms) keeps the first lease of 2.
        let slow = Leases::new(&[bucket(10_000, 100)], Lease::Max(50), 10).unwrap().unwrap();
        slow.arrived(b"k", 0, 150, false, None, false);
        assert_eq!(slow.grant(b"k", 1, 200, None, 0, true), Err(2));
    }

    #[test]
    fn one_lease_at_a_time_is_asked_for_a_key() {
        let l = leases(64);
        l.arrived(b"k", 10, 20, false, None, false);
        assert_eq!(l.grant(b"k", 1, 30, None, 0, true), Err(2), "warm: a lease of two");
        assert_eq!(l.grant(b"k", 1, 31, None, 0, true), Err(0), "one is on its way: a plain call");
        l.arrived(b"k", 31, 40, false, None, false);
        assert_eq!(l.grant(b"k", 1, 41, None, 0, true), Err(0), "a plain call's reply: the lease is still on its way");
        l.failed(b"k");
        assert_eq!(l.grant(b"k", 1, 42, None, 0, true), Err(2), "it failed: ask again");
        l.arrived(b"k", 42, 50, false, Some(Grant { taken: 0, now: 1_000, ends: vec![2_000] }), true);
        assert_eq!(l.grant(b"k", 1, 51, None, 0, true), Err(2), "it came back empty: ask again");
        // A caller that never finished its call: forgotten after WARM (a
        // bucket of one token a second: its leases cover seconds).
        let slow = Leases::new(&[bucket(1_000_000, 100)], Lease::Max(64), 100).unwrap().unwrap();
        slow.arrived(b"k", 10, 20, false, None, false);
        assert_eq!(slow.grant(b"k", 1, 30, None, 0, true), Err(2));
        assert_eq!(slow.grant(b"k", 1, 30 + WARM / 2, None, 0, true), Err(0), "on its way");
        assert_eq!(slow.grant(b"k", 1, 31 + WARM, None, 0, true), Err(2), "forgotten");
    }

    #[test]
    fn a_key_called_less_often_than_a_lease_lasts_takes_none() {
        // T = 1 µs: a first lease of 2·150 µs round trips = 300 tokens
        // covers 300 µs. A key called every 200 µs takes it; every 400 µs
        // (each call would spend one token of it at most), none.
        let l = Leases::new(&[bucket(1, 1_000_000)], Lease::Max(100_000), 10).unwrap().unwrap();
        l.arrived(b"k", 0, 150, false, None, false);
        assert_eq!(l.grant(b"k", 1, 200, None, 0, true), Err(300));
        l.failed(b"k");
        assert_eq!(l.grant(b"k", 1, 600, None, 0, true), Err(0), "400 µs after the previous call");
        assert_eq!(l.grant(b"k", 1, 700, None, 0, true), Err(300), "100 µs after");
    }

    #[test]
    fn windows_are_refused_under_an_explicit_max_and_skipped_under_auto() {
        let window = None; // a fixed window of 10 a second, say
        assert!(Leases::new(&[bucket(1_000, 100), window], Lease::Max(4), 10).unwrap_err().contains("token bucket"));
        assert!(Leases::new(&[window], Lease::Auto, 10).unwrap().is_none());
        assert!(Leases::new(&[bucket(1_000, 100)], Lease::Off, 10).unwrap().is_none());
        assert_eq!(Leases::new(&[bucket(1_000, 100)], Lease::Auto, 10).unwrap().unwrap().max(), 12);
    }

    #[test]
    fn refunds_free_the_lease_s_own_slots_and_drain_gives_the_rest_back() {
        let l = leases(10);
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 10, now: 5_000, ends: vec![16_000] }), true);
        for _ in 0..10 {
            l.grant(b"k", 1, 111, None, 0, true).unwrap();
        }
        assert!(l.refund(b"k", 3, 111));
        for _ in 0..3 {
            l.grant(b"k", 1, 111, None, 0, true).unwrap();
        }
        assert!(l.refund(b"k", 2, 111));
        assert!(!l.refund(b"k", 11, 111), "more than the lease granted: nothing changes");
        // 8.5 ms later the slots before ~13.5 ms of server time have passed:
        // a refund cannot free them.
        assert!(!l.refund(b"k", 1, 110 + 8_500 + 1_000));
        let back = l.drain();
        assert_eq!(back, vec![Unused { key: b"k".to_vec(), ends: vec![16_000], next: vec![14_000] }]);
        assert_eq!(l.held(), 0);
        assert!(!l.refund(b"k", 1, 111));
        // A lease that can no longer grant is dropped: its refunds go to the server.
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 1, now: 5_000, ends: vec![7_000] }), true);
        assert!(l.grant(b"k", 1, 111, None, 0, true).is_ok());
        assert!(l.grant(b"k", 1, 111, None, 0, true).is_err());
        assert!(!l.refund(b"k", 1, 111));
    }
}
