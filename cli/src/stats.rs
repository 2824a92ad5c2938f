//! Summary statistics over a run: percentiles and the largest burst.

/// The `p`-th percentile (0–100) of `sorted` by the nearest-rank method:
/// the smallest value with at least `p`% of the values at or below it.
/// `None` for an empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The most events in any half-open span `[t, t + span)`, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Burst {
    /// How many events.
    pub count: u64,
    /// Time of the first of them (ns).
    pub first_ns: u64,
    /// Time of the last of them (ns).
    pub last_ns: u64,
}

/// The largest number of `times` (sorted ascending) inside any span of
/// length `span_ns` (half-open: events exactly `span_ns` apart are not in
/// one span). Two pointers: O(n).
pub fn max_in_span(times: &[u64], span_ns: u64) -> Burst {
    debug_assert!(times.windows(2).all(|w| w[0] <= w[1]));
    let mut best = Burst::default();
    let mut lo = 0;
    for (hi, &t) in times.iter().enumerate() {
        while t - times[lo] >= span_ns {
            lo += 1;
        }
        let count = (hi - lo + 1) as u64;
        if count > best.count {
            best = Burst { count, first_ns: times[lo], last_ns: t };
        }
    }
    best
}

/// The largest burst over several keys' grant times: each key is limited
/// on its own, so bursts are counted per key.
pub fn max_in_span_per_key<'a>(keys: impl IntoIterator<Item = &'a Vec<u64>>, span_ns: u64) -> Burst {
    keys.into_iter()
        .map(|t| max_in_span(t, span_ns))
        .max_by_key(|b| (b.count, std::cmp::Reverse(b.first_ns)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[1, 2, 3], 50.0), Some(2));
        assert_eq!(percentile(&[1, 2, 3, 4], 50.0), Some(2));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn max_in_span_is_half_open_and_says_where() {
        let t = [0, 10, 20, 30, 100, 101, 102, 103, 104, 200];
        assert_eq!(max_in_span(&t, 5), Burst { count: 5, first_ns: 100, last_ns: 104 });
        assert_eq!(max_in_span(&t, 4).count, 4, "104 − 100 = 4 is not inside a span of 4");
        assert_eq!(max_in_span(&t, 1).count, 1);
        assert_eq!(max_in_span(&t, 31), Burst { count: 5, first_ns: 100, last_ns: 104 });
        assert_eq!(max_in_span(&t, 1_000).count, 10);
        assert_eq!(max_in_span(&[], 10), Burst::default());
    }

    #[test]
    fn equal_times_all_count() {
        assert_eq!(max_in_span(&[5, 5, 5, 9], 1).count, 3);
    }

    #[test]
    fn per_key_bursts_are_not_summed_across_keys() {
        let a = vec![0, 1, 2];
        let b = vec![0, 1, 2, 3];
        assert_eq!(max_in_span_per_key([&a, &b], 10).count, 4);
        assert_eq!(max_in_span_per_key(std::iter::empty(), 10).count, 0);
    }
}
