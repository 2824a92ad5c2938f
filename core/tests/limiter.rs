//! Several limits on one key, all or nothing; per-request limit sets.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use ratomic::{Error, Limiter, ManualClock, Quota, Rate, Rule, MAX_LIMITS};

fn burst_and_daily() -> (Limiter<[u8], ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let l = Limiter::builder()
        .limit("burst", Rule::token_bucket(Quota::parse("10/s").unwrap()))
        .limit("daily", Rule::fixed_window(Rate::parse("25/d").unwrap()).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    (l, clock)
}

#[test]
fn all_limits_must_allow_and_all_are_charged() {
    let (l, clock) = burst_and_daily();
    let granted = (0..12).filter(|_| l.allow("u").unwrap().allowed()).count();
    assert_eq!(granted, 10, "the burst limit binds first");
    let now = l.peek_n("u", 0).unwrap();
    assert_eq!(now.get("daily").unwrap().remaining, 15, "only granted calls were charged to daily");
    clock.advance(Duration::from_secs(1));
    assert_eq!((0..12).filter(|_| l.allow("u").unwrap().allowed()).count(), 10);
    clock.advance(Duration::from_secs(1));
    assert_eq!((0..12).filter(|_| l.allow("u").unwrap().allowed()).count(), 5, "daily has 5 left");
    // 10 + 10 + 5: daily binds now.
    let d = l.allow("u").unwrap();
    assert!(!d.allowed());
    assert_eq!(d.denied_by().collect::<Vec<_>>(), ["daily"]);
    let burst_now = l.peek_n("u", 0).unwrap().get("burst").unwrap();
    assert_eq!(burst_now.remaining, 5, "burst was given back for every denied call");
}

#[test]
fn combined_decision_follows_the_spec() {
    let (l, _clock) = burst_and_daily();
    let d = l.allow_n("u", 4).unwrap();
    assert!(d.allowed());
    // burst: 6 left, reset 400 ms; daily: 21 left, reset at the end of the day.
    assert_eq!(d.decision.remaining, 6);
    assert_eq!(d.decision.limit, 10, "the limit of the tightest limit");
    assert_eq!(d.decision.reset_after, Duration::from_secs(86_400), "the largest reset");
    assert_eq!(d.decision.retry_after, Duration::ZERO);
    let names: Vec<_> = d.entries().map(|e| (e.name, e.decision.remaining)).collect();
    assert_eq!(names, [("burst", 6), ("daily", 21)]);

    let d = l.allow_n("u", 7).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.decision.retry_after, Duration::from_millis(100), "the largest wait among the denials");
}

#[test]
fn retry_after_is_the_largest_wait_of_the_denying_limits() {
    let clock = ManualClock::new();
    let l = Limiter::builder()
        .limit("a", Rule::parse("1/s").unwrap())
        .limit("b", Rule::parse("1/5s").unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.allow("k").unwrap().allowed());
    let d = l.allow("k").unwrap();
    // Only "a" is charged-and-denied first; "b" is peeked: both deny.
    assert_eq!(d.denied_by().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(d.decision.retry_after, Duration::from_secs(5));
    clock.advance(d.decision.retry_after);
    assert!(l.allow("k").unwrap().allowed());
}

#[test]
fn per_request_limit_sets() {
    let clock = ManualClock::new();
    let l = Limiter::builder()
        .limit("read", Rule::parse("5/s").unwrap())
        .limit("write", Rule::parse("2/s").unwrap())
        .limit("any", Rule::parse("6/s").unwrap())
        .clock(clock)
        .build()
        .unwrap();
    let reads = l.limit_set(&["read", "any"]).unwrap();
    let writes = l.limit_set(&["write", "any"]).unwrap();
    assert_eq!(reads.len(), 2);
    let w = (0..5).filter(|_| l.select(writes).allow("u").unwrap().allowed()).count();
    let r = (0..10).filter(|_| l.select(reads).allow("u").unwrap().allowed()).count();
    assert_eq!((w, r), (2, 4), "writes stop at 2; reads at what 'any' has left");
    let d = l.select(reads).peek("u").unwrap();
    assert_eq!(d.entries().map(|e| e.name).collect::<Vec<_>>(), ["read", "any"]);
    assert!(matches!(l.limit_set(&["delete"]), Err(Error::InvalidArgument { .. })));
    assert!(matches!(l.limit_set(&[]), Err(Error::InvalidArgument { .. })));
}

/// The documented maximum works: a limit set of 16 is a full `u16`
/// (it once made the set check shift a `u16` by 16).
#[test]
fn a_limiter_with_the_most_limits_decides_every_call() {
    let clock = ManualClock::new();
    let build = || {
        (0..MAX_LIMITS)
            .fold(Limiter::builder(), |b, i| b.limit(format!("l{i}"), Rule::parse(&format!("{}/s", i + 2)).unwrap()))
            .clock(clock.clone())
    };
    let bytes = build().build().unwrap();
    let ids = build().keys::<u64>().build().unwrap();
    assert_eq!(bytes.names().len(), MAX_LIMITS);
    for cost in [0, 1, 1] {
        let d = bytes.allow_n("k", cost).unwrap();
        assert!(d.allowed(), "cost {cost}");
        assert_eq!(d.entries().len(), MAX_LIMITS);
    }
    // Both tokens of the tightest limit (2/s) taken: the next call is
    // denied, and the cost check still names the smallest limit.
    assert!(!bytes.allow("k").unwrap().allowed());
    assert_eq!(bytes.allow_n("k", 3).unwrap_err(), Error::CostExceedsLimit { cost: 3, limit: 2 });
    assert!(ids.allow(&7).allowed());
    assert!(ids.peek(&7).allowed());
    let every = bytes.limit_set(&bytes.names().collect::<Vec<_>>()).unwrap();
    assert!(bytes.select(every).allow("fresh").unwrap().allowed());
}

#[test]
fn limiter_bad_input() {
    let err = |b: ratomic::LimiterBuilder| b.build().unwrap_err();
    assert!(matches!(err(Limiter::builder()), Error::InvalidArgument { name: "limits", .. }));
    let dup = Limiter::builder().limit("a", Rule::parse("1/s").unwrap()).limit("a", Rule::parse("2/s").unwrap());
    assert!(err(dup).to_string().contains("\"a\""));
    assert!(matches!(err(Limiter::builder().limit("", Rule::parse("1/s").unwrap())), Error::InvalidArgument { .. }));
    let many = (0..=MAX_LIMITS).fold(Limiter::builder(), |b, i| b.limit(format!("l{i}"), Rule::parse("1/s").unwrap()));
    assert!(matches!(err(many), Error::InvalidArgument { name: "limits", .. }));

    let (l, _) = burst_and_daily();
    let _ = l.allow("u").unwrap();
    assert_eq!(l.allow_n("u", 11).unwrap_err(), Error::CostExceedsLimit { cost: 11, limit: 10 });
    assert!(matches!(l.allow(&[0u8; 2000]), Err(Error::KeyTooLong { .. })));
    let other = Limiter::new([
        ("x", Rule::parse("1/s").unwrap()),
        ("y", Rule::parse("1/s").unwrap()),
        ("z", Rule::parse("1/s").unwrap()),
    ])
    .unwrap();
    let foreign = other.limit_set(&["z"]).unwrap();
    assert!(matches!(l.select(foreign).allow("u"), Err(Error::InvalidArgument { .. })));
    let now = l.peek_n("u", 0).unwrap();
    assert_eq!((now.get("burst").unwrap().remaining, now.get("daily").unwrap().remaining), (9, 24), "no state changed");
}

#[test]
fn concurrent_multi_limit_calls_never_over_grant() {
    for _ in 0..20 {
        let (l, _clock) = burst_and_daily();
        let l = Arc::new(l);
        let barrier = Arc::new(Barrier::new(64));
        let handles: Vec<_> = (0..64)
            .map(|_| {
                let (l, b) = (l.clone(), barrier.clone());
                thread::spawn(move || {
                    b.wait();
                    l.allow("hot").unwrap().allowed()
                })
            })
            .collect();
        let granted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count();
        assert!(granted <= 10);
        assert!(granted >= 1, "someone always gets through");
        // Once everything settled, the limits agree with what was granted.
        let now = l.peek_n("hot", 0).unwrap();
        assert_eq!(now.get("burst").unwrap().remaining, 10 - granted as u64);
        assert_eq!(now.get("daily").unwrap().remaining, 25 - granted as u64);
    }
}

#[test]
fn limiter_forgets_a_key_only_when_all_limits_are_idle() {
    let (l, clock) = burst_and_daily();
    let _ = l.allow("u").unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(l.gc().unwrap(), 0, "the daily count still matters");
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(l.gc().unwrap(), 1);
    assert_eq!(l.len(), 0);
}

#[test]
fn an_idle_key_stays_for_its_longest_window_as_the_store_grows() {
    // Windows of 1 s and 60 s (the time each empty bucket takes to fill).
    let clock = ManualClock::new();
    let l = Limiter::builder()
        .keys::<u64>()
        .limit("second", Rule::token_bucket(Quota::new(1000, 1000.0).unwrap()))
        .limit("minute", Rule::token_bucket(Quota::new(6000, 100.0).unwrap()))
        .clock(clock.clone())
        .build()
        .unwrap();
    for k in 0..10_000u64 {
        assert!(l.allow(&k).allowed());
    }
    // Both buckets of every key are full again after 10 ms; 5 s is past the
    // shorter window, within the longer one.
    clock.advance(Duration::from_secs(5));
    for k in 10_000..40_000u64 {
        assert!(l.allow(&k).allowed());
    }
    assert_eq!(l.len(), 40_000, "the first keys stay through the growth: within 60 s");
    clock.advance(Duration::from_secs(61));
    for k in 40_000..130_000u64 {
        assert!(l.allow(&k).allowed());
    }
    assert_eq!(l.len(), 90_000, "then every key idle for over 60 s is gone at the next growth");
}

#[test]
fn check_and_limit_set_bits_change_nothing() {
    use ratomic::{Limiter, ManualClock, Quota, Rule};
    let limiter = Limiter::builder()
        .limit("a", Rule::token_bucket(Quota::parse("2/s").unwrap()))
        .limit("b", Rule::token_bucket(Quota::parse("5/s").unwrap()))
        .max_key_len(4)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(limiter.check("k", 2).is_ok());
    assert!(limiter.check("k", 3).is_err(), "3 exceeds limit a");
    assert!(limiter.check("too long", 1).is_err());
    assert_eq!(limiter.len(), 0, "checking stores nothing");
    let b = limiter.limit_set(&["b"]).unwrap();
    assert_eq!(limiter.limit_set_from_bits(b.bits()).unwrap(), b);
    assert!(limiter.limit_set_from_bits(0).is_err(), "empty");
    assert!(limiter.limit_set_from_bits(0b100).is_err(), "no limit at position 2");
    assert!(limiter.select(b).allow_n("k", 5).unwrap().allowed(), "b alone allows 5");
}

#[test]
fn entries_carry_their_limit_s_index_and_a_selection_checks_its_own_limits() {
    let clock = ManualClock::new();
    let l = Limiter::builder()
        .limit("small", Rule::parse("2/s").unwrap())
        .limit("big", Rule::parse("10/s").unwrap())
        .clock(clock)
        .build()
        .unwrap();
    let d = l.select(l.limit_set(&["big"]).unwrap()).allow("k").unwrap();
    let e: Vec<_> = d.entries().map(|e| (e.index, e.name)).collect();
    assert_eq!(e, [(1, "big")]);
    let big = l.select(l.limit_set(&["big"]).unwrap());
    assert!(big.check("k", 5).is_ok(), "5 fits the big limit alone");
    assert_eq!(l.check("k", 5), Err(Error::CostExceedsLimit { cost: 5, limit: 2 }));
    assert_eq!(big.limits(), l.limit_set(&["big"]).unwrap());
}

#[test]
fn a_limiter_acquires_on_its_clock_and_in_async_code() {
    let clock = ManualClock::new();
    let l = Limiter::builder()
        .limit("burst", Rule::parse("2/s").unwrap())
        .limit("daily", Rule::fixed_window(Rate::parse("3/d").unwrap()).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let _ = l.allow_n("k", 2).unwrap();
    assert!(l.acquire("k", 1, None).unwrap().allowed());
    assert_eq!(ratomic::Clock::now(&clock), 500_000_000);
    // The daily window is spent: the next wait (the rest of the day) passes the timeout.
    let d = l.acquire("k", 1, Some(Duration::from_secs(60))).unwrap();
    assert!(!d.allowed() && d.denied_by().any(|n| n == "daily"));
    assert!(d.decision.retry_after > Duration::from_secs(60), "the day's end, beyond the timeout");
    // acquire_with awaits any sleep future: here one that moves the manual clock.
    let slept = std::cell::Cell::new(Duration::ZERO);
    let fut = l.acquire_with("other", 2, None, |d| {
        slept.set(slept.get() + d);
        let c = clock.clone();
        async move { c.advance(d) }
    });
    let d = block_on(fut).unwrap();
    assert!(d.allowed());
    assert_eq!(slept.get(), Duration::ZERO, "a fresh key needs no wait");
}

/// Polls a future whose awaits are all ready (the test's sleeps move a
/// manual clock and return), without an async runtime.
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
    fn raw() -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(|_| raw(), |_| {}, |_| {}, |_| {});
    // SAFETY: the vtable's functions do nothing and never touch the data pointer.
    let waker = unsafe { Waker::from_raw(raw()) };
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[test]
fn a_denied_call_reports_what_each_limit_still_has() {
    // burst has 10, daily 25; after 20 calls in 2 s burst has 10 and daily 5.
    let (l, clock) = burst_and_daily();
    for _ in 0..2 {
        assert_eq!((0..10).filter(|_| l.allow("u").unwrap().allowed()).count(), 10);
        clock.advance(Duration::from_secs(1));
    }
    // A cost of 8: burst (10) would allow it, daily (5) denies it.
    for d in [l.peek_n("u", 8).unwrap(), l.allow_n("u", 8).unwrap()] {
        assert!(!d.allowed());
        assert_eq!(d.denied_by().collect::<Vec<_>>(), ["daily"]);
        let burst = d.get("burst").unwrap();
        assert!(burst.allowed, "burst would have allowed the call");
        assert_eq!(burst.remaining, 10, "nothing was charged: burst still has all 10, not 10 - 8");
        assert_eq!(burst.reset_after, Duration::ZERO, "and is full");
        assert_eq!(burst.retry_after, Duration::ZERO);
        assert_eq!(d.get("daily").unwrap().remaining, 5);
        assert_eq!(d.decision.remaining, 5, "the combined remaining is the smallest the key really has");
    }
    assert_eq!(l.peek_n("u", 0).unwrap().get("burst").unwrap().remaining, 10);
}

#[test]
fn a_peek_answers_exactly_what_the_call_then_answers() {
    // Every algorithm in one limiter, and sets of one to all of its limits,
    // so each scratch size a call picks is peeked: before each call, a peek
    // at the same time and cost answers field for field what the call does,
    // allowed or denied, and changes nothing.
    let limiter = Limiter::builder()
        .limit("tb", Rule::token_bucket(Quota::parse("5/s").unwrap()))
        .limit("fw", Rule::fixed_window(Rate::parse("7/2s").unwrap()).unwrap())
        .limit("sw", Rule::sliding_window(Rate::parse("9/3s").unwrap()).unwrap())
        .limit("day", Rule::token_bucket(Quota::parse("40/d").unwrap()))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let sets = [vec!["tb"], vec!["fw", "sw"], vec!["tb", "fw", "sw"], vec!["tb", "fw", "sw", "day"]];
    let (mut now, mut allowed, mut denied) = (0u64, 0, 0);
    for i in 0..400u64 {
        let set = limiter.limit_set(&sets[(i % 4) as usize]).unwrap();
        let selected = limiter.select(set);
        let (key, cost) = (["a", "b"][(i % 3 % 2) as usize], 1 + i % 3);
        let peeked = selected.peek_at(key, cost, now).unwrap();
        assert_eq!(selected.peek_at(key, cost, now).unwrap(), peeked, "a peek changes nothing");
        let called = selected.allow_at(key, cost, now).unwrap();
        assert_eq!(peeked, called, "call {i} at {now} ns");
        if called.allowed() {
            allowed += 1;
        } else {
            denied += 1;
        }
        now += 37_000_000 * (i % 5);
    }
    assert!(allowed > 50 && denied > 50, "both answers were peeked ({allowed} allowed, {denied} denied)");
}
