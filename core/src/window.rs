//! Fixed and sliding window counters (SPEC §4.2, §4.3).
//!
//! # Packing
//!
//! A key's window state is one `u64`. With `c = bits(limit)` (the bits the
//! largest count needs):
//!
//! ```text
//! fixed:    0 | index: 63 − c bits            | count: c bits
//! sliding:  0 | index: 63 − 2c bits | prev: c | cur:   c bits
//! ```
//!
//! `index` is the window number (`now / window`) modulo `2^(index bits)`,
//! `cur` the count in that window and `prev` the count in the window before.
//! The top bit is always 0, so no state is ever the store's empty marker.
//!
//! # Wrap-around, and time that runs backwards
//!
//! The stored index is compared with the current one modulo its width: equal
//! is "this window", one behind is "the previous window", up to half the
//! range ahead is "a later window" (a call whose clock reading is older than
//! one already recorded is counted in that later window rather than
//! overwriting it), anything else is "long ago" (counts zero).
//!
//! A key left idle for more than half the index range (the *horizon*) can
//! have its old index alias a current or later window. Aliasing only ever
//! makes the key count *more*, never less, so it never grants extra; at worst
//! an idle key is treated as busier than it is until its aliased window
//! passes. Keys whose windows are over are dropped by the store long before
//! that (see [`Options`](crate::Options)), and the constructors reject a
//! limit whose packing would leave a horizon shorter than a year.

use std::time::Duration;

use crate::algorithm::{sealed, Algorithm};
use crate::decision::Verdict;
use crate::div::Divider;
use crate::error::{Error, Result};
use crate::rate::{Rate, MAX_NANOS};

/// Every window configuration keeps idle keys exact for at least this long.
const MIN_HORIZON_NS: u128 = 365 * 86_400 * 1_000_000_000;

/// Field widths of one packing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Packing {
    count_bits: u32,
    index_bits: u32,
}

impl Packing {
    fn new(limit: u64, counts: u32, window_ns: u64, what: &'static str) -> Result<Self> {
        let count_bits = 64 - limit.leading_zeros();
        let index_bits = 63u32.saturating_sub(counts * count_bits);
        let horizon = if index_bits == 0 { 0 } else { (1u128 << (index_bits - 1)) * u128::from(window_ns) };
        if index_bits < 2 || horizon < MIN_HORIZON_NS {
            return Err(Error::invalid(
                "limit",
                limit,
                match what {
                    "fixed" => "is too large for a fixed window's 64-bit state with this window length",
                    _ => {
                        "is too large for a sliding window's 64-bit state with this window length \
                          (an idle key would stay exact for less than a year); use a longer window \
                          or a fixed window"
                    }
                },
            ));
        }
        Ok(Packing { count_bits, index_bits })
    }

    #[inline]
    fn count_mask(self) -> u64 {
        (1 << self.count_bits) - 1
    }

    #[inline]
    fn index_mask(self) -> u64 {
        (1 << self.index_bits) - 1
    }

    /// Half the index range: how far ahead a stored index may be and still
    /// be read as a later window.
    #[inline]
    fn half(self) -> u64 {
        1 << (self.index_bits - 1)
    }

    fn horizon(self, window_ns: u64) -> Duration {
        let ns = u128::from(self.half()) * u128::from(window_ns);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// Where a call at `now` stands relative to a stored window index.
#[derive(Clone, Copy, Debug)]
struct Frame {
    /// The window the call counts in, modulo the index width.
    index: u64,
    /// Nanoseconds from `now` to that window's start (0 unless the stored
    /// window is later than `now`'s).
    gap: u64,
    /// Nanoseconds into that window (0 when it is later than `now`'s).
    offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Age {
    Same,
    Previous,
    LongAgo,
}

/// The window arithmetic both counters share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Windows {
    limit: u64,
    window: u64,
    /// Division by `window` without a `div` instruction.
    per_window: Divider,
    packing: Packing,
}

impl Windows {
    fn new(rate: Rate, counts: u32, what: &'static str) -> Result<Self> {
        let (limit, window) = (rate.count(), rate.period_nanos());
        let packing = Packing::new(limit, counts, window, what)?;
        Ok(Windows { limit, window, per_window: Divider::new(window), packing })
    }

    /// The frame of a call at `now` given the stored index, and how old the
    /// stored window is relative to that frame.
    #[inline]
    fn frame(&self, stored: u64, now: u64) -> (Frame, Age) {
        let now = now.min(MAX_NANOS);
        let (w, offset) = self.per_window.div_rem(now);
        let mask = self.packing.index_mask();
        let index = w & mask;
        let ahead = stored.wrapping_sub(index) & mask;
        if ahead == 0 {
            (Frame { index, gap: 0, offset }, Age::Same)
        } else if ahead < self.packing.half() {
            // A later window is already recorded: count this call there.
            let start = (u128::from(w) + u128::from(ahead)) * u128::from(self.window);
            let gap = u64::try_from(start - u128::from(now)).unwrap_or(u64::MAX);
            (Frame { index: stored, gap, offset: 0 }, Age::Same)
        } else if index.wrapping_sub(stored) & mask == 1 {
            (Frame { index, gap: 0, offset }, Age::Previous)
        } else {
            (Frame { index, gap: 0, offset }, Age::LongAgo)
        }
    }

    /// Nanoseconds from `now` to the end of the frame's window.
    #[inline]
    fn until_end(&self, f: Frame) -> u64 {
        f.gap.saturating_add(self.window - f.offset)
    }
}

/// The fixed-window counter: windows of length `window` aligned to the
/// clock's epoch; a call passes when `count + cost ≤ limit`. The rule behind
/// [`FixedWindow`](crate::FixedWindow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowCounter {
    w: Windows,
}

impl FixedWindowCounter {
    /// `limit` calls per `window`, from a [`Rate`] (`"100/min"`: 100 per
    /// minute). Errors if the limit is too large for the packing.
    pub fn new(rate: Rate) -> Result<Self> {
        Ok(FixedWindowCounter { w: Windows::new(rate, 1, "fixed")? })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.w.window)
    }

    /// How long an idle key's state stays exact (see the module docs).
    pub fn horizon(&self) -> Duration {
        self.w.packing.horizon(self.w.window)
    }

    #[inline]
    fn unpack(&self, s: u64) -> (u64, u64) {
        (s >> self.w.packing.count_bits, s & self.w.packing.count_mask())
    }

    #[inline]
    fn pack(&self, index: u64, count: u64) -> u64 {
        index << self.w.packing.count_bits | count
    }

    /// The frame and the count that applies in it.
    #[inline]
    fn view(&self, state: u64, now: u64) -> (Frame, u64) {
        let (index, count) = self.unpack(state);
        let (frame, age) = self.w.frame(index, now);
        (frame, if age == Age::Same { count } else { 0 })
    }
}

impl sealed::Sealed for FixedWindowCounter {}

impl Algorithm for FixedWindowCounter {
    const PRISTINE: u64 = 0;

    #[inline]
    fn limit(&self) -> u64 {
        self.w.limit
    }

    #[inline]
    fn decide(&self, state: u64, now: u64, cost: u64) -> (Verdict, Option<u64>) {
        let (f, count) = self.view(state, now);
        let limit = self.w.limit;
        let to_end = self.w.until_end(f);
        if count + cost <= limit {
            let after = count + cost;
            let reset = if after > 0 { to_end } else { 0 };
            (Verdict::allowed(limit - after, limit, reset), (cost > 0).then(|| self.pack(f.index, after)))
        } else {
            // The count resets when the window ends, and cost ≤ limit.
            (Verdict::denied(limit - count, limit, to_end, to_end), None)
        }
    }

    #[inline]
    fn refund(&self, state: u64, now: u64, tokens: u64) -> Option<u64> {
        let (f, count) = self.view(state, now);
        (count > 0 && tokens > 0).then(|| self.pack(f.index, count - tokens.min(count)))
    }

    #[inline]
    fn idle_after(&self, state: u64, now: u64) -> u64 {
        let (f, count) = self.view(state, now);
        if count > 0 {
            self.w.until_end(f)
        } else {
            0
        }
    }

    #[inline]
    fn join(&self, a: u64, b: u64) -> u64 {
        let ((ia, ca), (ib, cb)) = (self.unpack(a), self.unpack(b));
        let mask = self.w.packing.index_mask();
        if ca == 0 {
            b
        } else if cb == 0 {
            a
        } else if ia == ib {
            self.pack(ia, ca.max(cb))
        } else if ia.wrapping_sub(ib) & mask < self.w.packing.half() {
            a // a's window is later: b's no longer applies once a's has begun
        } else {
            b
        }
    }
}

/// The sliding-window counter: the current window's count plus the previous
/// window's count weighted by the part of the previous window still inside
/// the sliding window; a call passes when `prev·weight + cur + cost ≤ limit`,
/// computed exactly in integers. The rule behind
/// [`SlidingWindow`](crate::SlidingWindow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindowCounter {
    w: Windows,
}

/// A sliding window's counts as they apply at one moment.
#[derive(Clone, Copy, Debug)]
struct Counts {
    frame: Frame,
    prev: u64,
    cur: u64,
}

impl SlidingWindowCounter {
    /// `limit` calls per sliding `window`, from a [`Rate`]. Errors if the
    /// limit is too large for the packing (two counts and an index share 63
    /// bits; the index must cover at least a year of windows).
    pub fn new(rate: Rate) -> Result<Self> {
        Ok(SlidingWindowCounter { w: Windows::new(rate, 2, "sliding")? })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.w.window)
    }

    /// How long an idle key's state stays exact (see the module docs).
    pub fn horizon(&self) -> Duration {
        self.w.packing.horizon(self.w.window)
    }

    #[inline]
    fn unpack(&self, s: u64) -> (u64, u64, u64) {
        let cb = self.w.packing.count_bits;
        let m = self.w.packing.count_mask();
        (s >> (2 * cb), (s >> cb) & m, s & m)
    }

    #[inline]
    fn pack(&self, index: u64, prev: u64, cur: u64) -> u64 {
        let cb = self.w.packing.count_bits;
        index << (2 * cb) | prev << cb | cur
    }

    #[inline]
    fn view(&self, state: u64, now: u64) -> Counts {
        let (index, prev, cur) = self.unpack(state);
        let (frame, age) = self.w.frame(index, now);
        match age {
            Age::Same => Counts { frame, prev, cur },
            Age::Previous => Counts { frame, prev: cur, cur: 0 },
            Age::LongAgo => Counts { frame, prev: 0, cur: 0 },
        }
    }

    /// The previous window's weight in whole calls: `⌈prev·(W − offset) / W⌉`.
    /// A call for `cost` on top of `cur` fits exactly when
    /// `prev·(W − offset) + (cur + cost)·W ≤ limit·W`, that is when
    /// `cur + cost + carried ≤ limit`, since the right side is a multiple of `W`.
    #[inline]
    fn carried(&self, c: &Counts) -> u64 {
        let left = self.w.window - c.frame.offset;
        match c.prev.checked_mul(left) {
            Some(weight) if weight < 1 << 63 => self.w.per_window.div_ceil(weight),
            // ≤ prev, so it fits in a u64.
            _ => (u128::from(c.prev) * u128::from(left)).div_ceil(u128::from(self.w.window)) as u64,
        }
    }

    /// Whole calls that still fit on top of `cur`, given `carried`.
    #[inline]
    fn remaining(&self, cur: u64, carried: u64) -> u64 {
        self.w.limit.saturating_sub(cur).saturating_sub(carried)
    }

    /// When the estimate reaches zero: the previous window's weight runs out
    /// at the end of this window, the current window's at the end of the next.
    #[inline]
    fn reset_after(&self, c: &Counts, cur: u64) -> u64 {
        let to_end = self.w.until_end(c.frame);
        if cur > 0 {
            to_end.saturating_add(self.w.window)
        } else if c.prev > 0 {
            to_end
        } else {
            0
        }
    }

    /// The exact wait until a call for `cost` would pass, given it does not now.
    fn retry_after(&self, c: &Counts, cost: u64) -> u64 {
        let (l, w) = (u128::from(self.w.limit), u128::from(self.w.window));
        if c.cur + cost <= self.w.limit {
            // Within this window, as the previous window's weight drains:
            // need prev·(W − x) ≤ (L − cur − cost)·W.
            let fit = (l - u128::from(c.cur + cost)) * w / u128::from(c.prev);
            let x = w - fit; // ≤ W; x = W is the next window's start
            c.frame.gap.saturating_add((x - u128::from(c.frame.offset)) as u64)
        } else {
            // Only in the next window, where prev = cur and cur = 0:
            // need cur·(W − y) ≤ (L − cost)·W.
            let fit = (l - u128::from(cost)) * w / u128::from(c.cur);
            let y = (w - fit) as u64;
            self.w.until_end(c.frame).saturating_add(y)
        }
    }
}

impl sealed::Sealed for SlidingWindowCounter {}

impl Algorithm for SlidingWindowCounter {
    const PRISTINE: u64 = 0;

    #[inline]
    fn limit(&self) -> u64 {
        self.w.limit
    }

    #[inline]
    fn decide(&self, state: u64, now: u64, cost: u64) -> (Verdict, Option<u64>) {
        let c = self.view(state, now);
        let limit = self.w.limit;
        let after = c.cur + cost;
        let carried = self.carried(&c);
        if after + carried <= limit {
            let d = Verdict::allowed(limit - after - carried, limit, self.reset_after(&c, after));
            (d, (cost > 0).then(|| self.pack(c.frame.index, c.prev, after)))
        } else {
            let d = Verdict::denied(
                self.remaining(c.cur, carried),
                limit,
                self.retry_after(&c, cost),
                self.reset_after(&c, c.cur),
            );
            (d, None)
        }
    }

    #[inline]
    fn refund(&self, state: u64, now: u64, tokens: u64) -> Option<u64> {
        let c = self.view(state, now);
        (c.cur > 0 && tokens > 0).then(|| self.pack(c.frame.index, c.prev, c.cur - tokens.min(c.cur)))
    }

    #[inline]
    fn idle_after(&self, state: u64, now: u64) -> u64 {
        let c = self.view(state, now);
        self.reset_after(&c, c.cur)
    }

    #[inline]
    fn join(&self, a: u64, b: u64) -> u64 {
        let (ia, pa, ca) = self.unpack(a);
        let (ib, pb, cb) = self.unpack(b);
        let mask = self.w.packing.index_mask();
        if pa == 0 && ca == 0 {
            return b;
        }
        if pb == 0 && cb == 0 {
            return a;
        }
        // Align the earlier state to the later window, then take the larger
        // count in each position.
        let (late, early) = if ia.wrapping_sub(ib) & mask < self.w.packing.half() {
            ((ia, pa, ca), (ib, pb, cb))
        } else {
            ((ib, pb, cb), (ia, pa, ca))
        };
        let (index, p, c) = late;
        let (early_prev, early_cur) = match index.wrapping_sub(early.0) & mask {
            0 => (early.1, early.2),
            1 => (early.2, 0),
            _ => (0, 0),
        };
        self.pack(index, p.max(early_prev), c.max(early_cur))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn fixed(limit: u64, window: u64) -> FixedWindowCounter {
        FixedWindowCounter::new(Rate::new(limit, Duration::from_nanos(window)).unwrap()).unwrap()
    }

    fn sliding(limit: u64, window: u64) -> SlidingWindowCounter {
        SlidingWindowCounter::new(Rate::new(limit, Duration::from_nanos(window)).unwrap()).unwrap()
    }

    /// Runs `calls` of `cost` at `now`, threading the state; returns the decisions.
    fn run<A: Algorithm>(a: &A, state: &mut u64, now: u64, cost: u64, calls: usize) -> Vec<Verdict> {
        (0..calls)
            .map(|_| {
                let (d, next) = a.decide(*state, now, cost);
                if let Some(n) = next {
                    *state = n;
                }
                d
            })
            .collect()
    }

    #[test]
    fn fixed_window_equations() {
        let f = fixed(3, 10 * S);
        let mut s = FixedWindowCounter::PRISTINE;
        let ds = run(&f, &mut s, 12 * S, 1, 4);
        assert_eq!(
            ds.iter().map(|d| (d.allowed, d.remaining)).collect::<Vec<_>>(),
            [(true, 2), (true, 1), (true, 0), (false, 0)]
        );
        // Window [10 s, 20 s): the denial waits for 20 s, and so does the reset.
        assert_eq!(ds[3].retry_after_nanos(), 8 * S);
        assert_eq!(ds[3].reset_after_nanos(), 8 * S);
        assert_eq!(ds[0].reset_after_nanos(), 8 * S);
        // The boundary: a full new window at exactly 20 s.
        let ds = run(&f, &mut s, 20 * S, 1, 4);
        assert_eq!(ds.iter().filter(|d| d.allowed).count(), 3);
        // Cost 0 writes nothing and an empty key has nothing to reset.
        let (d, next) = f.decide(FixedWindowCounter::PRISTINE, 5, 0);
        assert_eq!((d.allowed, d.remaining, d.reset_after_nanos(), next), (true, 3, 0, None));
    }

    #[test]
    fn fixed_window_refund_stays_in_its_window() {
        let f = fixed(5, 10);
        let (_, charged) = f.decide(0, 3, 2);
        let charged = charged.unwrap();
        assert_eq!(f.decide(charged, 4, 0).0.remaining, 3);
        let back = f.refund(charged, 4, 1).unwrap();
        assert_eq!(f.decide(back, 4, 0).0.remaining, 4);
        assert_eq!(f.refund(charged, 13, 1), None, "nothing to refund in a new window");
    }

    #[test]
    fn sliding_window_equations() {
        // L = 10, W = 100 ns. 8 calls in window 0, then at 150 (offset 50)
        // the previous window weighs 8·50/100 = 4: room for 6.
        let sw = sliding(10, 100);
        let mut s = 0;
        run(&sw, &mut s, 10, 1, 8);
        let ds = run(&sw, &mut s, 150, 1, 7);
        assert_eq!(ds.iter().filter(|d| d.allowed).count(), 6);
        assert_eq!(ds[5].remaining, 0);
        let denied = ds[6];
        assert!(!denied.allowed);
        // Need 8·(100 − x) ≤ (10 − 6 − 1)·100 → x ≥ 62.5 → 63: wait 13.
        assert_eq!(denied.retry_after_nanos(), 13);
        // cur = 6 counts until the end of the next window (300): 150 ns.
        assert_eq!(denied.reset_after_nanos(), 150);
        let (d, _) = sw.decide(s, 163, 1);
        assert!(d.allowed, "the wait was exact");
        let (d, _) = sw.decide(s, 162, 1);
        assert!(!d.allowed, "and one ns less is not enough");
    }

    #[test]
    fn sliding_window_retry_rolls_over_to_the_next_window() {
        // Window full: cur = 10. Next window, offset y: 10·(100 − y) ≤ (10 − 4)·100 → y ≥ 40.
        let sw = sliding(10, 100);
        let mut s = 0;
        run(&sw, &mut s, 30, 1, 10);
        let (d, _) = sw.decide(s, 30, 4);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_nanos(), 70 + 40);
        assert!(sw.decide(s, 140, 4).0.allowed);
        assert!(!sw.decide(s, 139, 4).0.allowed);
        // Two windows later nothing counts.
        assert_eq!(sw.decide(s, 200, 0).0.remaining, 10);
    }

    #[test]
    fn stale_timestamps_count_in_the_later_window() {
        // A call whose clock reading is in window 0 after window 1 has been
        // recorded must not overwrite window 1's count.
        let f = fixed(2, 100);
        let (_, s) = f.decide(0, 150, 2);
        let s = s.unwrap();
        let (d, next) = f.decide(s, 99, 1);
        assert!(!d.allowed && next.is_none());
        assert_eq!(d.retry_after_nanos(), 1 + 100, "wait for window 1 to end");
        let sw = sliding(2, 100);
        let (_, s) = sw.decide(0, 150, 2);
        assert!(!sw.decide(s.unwrap(), 99, 1).0.allowed);
    }

    #[test]
    fn wrap_around_never_grants_extra() {
        // Limit 2^19 − 1 per 2 s → 19 count bits, index bits 63 − 38 = 25:
        // a horizon of 2^24 windows, 388 days.
        let sw = sliding((1 << 19) - 1, 2 * S);
        assert_eq!(sw.w.packing.index_bits, 25);
        let full = (1u64 << 19) - 1;
        let (_, s) = sw.decide(0, 0, full);
        let s = s.unwrap();
        // Any time later, whether the index has wrapped or not, the key may
        // read as busier than it is but never as emptier; within the horizon
        // (2^24 windows) it reads exactly.
        for k in [1u64, 2, 3, 1 << 23, (1 << 24) - 1, 1 << 24, (1 << 24) + 1, (1 << 25) - 1, 1 << 25, (1 << 25) + 1] {
            let left = sw.decide(s, k * 2 * S, 0).0.remaining;
            let truth = if k == 1 { 0 } else { full }; // at offset 0 the previous window weighs fully
            assert!(left <= truth, "{k} windows later: {left} > {truth}");
            if k < 1 << 24 {
                assert_eq!(left, truth, "exact within the horizon ({k} windows later)");
            }
        }
        assert!(sw.horizon() >= Duration::from_secs(365 * 86_400));
    }

    #[test]
    fn limits_too_large_for_the_packing_are_rejected() {
        let err = SlidingWindowCounter::new(Rate::new(1_000_000, Duration::from_secs(1)).unwrap()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "limit", .. }), "{err}");
        assert!(SlidingWindowCounter::new(Rate::new(100_000, Duration::from_secs(1)).unwrap()).is_ok());
        assert!(SlidingWindowCounter::new(Rate::new(1_000_000, Duration::from_secs(60)).unwrap()).is_ok());
        assert!(FixedWindowCounter::new(Rate::new(1 << 32, Duration::from_secs(1)).unwrap()).is_ok());
        assert!(FixedWindowCounter::new(Rate::new(u64::MAX, Duration::from_secs(1)).unwrap()).is_err());
    }

    #[test]
    fn joins_are_at_least_as_restrictive_as_both() {
        let f = fixed(10, 100);
        let sw = sliding(10, 100);
        let mut seed = 1u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..5_000 {
            let (t1, t2) = (next() % 1_000, next() % 1_000);
            let (n1, n2) = (next() % 11, next() % 11);
            let fa = f.decide(0, t1, n1).1.unwrap_or(0);
            let fb = f.decide(0, t2, n2).1.unwrap_or(0);
            let sa = sw.decide(sw.decide(0, t1.saturating_sub(100), n2).1.unwrap_or(0), t1, n1).1.unwrap_or(0);
            let sb = sw.decide(0, t2, n2).1.unwrap_or(0);
            let (fj, sj) = (f.join(fa, fb), sw.join(sa, sb));
            // At any time at or after both states were written, the join
            // leaves no more room than either.
            for now in t1.max(t2)..t1.max(t2) + 300 {
                let fr = |s| f.decide(s, now, 0).0.remaining;
                let sr = |s| sw.decide(s, now, 0).0.remaining;
                assert!(fr(fj) <= fr(fa).min(fr(fb)), "fixed {fa:x} {fb:x} at {now}");
                assert!(sr(sj) <= sr(sa).min(sr(sb)), "sliding {sa:x} {sb:x} at {now}");
            }
        }
    }
}
