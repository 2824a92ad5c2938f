//! Fixed and sliding window counters (see
//! [the contract](https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#42-fixedwindowlimit-window-and-43-slidingwindowlimit-window)).
//!
//! # Packing
//!
//! A key's window state is one `u64`: the window's whole index (`now /
//! window`, never wrapped) and its count(s). With `i = bits(MAX_TIME /
//! window)` (the bits the largest window index needs, `MAX_TIME` being the
//! last nanosecond a clock reading may have, `2^62 − 1`) and `c =
//! bits(limit)`:
//!
//! ```text
//! fixed:    0 | index: i bits | count: c bits             (i + c ≤ 63)
//! sliding:  0 | index: i bits | prev: c bits | cur: c bits (i + 2c ≤ 63)
//! ```
//!
//! `cur` is the count in the stored window and `prev` the count in the one
//! before. The top bit is always 0, so no state is ever the store's empty
//! marker.
//!
//! Because the index is whole, a state is never ambiguous: a key idle for
//! any length of time reads as idle (its window is over), never as busy, and
//! the store can always tell that it may be forgotten. The price is the
//! largest limit a window length admits — every limit with `c ≤ 63 − i`
//! (fixed: at least one call per nanosecond of window, so in practice any
//! limit) or `2c ≤ 63 − i` (sliding: 32,767 per second, 262,143 per minute,
//! 2,097,151 per hour, 8,388,607 per day); [`SlidingWindowCounter::max_limit`]
//! says which, and a larger limit is refused with an error that names it.
//!
//! # Time that runs backwards
//!
//! A call whose clock reading falls in a window before the stored one (a
//! thread that read the clock before another call landed, or a caller of
//! the `*_at` API) is counted in the stored, later window, never written
//! over it: a state only ever moves to a later window.

use std::time::Duration;

use crate::algorithm::div::Divider;
use crate::algorithm::{sealed, Algorithm};
use crate::decision::Verdict;
use crate::error::{Error, Result};
use crate::rate::{Period, Rate};

/// The last nanosecond a clock reading may have (times are below 2^62, about
/// 146 years); later readings are treated as this one.
const MAX_TIME: u64 = (1 << 62) - 1;

/// Which counter a packing is for: how many counts share the word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fixed,
    Sliding,
}

impl Kind {
    fn counts(self) -> u32 {
        match self {
            Kind::Fixed => 1,
            Kind::Sliding => 2,
        }
    }
}

/// Field widths of one packing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Packing {
    count_bits: u32,
}

impl Packing {
    /// The largest limit a window of `window_ns` admits.
    fn max_limit(kind: Kind, window_ns: u64) -> u64 {
        let index_bits = 64 - (MAX_TIME / window_ns).leading_zeros();
        let count_bits = (63 - index_bits) / kind.counts();
        (1u64 << count_bits) - 1
    }

    fn new(limit: u64, kind: Kind, window_ns: u64) -> Result<Self> {
        let max = Self::max_limit(kind, window_ns);
        if limit > max {
            let window = Duration::from_nanos(window_ns);
            return Err(Error::invalid(
                "limit",
                limit,
                match kind {
                    Kind::Fixed => format!("is too large for a fixed window of {window:?}: at most {max}"),
                    Kind::Sliding if max == 0 => {
                        "is too large for a sliding window of 1ns: use a window of at least 2ns".to_owned()
                    }
                    Kind::Sliding => format!(
                        "is too large for a sliding window of {window:?}: at most {max} (a window's whole index and \
                         two counts share 64 bits); use a longer window, a fixed window or a token bucket"
                    ),
                },
            ));
        }
        Ok(Packing { count_bits: 64 - limit.leading_zeros() })
    }

    #[inline]
    fn count_mask(self) -> u64 {
        (1 << self.count_bits) - 1
    }
}

/// Where a call at `now` stands relative to a stored window index.
#[derive(Clone, Copy, Debug)]
struct Frame {
    /// The window the call counts in.
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
    fn new(rate: Rate, kind: Kind) -> Result<Self> {
        let (limit, window) = (rate.count(), rate.period_nanos());
        let packing = Packing::new(limit, kind, window)?;
        Ok(Windows { limit, window, per_window: Divider::new(window), packing })
    }

    /// The frame of a call at `now` given the stored index, and how old the
    /// stored window is relative to that frame.
    #[inline]
    fn frame(&self, stored: u64, now: u64) -> (Frame, Age) {
        let now = now.min(MAX_TIME);
        let (index, offset) = self.per_window.div_rem(now);
        if stored == index {
            (Frame { index, gap: 0, offset }, Age::Same)
        } else if stored > index {
            // A later window is already recorded: count this call there.
            let gap = stored * self.window - now; // ≤ MAX_TIME: the stored window began at a valid time
            (Frame { index: stored, gap, offset: 0 }, Age::Same)
        } else if stored + 1 == index {
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
///
/// ```
/// use std::time::Duration;
/// use ratomic::{Algorithm, FixedWindowCounter, Rate};
///
/// let counter = FixedWindowCounter::new(Rate::parse("100/min")?)?;
/// assert_eq!((counter.limit(), counter.window()), (100, Duration::from_secs(60)));
/// assert_eq!(counter.to_string(), "fixed window 100 per 1m");
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowCounter {
    w: Windows,
}

impl FixedWindowCounter {
    /// `limit` calls per `window`, from a [`Rate`] (`"100/min"`: 100 per
    /// minute). Errors if the limit exceeds [`max_limit`](Self::max_limit).
    ///
    /// ```
    /// use ratomic::{FixedWindowCounter, Rate};
    ///
    /// assert!(FixedWindowCounter::new(Rate::parse("100/min")?).is_ok());
    /// let too_many = FixedWindowCounter::max_limit(std::time::Duration::from_secs(60)) + 1;
    /// assert!(FixedWindowCounter::new(Rate::new(too_many, std::time::Duration::from_secs(60))?).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new(rate: Rate) -> Result<Self> {
        Ok(FixedWindowCounter { w: Windows::new(rate, Kind::Fixed)? })
    }

    /// The largest limit a fixed window of this length admits (see the
    /// packing in the module docs): at least one call per nanosecond of
    /// window, so in practice any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::FixedWindowCounter;
    ///
    /// // A longer window has fewer windows to number, leaving more bits for counts.
    /// assert_eq!(FixedWindowCounter::max_limit(Duration::from_secs(1)), 1_073_741_823);
    /// assert_eq!(FixedWindowCounter::max_limit(Duration::from_secs(60)), 68_719_476_735);
    /// assert_eq!(FixedWindowCounter::max_limit(Duration::from_secs(86_400)), 140_737_488_355_327);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_limit(window: Duration) -> u64 {
        Packing::max_limit(Kind::Fixed, duration_nanos(window))
    }

    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::{FixedWindowCounter, Rate};
    ///
    /// assert_eq!(FixedWindowCounter::new(Rate::parse("5/90s")?)?.window(), Duration::from_secs(90));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.w.window)
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

/// `fixed window 5 per 60ms`.
impl std::fmt::Display for FixedWindowCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fixed window {} per {}", self.w.limit, Period(self.w.window))
    }
}

impl sealed::Sealed for FixedWindowCounter {}

impl Algorithm for FixedWindowCounter {
    const PRISTINE: u64 = 0;

    #[inline]
    fn limit(&self) -> u64 {
        self.w.limit
    }

    fn window(&self) -> Duration {
        Duration::from_nanos(self.w.window)
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

    /// The least state that counts at least as much as both, for a call at
    /// any time, earlier or later than either was written: a call in a
    /// window at or before the later one is counted in the later window (a
    /// state only moves forward), so the join keeps the later window with
    /// the larger count. Empty states count nothing and are left out, so a
    /// join of states idle at some time is idle then too.
    #[inline]
    fn join(&self, a: u64, b: u64) -> u64 {
        let ((ia, ca), (ib, cb)) = (self.unpack(a), self.unpack(b));
        if ca == 0 {
            b
        } else if cb == 0 {
            a
        } else {
            self.pack(ia.max(ib), ca.max(cb))
        }
    }
}

/// The sliding-window counter: the current window's count plus the previous
/// window's count weighted by the part of the previous window still inside
/// the sliding window; a call passes when `prev·weight + cur + cost ≤ limit`,
/// computed exactly in integers. The rule behind
/// [`SlidingWindow`](crate::SlidingWindow).
///
/// ```
/// use std::time::Duration;
/// use ratomic::{Algorithm, Rate, SlidingWindowCounter};
///
/// let counter = SlidingWindowCounter::new(Rate::parse("100 per hour")?)?;
/// assert_eq!((counter.limit(), counter.window()), (100, Duration::from_secs(3600)));
/// assert_eq!(counter.to_string(), "sliding window 100 per 1h");
/// # Ok::<(), ratomic::Error>(())
/// ```
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
    /// limit exceeds [`max_limit`](Self::max_limit).
    ///
    /// ```
    /// use ratomic::{SlidingWindowCounter, Rate};
    ///
    /// assert!(SlidingWindowCounter::new(Rate::parse("100/min")?).is_ok());
    /// let too_many = SlidingWindowCounter::max_limit(std::time::Duration::from_secs(60)) + 1;
    /// assert!(SlidingWindowCounter::new(Rate::new(too_many, std::time::Duration::from_secs(60))?).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new(rate: Rate) -> Result<Self> {
        Ok(SlidingWindowCounter { w: Windows::new(rate, Kind::Sliding)? })
    }

    /// The largest limit a sliding window of this length admits (the whole
    /// window index and two counts share 64 bits; see the module docs):
    /// 32,767 per second, 262,143 per minute, 2,097,151 per hour, 8,388,607
    /// per day. For more, use a longer window, a fixed window or a token
    /// bucket.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::SlidingWindowCounter;
    ///
    /// assert_eq!(SlidingWindowCounter::max_limit(Duration::from_secs(1)), 32_767);
    /// assert_eq!(SlidingWindowCounter::max_limit(Duration::from_secs(3_600)), 2_097_151);
    /// ```
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::SlidingWindowCounter;
    ///
    /// // A longer window has fewer windows to number, leaving more bits for counts.
    /// assert_eq!(SlidingWindowCounter::max_limit(Duration::from_secs(1)), 32_767);
    /// assert_eq!(SlidingWindowCounter::max_limit(Duration::from_secs(60)), 262_143);
    /// assert_eq!(SlidingWindowCounter::max_limit(Duration::from_secs(86_400)), 8_388_607);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_limit(window: Duration) -> u64 {
        Packing::max_limit(Kind::Sliding, duration_nanos(window))
    }

    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::{SlidingWindowCounter, Rate};
    ///
    /// assert_eq!(SlidingWindowCounter::new(Rate::parse("5/90s")?)?.window(), Duration::from_secs(90));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.w.window)
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

/// `sliding window 100 per 1h`.
impl std::fmt::Display for SlidingWindowCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sliding window {} per {}", self.w.limit, Period(self.w.window))
    }
}

impl sealed::Sealed for SlidingWindowCounter {}

impl Algorithm for SlidingWindowCounter {
    const PRISTINE: u64 = 0;

    #[inline]
    fn limit(&self) -> u64 {
        self.w.limit
    }

    fn window(&self) -> Duration {
        Duration::from_nanos(self.w.window)
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

    /// The least state (of this form) that counts at least as much as both
    /// for a call at any time, earlier or later than either was written.
    ///
    /// Say `late` has the later window `s` (counts `p`, `c`) and `early` an
    /// earlier one (`p'`, `c'`). The join keeps window `s` and `c`; its
    /// `prev` must cover
    /// - `p` (at `s` itself),
    /// - `c'` if `early` is the window just before `s` (at `s`, `early`'s
    ///   current count is the previous window's),
    /// - `p' + c' − c` for calls stamped at or before `early`'s window,
    ///   which both count in their own stored (later) window at full weight:
    ///   `early` as `p' + c'`, the join as `prev + c`.
    ///
    /// Empty states count nothing and are left out, so a join of states idle
    /// at some time is idle then too (forgetting full keys stays exact).
    #[inline]
    fn join(&self, a: u64, b: u64) -> u64 {
        let (ia, pa, ca) = self.unpack(a);
        let (ib, pb, cb) = self.unpack(b);
        if pa == 0 && ca == 0 {
            return b;
        }
        if pb == 0 && cb == 0 {
            return a;
        }
        if ia == ib {
            return self.pack(ia, pa.max(pb), ca.max(cb));
        }
        let ((s, p, c), (se, pe, ce)) =
            if ia > ib { ((ia, pa, ca), (ib, pb, cb)) } else { ((ib, pb, cb), (ia, pa, ca)) };
        let adjacent = if se + 1 == s { ce } else { 0 };
        let stale = (pe + ce).saturating_sub(c);
        let prev = p.max(adjacent).max(stale).min(self.w.packing.count_mask());
        self.pack(s, prev, c)
    }
}

/// A window length in nanoseconds (at least 1, at most `MAX_TIME`).
fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).clamp(1, MAX_TIME)
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
        // L = 10, W = 1000 ns. 7 calls in window 0, then at 1500 (offset 500)
        // the previous window weighs ⌈7·500/1000⌉ = 4: room for 6.
        let sw = sliding(10, 1_000);
        let mut s = 0;
        run(&sw, &mut s, 100, 1, 7);
        let ds = run(&sw, &mut s, 1_500, 1, 7);
        assert_eq!(ds.iter().filter(|d| d.allowed).count(), 6);
        assert_eq!(ds[5].remaining, 0);
        let denied = ds[6];
        assert!(!denied.allowed);
        // Need 7·(1000 − x) ≤ (10 − 6 − 1)·1000 → x ≥ 571.4 → 572: wait 72.
        assert_eq!(denied.retry_after_nanos(), 72);
        // cur = 6 counts until the end of the next window (3000): 1500 ns.
        assert_eq!(denied.reset_after_nanos(), 1_500);
        let (d, _) = sw.decide(s, 1_572, 1);
        assert!(d.allowed, "the wait was exact");
        let (d, _) = sw.decide(s, 1_571, 1);
        assert!(!d.allowed, "and one ns less is not enough");
    }

    #[test]
    fn sliding_window_retry_rolls_over_to_the_next_window() {
        // Window full: cur = 10. Next window, offset y: 10·(1000 − y) ≤ (10 − 4)·1000 → y ≥ 400.
        let sw = sliding(10, 1_000);
        let mut s = 0;
        run(&sw, &mut s, 300, 1, 10);
        let (d, _) = sw.decide(s, 300, 4);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_nanos(), 700 + 400);
        assert!(sw.decide(s, 1_400, 4).0.allowed);
        assert!(!sw.decide(s, 1_399, 4).0.allowed);
        // Two windows later nothing counts.
        assert_eq!(sw.decide(s, 2_000, 0).0.remaining, 10);
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
    fn an_idle_key_reads_as_idle_however_long_it_waited() {
        // The largest sliding limit per second: a whole index of 33 bits and
        // two counts of 15. Drained at t = 1 s, asked at every later power of
        // two up to the last valid clock reading: never busy.
        let l = SlidingWindowCounter::max_limit(Duration::from_secs(1));
        assert_eq!(l, 32_767);
        let sw = sliding(l, S);
        let f = fixed(FixedWindowCounter::max_limit(Duration::from_secs(1)), S);
        let (_, s) = sw.decide(0, S, l);
        let (_, fs) = f.decide(0, S, f.limit());
        let (s, fs) = (s.unwrap(), fs.unwrap());
        for k in 2..62 {
            let t = (1u64 << k).clamp(3 * S, MAX_TIME);
            let d = sw.decide(s, t, 0).0;
            assert_eq!((d.remaining, d.reset_ns), (l, 0), "sliding, idle until {t}");
            assert_eq!(sw.idle_after(s, t), 0);
            let d = f.decide(fs, t, 0).0;
            assert_eq!((d.remaining, d.reset_ns), (f.limit(), 0), "fixed, idle until {t}");
        }
    }

    #[test]
    fn limits_too_large_for_the_packing_are_rejected_with_the_maximum() {
        let err = SlidingWindowCounter::new(Rate::new(1_000_000, Duration::from_secs(1)).unwrap()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "limit", .. }), "{err}");
        assert!(err.to_string().contains("at most 32767"), "{err}");
        assert!(SlidingWindowCounter::new(Rate::new(32_767, Duration::from_secs(1)).unwrap()).is_ok());
        assert!(SlidingWindowCounter::new(Rate::new(32_768, Duration::from_secs(1)).unwrap()).is_err());
        assert!(SlidingWindowCounter::new(Rate::new(1_000_000, Duration::from_secs(3_600)).unwrap()).is_ok());
        assert!(FixedWindowCounter::new(Rate::new(1_000_000_000, Duration::from_secs(1)).unwrap()).is_ok());
        assert!(FixedWindowCounter::new(Rate::new(u64::MAX, Duration::from_secs(1)).unwrap()).is_err());
        // Every window length but a 1 ns sliding window has room for some limit.
        assert_eq!(SlidingWindowCounter::max_limit(Duration::from_nanos(1)), 0);
        let err = SlidingWindowCounter::new(Rate::new(1, Duration::from_nanos(1)).unwrap()).unwrap_err();
        assert!(err.to_string().contains("at least 2ns"), "{err}");
        assert_eq!(SlidingWindowCounter::max_limit(Duration::from_nanos(2)), 1);
        assert_eq!(FixedWindowCounter::max_limit(Duration::from_nanos(1)), 1);
    }
}
