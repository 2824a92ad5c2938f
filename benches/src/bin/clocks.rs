//! What a clock reading costs, and how fine it is, for every time source a
//! rate limiter could use: the figures behind ratomic's choice of
//! `MonotonicClock` (`CLOCK_MONOTONIC`, read through the TSC where the kernel
//! does) as its default, and what the opt-in `CoarseClock` and
//! `CachedClock` save.
//!
//! For each source: nanoseconds per read (a tight loop of reads, the result
//! kept alive with `black_box`), the observed resolution (the smallest
//! non-zero step between consecutive readings), and how often a reading was
//! smaller than the one before on this thread.
//!
//! `cargo run --release -p ratomic-benches --bin clocks`

use std::hint::black_box;
use std::time::{Duration, Instant};

use governor::clock::{Clock as GClock, Reference};

const READS: u64 = 20_000_000;
const STEPS: usize = 2_000_000;

struct Row {
    name: &'static str,
    ns_per_read: f64,
    resolution_ns: Option<f64>,
    backwards: usize,
    note: String,
}

/// Cost of one read: the best of three timed loops (the machine is shared).
fn cost<T>(read: impl Fn() -> T) -> f64 {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..READS {
                black_box(read());
            }
            start.elapsed().as_secs_f64() * 1e9 / READS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Smallest positive step between consecutive readings (in the reading's
/// units), and how many readings went backwards.
fn steps(read: impl Fn() -> u64) -> (Option<u64>, usize) {
    let mut last = read();
    let (mut min, mut back) = (None::<u64>, 0);
    for _ in 0..STEPS {
        let t = read();
        if t < last {
            back += 1;
        } else if t > last {
            let d = t - last;
            min = Some(min.map_or(d, |m| m.min(d)));
        }
        last = t;
    }
    (min, back)
}

fn row<T>(name: &'static str, read: impl Fn() -> T, ns: impl Fn() -> u64, note: impl Into<String>) -> Row {
    let ns_per_read = cost(read);
    let (min, backwards) = steps(ns);
    Row { name, ns_per_read, resolution_ns: min.map(|m| m as f64), backwards, note: note.into() }
}

fn clock_gettime(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn clock_getres(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_getres(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// TSC ticks per nanosecond, measured against `Instant` over 200 ms.
#[cfg(target_arch = "x86_64")]
fn tsc_per_ns() -> f64 {
    let (t0, c0) = (Instant::now(), rdtsc());
    std::thread::sleep(Duration::from_millis(200));
    let (t1, c1) = (Instant::now(), rdtsc());
    (c1 - c0) as f64 / (t1 - t0).as_nanos() as f64
}

fn gov_ns<C: GClock>(clock: &C, start: C::Instant) -> u64 {
    Duration::from(clock.now().duration_since(start)).as_nanos() as u64
}

fn main() {
    let epoch = Instant::now();
    let mut rows = Vec::new();

    rows.push(row(
        "std::time::Instant::now()",
        Instant::now,
        || epoch.elapsed().as_nanos() as u64,
        "CLOCK_MONOTONIC through the vDSO",
    ));
    rows.push(row(
        "clock_gettime(CLOCK_MONOTONIC)",
        || clock_gettime(libc::CLOCK_MONOTONIC),
        || clock_gettime(libc::CLOCK_MONOTONIC),
        format!("clock_getres: {} ns", clock_getres(libc::CLOCK_MONOTONIC)),
    ));
    rows.push(row(
        "clock_gettime(CLOCK_MONOTONIC_COARSE)",
        || clock_gettime(libc::CLOCK_MONOTONIC_COARSE),
        || clock_gettime(libc::CLOCK_MONOTONIC_COARSE),
        format!("clock_getres: {} ns", clock_getres(libc::CLOCK_MONOTONIC_COARSE)),
    ));
    #[cfg(target_arch = "x86_64")]
    {
        let per_ns = tsc_per_ns();
        let mut r = row(
            "rdtsc (raw TSC)",
            rdtsc,
            rdtsc,
            format!("{per_ns:.2} ticks/ns; not synchronised across cores everywhere"),
        );
        r.resolution_ns = r.resolution_ns.map(|ticks| ticks / per_ns);
        rows.push(r);
    }
    let q = quanta::Clock::new();
    let q0 = q.now();
    rows.push(row("quanta::Clock::now()", || q.now(), || (q.now() - q0).as_nanos() as u64, "TSC scaled to ns"));
    #[cfg(target_arch = "x86_64")]
    {
        let per_ns = tsc_per_ns();
        let mut r = row("quanta::Clock::raw()", || q.raw(), || q.raw(), "unscaled TSC ticks");
        r.resolution_ns = r.resolution_ns.map(|ticks| ticks / per_ns);
        rows.push(r);
    }

    let m = ratomic::MonotonicClock::new();
    rows.push(row(
        "ratomic MonotonicClock::now()",
        || ratomic::Clock::now(&m),
        || ratomic::Clock::now(&m),
        "Instant since a shared epoch, as u64 ns: ratomic's default",
    ));
    let coarse = ratomic::CoarseClock::new();
    rows.push(row(
        "ratomic CoarseClock::now()",
        || ratomic::Clock::now(&coarse),
        || ratomic::Clock::now(&coarse),
        format!("CLOCK_MONOTONIC_COARSE: opt-in, steps of {:?}", coarse.resolution()),
    ));
    let cached = ratomic::CachedClock::new();
    let refresher = cached.refresh_every(Duration::from_millis(1)).expect("the refresher thread");
    rows.push(row(
        "ratomic CachedClock::now()",
        || ratomic::Clock::now(&cached),
        || ratomic::Clock::now(&cached),
        "opt-in: a load of the reading its thread refreshes every 1 ms",
    ));
    drop(refresher);
    let manual = ratomic::ManualClock::new();
    rows.push(row(
        "ratomic ManualClock::now()",
        || ratomic::Clock::now(&manual),
        || 0,
        "an atomic load; does not move",
    ));

    let gd = governor::clock::DefaultClock::default();
    let gd0 = gd.now();
    rows.push(row("governor DefaultClock (QuantaClock)", || gd.now(), || gov_ns(&gd, gd0), "governor's default"));
    let gm = governor::clock::MonotonicClock;
    let gm0 = gm.now();
    rows.push(row("governor MonotonicClock", || gm.now(), || gov_ns(&gm, gm0), "std Instant"));
    match governor::clock::QuantaUpkeepClock::from_interval(Duration::from_millis(1)) {
        Ok(gu) => {
            let gu0 = gu.now();
            rows.push(row(
                "governor QuantaUpkeepClock (1 ms)",
                || gu.now(),
                || gov_ns(&gu, gu0),
                "reads a value a background thread updates",
            ));
        }
        Err(e) => eprintln!("governor QuantaUpkeepClock unavailable: {e}"),
    }
    let gf = governor::clock::FakeRelativeClock::default();
    rows.push(row("governor FakeRelativeClock", || gf.now(), || 0, "an atomic load; does not move"));

    println!("| clock | ns per read | observed resolution | went backwards (of {STEPS} reads) | note |");
    println!("|---|---:|---:|---:|---|");
    for r in &rows {
        let res = match r.resolution_ns {
            Some(ns) if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
            Some(ns) if ns >= 1e3 => format!("{:.2} µs", ns / 1e3),
            Some(ns) => format!("{ns:.1} ns"),
            None => "does not move".to_string(),
        };
        println!("| {} | {:.2} | {} | {} | {} |", r.name, r.ns_per_read, res, r.backwards, r.note);
    }
}
