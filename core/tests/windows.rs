//! Fixed and sliding windows through the keyed API, on a manual clock.

use std::time::Duration;

use ratomic::{
    Algorithm, Clock, Error, FixedWindow, FixedWindowCounter, Keyed, ManualClock, Options, Rate, SlidingWindow,
    SlidingWindowCounter,
};

const S: u64 = 1_000_000_000;

fn fixed(rate: &str) -> (FixedWindow<[u8], ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (FixedWindow::builder(Rate::parse(rate).unwrap()).clock(clock.clone()).build().unwrap(), clock)
}

fn sliding(rate: &str) -> (SlidingWindow<[u8], ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (SlidingWindow::builder(Rate::parse(rate).unwrap()).clock(clock.clone()).build().unwrap(), clock)
}

#[test]
fn fixed_window_allows_limit_per_window_and_resets_at_the_boundary() {
    let (l, clock) = fixed("5/10s");
    clock.set_nanos(3 * S);
    for i in 0..5 {
        let d = l.allow("k").unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 4 - i);
        assert_eq!(d.reset_after, Duration::from_secs(7));
    }
    let d = l.allow("k").unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_secs(7));
    clock.set_nanos(10 * S - 1);
    assert!(!l.allow("k").unwrap().allowed);
    assert_eq!(l.allow("k").unwrap().retry_after, Duration::from_nanos(1));
    clock.set_nanos(10 * S);
    assert_eq!(l.allow_n("k", 5).unwrap().remaining, 0, "a whole new window");
}

#[test]
fn fixed_window_double_burst_at_the_boundary() {
    // The weakness users must see to choose: 2×limit within a moment.
    let (l, clock) = fixed("10/s");
    clock.set_nanos(S - 1_000_000); // 1 ms before the boundary
    let before = (0..10).filter(|_| l.allow("k").unwrap().allowed).count();
    clock.advance(Duration::from_millis(2));
    let after = (0..10).filter(|_| l.allow("k").unwrap().allowed).count();
    assert_eq!(before + after, 20);
    // The sliding window does not allow it.
    let (s, clock) = sliding("10/s");
    clock.set_nanos(S - 1_000_000);
    let before = (0..10).filter(|_| s.allow("k").unwrap().allowed).count();
    clock.advance(Duration::from_millis(2));
    let after = (0..10).filter(|_| s.allow("k").unwrap().allowed).count();
    assert_eq!((before, after), (10, 0));
}

#[test]
fn sliding_window_weights_the_previous_window() {
    let (l, clock) = sliding("10/s");
    clock.set_nanos(S / 2);
    assert!(l.allow_n("k", 10).unwrap().allowed);
    // At 1.25 s the previous window (10) weighs 0.75: 7.5 → room for 2.
    clock.set_nanos(S + S / 4);
    let d = l.peek_n("k", 0).unwrap();
    assert_eq!(d.remaining, 2);
    assert!(l.allow_n("k", 2).unwrap().allowed);
    let d = l.allow("k").unwrap();
    assert!(!d.allowed);
    // 10·(1 − x) + 2 + 1 ≤ 10 → x ≥ 0.3 s: wait 50 ms.
    assert_eq!(d.retry_after, Duration::from_millis(50));
    clock.advance(d.retry_after);
    assert!(l.allow("k").unwrap().allowed);
}

#[test]
fn windows_peek_refund_reset_len_gc() {
    let (l, clock) = sliding("4/s");
    assert!(l.allow_n("a", 3).unwrap().allowed);
    assert_eq!(l.peek("a").unwrap().remaining, 0);
    assert_eq!(l.peek_n("a", 0).unwrap().remaining, 1);
    l.refund("a", 2).unwrap();
    assert_eq!(l.peek_n("a", 0).unwrap().remaining, 3);
    l.reset("a").unwrap();
    assert_eq!(l.peek_n("a", 0).unwrap().remaining, 4);
    assert_eq!(l.len(), 0);
    let _ = l.allow("b").unwrap();
    clock.advance(Duration::from_millis(1999));
    assert_eq!(l.gc().unwrap(), 0, "b still counts in the sliding window");
    clock.advance(Duration::from_millis(1));
    assert_eq!(l.gc().unwrap(), 1);

    let (f, clock) = fixed("4/s");
    let _ = f.allow("b").unwrap();
    clock.advance(Duration::from_millis(999));
    assert_eq!(f.gc().unwrap(), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(f.gc().unwrap(), 1);
}

fn gc_changes_no_decision<A: Algorithm + Copy>(alg: A, kind: &str) {
    let clock = ManualClock::new();
    let kept = Keyed::<A, [u8], _>::with_algorithm(alg, clock.clone(), Options::default()).unwrap();
    let forgetful = Keyed::<A, [u8], _>::with_algorithm(alg, clock.clone(), Options::default().shards(1)).unwrap();
    let mut seed = 3u64;
    let mut dropped = 0;
    for step in 0..30_000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        clock.advance_nanos(seed % 2_000_000);
        let key = format!("k{}", seed % 300);
        let cost = (seed >> 20) % 3;
        assert_eq!(
            kept.allow_n(&key, cost).unwrap(),
            forgetful.allow_n(&key, cost).unwrap(),
            "{kind} step {step} at {}",
            clock.now()
        );
        if step % 500 == 0 {
            dropped += forgetful.gc().unwrap();
        }
    }
    assert!(dropped > 500, "{kind}: dropped {dropped}");
}

#[test]
fn dropping_idle_window_keys_changes_no_decision() {
    let rate = Rate::parse("5/100ms").unwrap();
    gc_changes_no_decision(FixedWindowCounter::new(rate).unwrap(), "fixed");
    gc_changes_no_decision(SlidingWindowCounter::new(rate).unwrap(), "sliding");
}

#[test]
fn window_bad_input() {
    assert!(matches!(FixedWindow::new(0, Duration::from_secs(1)), Err(Error::InvalidArgument { name: "count", .. })));
    assert!(matches!(FixedWindow::new(5, Duration::ZERO), Err(Error::InvalidArgument { name: "period", .. })));
    assert!(matches!(
        SlidingWindow::new(10_000_000, Duration::from_secs(1)),
        Err(Error::InvalidArgument { name: "limit", .. })
    ));
    let (l, _) = fixed("3/s");
    let _ = l.allow("k").unwrap();
    assert_eq!(l.allow_n("k", 4), Err(Error::CostExceedsLimit { cost: 4, limit: 3 }));
    assert_eq!(l.allow(&[0u8; 1025]), Err(Error::KeyTooLong { len: 1025, max: 1024 }));
    assert_eq!(l.peek_n("k", 0).unwrap().remaining, 2, "errors change nothing");
}

#[test]
fn every_builder_takes_a_rate_string_and_fails_only_in_build() {
    // The same rate string means the same thing to every builder.
    let fw = FixedWindow::builder("5/min").build().unwrap();
    let sw = SlidingWindow::builder("5/min").build().unwrap();
    let tb = ratomic::TokenBucket::builder("5/min").build().unwrap();
    assert_eq!((fw.limit(), fw.window()), (5, Duration::from_secs(60)));
    assert_eq!((sw.limit(), sw.window()), (5, Duration::from_secs(60)));
    assert_eq!((tb.limit(), tb.quota().burst_window()), (5, Duration::from_secs(60)));
    // A bad rate comes out of build(), as the options' errors do.
    let bad = FixedWindow::builder("5/fortnight").max_keys(10).build().unwrap_err();
    assert!(matches!(&bad, Error::InvalidRate { input, .. } if input == "5/fortnight"), "{bad:?}");
    let too_many = SlidingWindow::builder(Rate::new(10_000_000, Duration::from_secs(1)).unwrap()).build().unwrap_err();
    assert!(matches!(too_many, Error::InvalidArgument { name: "limit", .. }), "{too_many:?}");
    let bad = ratomic::TokenBucket::builder("0/s").build().unwrap_err();
    assert!(matches!(&bad, Error::InvalidRate { input, .. } if input == "0/s"), "{bad:?}");
}
