//! Traffic generators: when each request arrives and which key it names.

use std::fmt;

use crate::rng::SplitMix64;

const NS_PER_S: f64 = 1e9;

/// How requests are spread over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arrival {
    /// Evenly spaced: one request every `1/rps`.
    Uniform,
    /// A Poisson process: independent, exponentially distributed gaps with
    /// mean `1/rps` (seeded, so reproducible).
    Poisson,
    /// Quiet, then a burst straddling a window boundary: every second window
    /// boundary gets two windows' worth of requests, half in the last
    /// twentieth of the window before it and half in the first twentieth of
    /// the window after it. The traffic that shows a fixed window's double
    /// burst.
    Bursty,
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arrival::Uniform => "uniform",
            Arrival::Poisson => "poisson",
            Arrival::Bursty => "bursty",
        })
    }
}

/// One request: when it arrives (ns from the start) and its key's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Arrival time, nanoseconds since the start of the run.
    pub at_ns: u64,
    /// Which key (`0..keys`).
    pub key: u32,
}

/// A workload: the traffic a simulation offers.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Mean requests per second over the run (all keys together).
    pub rps: f64,
    /// Length of the run, in nanoseconds.
    pub duration_ns: u64,
    /// Number of distinct keys (≥ 1).
    pub keys: u32,
    /// How requests are spread over time.
    pub arrival: Arrival,
    /// Seed for the random parts (Poisson gaps and key choice).
    pub seed: u64,
    /// The window length bursty traffic aligns to (the limit's period).
    pub boundary_ns: u64,
}

impl Workload {
    /// Every request of the run, in arrival order.
    ///
    /// Uniform and bursty traffic visit keys round-robin; Poisson traffic
    /// picks a key at random for each request.
    pub fn generate(&self) -> Vec<Request> {
        let keys = self.keys.max(1);
        let mut out = Vec::with_capacity(self.expected_requests().min(1 << 24) as usize);
        match self.arrival {
            Arrival::Uniform => {
                let gap = NS_PER_S / self.rps;
                for i in 0u64.. {
                    let at = (i as f64 * gap).round() as u64;
                    if at >= self.duration_ns {
                        break;
                    }
                    out.push(Request { at_ns: at, key: (i % u64::from(keys)) as u32 });
                }
            }
            Arrival::Poisson => {
                let mut rng = SplitMix64::new(self.seed);
                let mut t = 0.0f64;
                loop {
                    let at = t.round() as u64;
                    if at >= self.duration_ns {
                        break;
                    }
                    let key = rng.below(u64::from(keys)) as u32;
                    out.push(Request { at_ns: at, key });
                    t += -rng.next_unit().ln() * NS_PER_S / self.rps;
                }
            }
            Arrival::Bursty => {
                let period = self.boundary_ns.max(2);
                let half_width = (period / 20).max(1);
                // Two windows' worth of requests per burst keeps the mean rate at `rps`.
                let per_burst = ((self.rps * 2.0 * period as f64 / NS_PER_S).round() as u64).max(2);
                let (before, after) = (per_burst / 2, per_burst - per_burst / 2);
                let mut i = 0u64;
                let mut boundary = u128::from(period);
                while boundary - u128::from(half_width) < u128::from(self.duration_ns) {
                    let start = boundary - u128::from(half_width);
                    let spread = |j: u64, n: u64| u128::from(j) * u128::from(half_width) / u128::from(n);
                    let times = (0..before)
                        .map(|j| start + spread(j, before))
                        .chain((0..after).map(|j| boundary + spread(j, after)));
                    for at in times {
                        if at >= u128::from(self.duration_ns) {
                            break;
                        }
                        out.push(Request { at_ns: at as u64, key: (i % u64::from(keys)) as u32 });
                        i += 1;
                    }
                    boundary += 2 * u128::from(period);
                }
            }
        }
        out
    }

    /// About how many requests the run offers, at most: `rps × seconds`,
    /// plus for bursty traffic one whole burst (a run that ends just after a
    /// boundary has had more than its mean share).
    pub fn expected_requests(&self) -> u64 {
        let mean = (self.rps * self.duration_ns as f64 / NS_PER_S).ceil();
        let extra = match self.arrival {
            Arrival::Bursty => (self.rps * 2.0 * self.boundary_ns as f64 / NS_PER_S).ceil(),
            _ => 0.0,
        };
        (mean + extra) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(arrival: Arrival) -> Workload {
        Workload { rps: 50.0, duration_ns: 10_000_000_000, keys: 1, arrival, seed: 42, boundary_ns: 1_000_000_000 }
    }

    #[test]
    fn uniform_is_evenly_spaced_and_ends_before_the_duration() {
        let reqs = workload(Arrival::Uniform).generate();
        assert_eq!(reqs.len(), 500);
        assert_eq!(reqs[0].at_ns, 0);
        assert!(reqs.windows(2).all(|w| w[1].at_ns - w[0].at_ns == 20_000_000));
        assert_eq!(reqs.last().unwrap().at_ns, 9_980_000_000);
    }

    #[test]
    fn uniform_visits_keys_round_robin() {
        let reqs = Workload { keys: 3, ..workload(Arrival::Uniform) }.generate();
        let keys: Vec<_> = reqs.iter().take(7).map(|r| r.key).collect();
        assert_eq!(keys, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn poisson_is_reproducible_sorted_and_near_the_mean_rate() {
        let w = Workload { duration_ns: 200_000_000_000, keys: 4, ..workload(Arrival::Poisson) };
        let a = w.generate();
        assert_eq!(a, w.generate(), "same seed, same traffic");
        assert_ne!(a, Workload { seed: 43, ..w }.generate(), "another seed, other traffic");
        assert!(a.windows(2).all(|p| p[0].at_ns <= p[1].at_ns));
        assert!(a.iter().all(|r| r.at_ns < w.duration_ns && r.key < 4));
        // 10,000 expected; a Poisson count's standard deviation is 100.
        assert!((9_500..=10_500).contains(&a.len()), "{}", a.len());
        // Exponential gaps: about a third of them exceed the mean (e^-1 ≈ 0.37).
        let long = a.windows(2).filter(|p| p[1].at_ns - p[0].at_ns > 20_000_000).count() as f64 / a.len() as f64;
        assert!((0.33..0.41).contains(&long), "{long}");
        // Every key gets a share.
        for k in 0..4 {
            let n = a.iter().filter(|r| r.key == k).count();
            assert!((2_200..=2_800).contains(&n), "key {k}: {n}");
        }
    }

    #[test]
    fn bursty_straddles_every_second_boundary_and_keeps_the_mean_rate() {
        let reqs = workload(Arrival::Bursty).generate();
        // Boundaries at 1, 3, 5, 7, 9 s; 100 requests each (two windows at 50/s).
        assert_eq!(reqs.len(), 500);
        for (b, burst) in [1u64, 3, 5, 7, 9].iter().zip(reqs.chunks(100)) {
            let boundary = b * 1_000_000_000;
            let (before, after): (Vec<&Request>, Vec<&Request>) = burst.iter().partition(|r| r.at_ns < boundary);
            assert_eq!((before.len(), after.len()), (50, 50), "boundary {b}s");
            assert!(before.iter().all(|r| r.at_ns >= boundary - 50_000_000));
            assert!(after.iter().all(|r| r.at_ns < boundary + 50_000_000));
        }
        assert!(reqs.windows(2).all(|p| p[0].at_ns < p[1].at_ns));
    }

    #[test]
    fn bursty_cuts_the_last_burst_at_the_duration() {
        let reqs = Workload { duration_ns: 1_020_000_000, ..workload(Arrival::Bursty) }.generate();
        assert!(reqs.iter().all(|r| r.at_ns < 1_020_000_000));
        assert_eq!(reqs.iter().filter(|r| r.at_ns < 1_000_000_000).count(), 50);
        assert_eq!(reqs.len(), 50 + 20); // 50 after the boundary spread over 50 ms: one per ms
    }
}
