//! Leased tokens: a slice of a key's token buckets taken from Redis in one
//! script call and granted here, in memory, until it is spent or its time
//! has passed — exactly, fleet-wide.
//!
//! # Why it is exact
//!
//! A token bucket's state on Redis is its TAT: the end of the emission
//! slots granted so far, one slot of `T` µs per token. A grant of a token
//! at time `t` takes a slot starting in `[t, t + (B − 1)·T]` (GCRA: the
//! slot starts at `max(TAT, t)`, and it is granted only if that is at most
//! `(B − 1)·T` ahead). Slots never overlap, so the tokens granted at times
//! in any `[a, b]` start in `[a, b + (B − 1)·T]` and number at most
//! `B + (b − a)/T`: the conformance bound, over every process.
//!
//! A lease of `k` tokens is the next `k` slots after the call's own, the
//! range `[end − k·T, end)`, and the script moves the TAT to `end`: no one
//! else is granted those slots. Here, a call at time `t` takes the next slot
//! of the range at or after `t` (`start = max(next, t)`) if it fits in the
//! range and is at most `(B − 1)·T` ahead of `t` — the same two conditions
//! as on Redis, on slots no one else has. So the bound holds for the fleet
//! whatever the interleaving; a slot whose time passes unused is lost, as a
//! full bucket's refill is.
//!
//! `t` must be on the server's timeline. Each lease reply carries the
//! server's `now`, read between this process sending the call (local time
//! `l1`) and receiving the reply (`l2`), so the server's time at a later
//! local instant `x` lies in `[x + now − l2, x + now − l1]`, widened by the
//! drift two clocks can have since ([`DRIFT_PPM`]). A call takes its slot at
//! or after the *latest* server time that interval allows and checks how
//! far ahead it is from the *earliest*: each condition holds for the true
//! time. The width costs slots, never exactness.
//!
//! # What it costs
//!
//! Tokens leased to a process are unavailable to the others until it spends
//! them, gives them back ([`Driver::begin_give_backs`](crate::Driver::begin_give_backs)), or
//! their slots' time passes: at most one lease per key and process, so at
//! most `processes × max` tokens of a key are held at once (`max` the
//! lease's largest size, [`Lease`]). A decision answered from a lease says
//! what the fleet has left as of the lease's round trip plus what the lease
//! still holds: its `remaining` may be higher than the fleet's by what other
//! processes took since.
//!
//! # Sizes
//!
//! A key seen once takes no lease: its call is one round trip, as without
//! leases. A key whose previous round trip was less than a second ago takes
//! a lease of 2 tokens; each lease spent within half its time doubles the
//! next, up to `max`; each that ends with tokens unused halves it.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ratomic::Decision;

use crate::rules::RedisRule;

/// Clocks of two hosts may drift apart by up to this much (parts per
/// million) while a lease is held: NTP slews a clock by at most 500 ppm, so
/// two slewed in opposite directions part by 1,000.
pub const DRIFT_PPM: u64 = 1_000;

/// A key whose previous round trip was this recent takes a lease.
const WARM: u64 = 1_000_000;

/// Shards of the table of keys (each behind its own lock).
const SHARDS: usize = 16;

/// Whether a Redis-backed limiter leases tokens.
///
/// Under a lease, a process takes a slice of a key's tokens from Redis in
/// the same script call as a decision and grants the next calls on that key
/// from it, in memory, until it is spent or its time has passed. Exact
/// fleet-wide (never more than burst + rate·time per key and limit, over
/// every process, whatever the interleaving); what it costs:
///
/// - tokens a process holds are not available to the others until it
///   spends them, gives them back ([`RedisLimiter::give_back`](crate::RedisLimiter::give_back)),
///   or their time passes: at most `processes × max` tokens of a key at
///   once, and a lease never takes more than half of what the bucket has
///   left, so near the limit the fleet grants fewer than the bucket allows,
///   never more;
/// - a decision answered from a lease ([`Source::Lease`](crate::Source::Lease))
///   says what the fleet had left at the lease's round trip plus what the
///   lease still holds;
/// - the server's time is known here within the lease's round trip (plus
///   [`DRIFT_PPM`]), and slots whose time may have passed are skipped.
///
/// A key seen once takes no lease. Only token buckets lease (a window's
/// count cannot be sliced exactly); a batch (`allow_many`) and a `peek`
/// always go to Redis.
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

/// What a lease call brought back: the tokens leased beyond the call's
/// own cost, the server's time, and each limit's lease end (server µs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) taken: u64,
    pub(crate) now: u64,
    pub(crate) ends: Vec<u64>,
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
}

/// One shard of the table of keys.
type Shard = Mutex<HashMap<Box<[u8]>, Entry>>;

/// A give-back to send: the key, and per limit its lease's end and first
/// unused slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unused {
    pub(crate) key: Vec<u8>,
    pub(crate) ends: Vec<u64>,
    pub(crate) next: Vec<u64>,
}

/// The leases of one limiter, by key.
#[derive(Debug)]
pub(crate) struct Leases {
    /// `T` µs and `B` of each limit (all token buckets).
    rules: Box<[(u64, u64)]>,
    max: u64,
    per_shard: usize,
    shards: Box<[Shard]>,
    hasher: RandomState,
    base: Instant,
}

impl Leases {
    /// Leases for `rules` under `mode`, keeping at most `keys` keys (at
    /// least one per shard); `None` when the limiter takes none. `Err` names
    /// why an explicit `Lease::Max` cannot be honoured.
    pub(crate) fn new(rules: &[RedisRule], mode: Lease, keys: usize) -> Result<Option<Self>, String> {
        let buckets: Option<Vec<(u64, u64)>> = rules
            .iter()
            .map(|r| match *r {
                RedisRule::TokenBucket { interval_us, capacity } => Some((interval_us, capacity)),
                _ => None,
            })
            .collect();
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
            rules,
            max,
            per_shard: keys.div_ceil(SHARDS).max(1),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            base: Instant::now(),
        }))
    }

    /// The largest lease.
    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    /// Local µs since this table was made.
    pub(crate) fn local_us(&self) -> u64 {
        self.local_us_at(Instant::now())
    }

    pub(crate) fn local_us_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// Grants `cost` on `key` from its lease at local time `local` (µs) —
    /// or, for a call at a time the caller gave, at `caller` (µs on its
    /// timeline) — if it can: each limit's answer, as the in-memory engine
    /// words them. Otherwise the size of lease the round trip should ask for.
    pub(crate) fn grant(&self, key: &[u8], cost: u64, local: u64, caller: Option<u64>) -> Result<Vec<Decision>, u64> {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = shard.get_mut(key) else { return Err(0) };
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
                (held.size.max(1) * 2).min(self.max)
            } else if lasted {
                held.size.clamp(1, self.max)
            } else {
                held.size / 2
            };
            entry.held = None;
        }
        let warm = entry.last_trip != 0 && local.saturating_sub(entry.last_trip) < WARM;
        if !warm {
            entry.next_size = 0;
        } else if entry.next_size == 0 {
            entry.next_size = 2.min(self.max);
        }
        Err(entry.next_size)
    }

    /// Records a round trip for `key` at local time `x` (its lease, if
    /// `grant` brought one, received with the server's time bounded by the
    /// call's send and receive times `sent` and `x`; or, for a call at a
    /// time the caller gave, on the caller's timeline).
    pub(crate) fn arrived(&self, key: &[u8], sent: u64, x: u64, caller: bool, grant: Option<Grant>) {
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
        let Some(g) = grant.filter(|g| g.taken > 0 && g.ends.len() == self.rules.len()) else { return };
        let now = i64::try_from(g.now).unwrap_or(i64::MAX);
        let next = self.rules.iter().zip(&g.ends).map(|(&(t, _), &e)| e.saturating_sub(g.taken * t)).collect();
        entry.held = Some(if caller {
            Held { caller, next, end: g.ends, off_lo: 0, off_hi: 0, at: g.now, size: g.taken }
        } else {
            Held { caller, next, end: g.ends, off_lo: now - x as i64, off_hi: now - sent as i64, at: x, size: g.taken }
        });
    }

    /// Gives `tokens` back to `key`'s lease at local time `x`, if it holds
    /// one whose last granted slots can take them all: those slots are free
    /// again (every limit's `tokens` slots, all still ahead of the server's
    /// time and within the lease). Whether it did; if not, nothing changed.
    pub(crate) fn refund(&self, key: &[u8], tokens: u64, x: u64) -> bool {
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
    pub(crate) fn drain(&self) -> Vec<Unused> {
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
    pub(crate) fn held(&self) -> usize {
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
        let drift = x.saturating_sub(self.at).saturating_mul(DRIFT_PPM) / 1_000_000 + 1;
        let lo = (x as i64).saturating_add(self.off_lo).saturating_sub(drift as i64).max(0) as u64;
        let hi = (x as i64).saturating_add(self.off_hi).saturating_add(drift as i64).max(0) as u64;
        (lo, hi)
    }

    /// Grants `cost` from every limit's slice at local time `x`, or none.
    fn take(&mut self, rules: &[(u64, u64)], cost: u64, x: u64) -> Option<Vec<Decision>> {
        let (lo, hi) = self.server_time(x);
        let mut after = Vec::with_capacity(rules.len());
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
        self.next = after;
        Some(answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(t: u64, b: u64) -> RedisRule {
        RedisRule::TokenBucket { interval_us: t, capacity: b }
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
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 10, now: 5_000, ends: vec![16_000] }));
        let mut granted = 0;
        while l.grant(b"k", 1, 111, None).is_ok() {
            granted += 1;
        }
        // The server time is known within [5_000 + 1 − 1, 5_000 + 11 + 1]:
        // the slots start at 6_000 ms, all ahead of it, so all ten fit.
        assert_eq!(granted, 10);
        assert!(l.grant(b"k", 1, 112, None).is_err(), "spent");
    }

    #[test]
    fn slots_whose_time_passed_are_not_granted() {
        let l = leases(10);
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 10, now: 5_000, ends: vec![16_000] }));
        // 8.5 ms later on this clock: the slots before ~13_500 µs of server
        // time have passed; the ones left start at 14_000 and 15_000.
        let x = 110 + 8_500;
        let mut granted = 0;
        while l.grant(b"k", 1, x, None).is_ok() {
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
        l.arrived(b"k", 1_500, 2_000, false, Some(Grant { taken: 2, now: 10_000, ends: vec![13_000] }));
        let d = l.grant(b"k", 1, 2_000, None).unwrap();
        assert!(d[0].allowed);
        assert!(l.grant(b"k", 1, 2_000, None).is_err(), "the last slot's end is over B·T ahead of the earliest time");
        // Had the round trip taken 2 ms, the first slot might be in the
        // past already (the server's time up to 12 ms): nothing is granted
        // before the call's reading is behind it.
        let slow = Leases::new(&[bucket(1_000, 3)], Lease::Max(2), 10).unwrap().unwrap();
        slow.arrived(b"k", 0, 2_000, false, Some(Grant { taken: 2, now: 10_000, ends: vec![13_000] }));
        assert!(slow.grant(b"k", 1, 2_000, None).is_err());
    }

    #[test]
    fn several_limits_are_granted_all_or_nothing() {
        let l = Leases::new(&[bucket(1_000, 100), bucket(10_000, 100)], Lease::Max(5), 10).unwrap().unwrap();
        l.arrived(b"k", 0, 1, false, Some(Grant { taken: 2, now: 0, ends: vec![3_000, 30_000] }));
        assert!(l.grant(b"k", 2, 1, None).is_ok());
        assert!(l.grant(b"k", 1, 1, None).is_err());
    }

    #[test]
    fn sizes_grow_for_hot_keys_and_a_cold_key_takes_none() {
        let l = leases(64);
        assert_eq!(l.grant(b"k", 1, 10, None), Err(0), "never seen");
        l.arrived(b"k", 10, 20, false, None);
        assert_eq!(l.grant(b"k", 1, 30, None), Err(2), "warm: a lease of two");
        l.arrived(b"k", 30, 40, false, Some(Grant { taken: 2, now: 1_000, ends: vec![4_000] }));
        assert!(l.grant(b"k", 1, 41, None).is_ok());
        assert!(l.grant(b"k", 1, 42, None).is_ok());
        assert_eq!(l.grant(b"k", 1, 43, None), Err(4), "spent at once: twice as large");
        assert_eq!(l.grant(b"k", 1, 43 + WARM, None), Err(0), "cold again");
    }

    #[test]
    fn windows_are_refused_under_an_explicit_max_and_skipped_under_auto() {
        let window = RedisRule::FixedWindow { window_us: 1_000_000, limit: 10 };
        assert!(Leases::new(&[bucket(1_000, 100), window], Lease::Max(4), 10).unwrap_err().contains("token bucket"));
        assert!(Leases::new(&[window], Lease::Auto, 10).unwrap().is_none());
        assert!(Leases::new(&[bucket(1_000, 100)], Lease::Off, 10).unwrap().is_none());
        assert_eq!(Leases::new(&[bucket(1_000, 100)], Lease::Auto, 10).unwrap().unwrap().max(), 12);
    }

    #[test]
    fn refunds_free_the_lease_s_own_slots_and_drain_gives_the_rest_back() {
        let l = leases(10);
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 10, now: 5_000, ends: vec![16_000] }));
        for _ in 0..10 {
            l.grant(b"k", 1, 111, None).unwrap();
        }
        assert!(l.refund(b"k", 3, 111));
        for _ in 0..3 {
            l.grant(b"k", 1, 111, None).unwrap();
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
        // A lease that can no longer grant is dropped: its refunds go to Redis.
        l.arrived(b"k", 100, 110, false, Some(Grant { taken: 1, now: 5_000, ends: vec![7_000] }));
        assert!(l.grant(b"k", 1, 111, None).is_ok());
        assert!(l.grant(b"k", 1, 111, None).is_err());
        assert!(!l.refund(b"k", 1, 111));
    }
}
