//! The token bucket's observable behaviour: the five stage-1 course
//! behaviours, and the rest of the API, all on injected clocks.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use ratomic::{Clock, DirectTokenBucket, Error, ManualClock, Options, Quota, TokenBucket};

fn bucket(capacity: u64, refill_per_sec: f64) -> (TokenBucket<[u8], ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter =
        TokenBucket::builder(Quota::new(capacity, refill_per_sec).unwrap()).clock(clock.clone()).build().unwrap();
    (limiter, clock)
}

#[test]
fn full_bucket_allows_capacity() {
    let (limiter, _clock) = bucket(10, 1.0);
    for i in 0..10 {
        let d = limiter.allow("k").unwrap();
        assert!(d.allowed, "call {i}");
        assert_eq!(d.remaining, 9 - i);
    }
    let eleventh = limiter.allow("k").unwrap();
    assert!(!eleventh.allowed);
    assert!(eleventh.retry_after > Duration::ZERO);
}

#[test]
fn denial_carries_retry_after() {
    let (limiter, clock) = bucket(3, 2.0);
    for _ in 0..3 {
        assert!(limiter.allow("k").unwrap().allowed);
    }
    // Every denial, at any point of the refill, carries a positive wait that
    // is exactly enough.
    for step in 0..50 {
        let d = limiter.allow("k").unwrap();
        if d.allowed {
            continue;
        }
        assert!(d.retry_after > Duration::ZERO, "step {step}");
        assert!(d.retry_after <= Duration::from_millis(500));
        let probe = clock.clone();
        let back = probe.now();
        probe.advance(d.retry_after - Duration::from_nanos(1));
        assert!(!limiter.peek("k").unwrap().allowed, "waiting 1 ns less must not be enough");
        probe.set_nanos(back);
        clock.advance(Duration::from_millis(37));
    }
}

#[test]
fn refill_restores_tokens() {
    // Rates whose interval is a whole number of ns, and rates whose interval
    // is not (3/s and 7/s).
    for (rate, label) in [(1.0, "1/s"), (10.0, "10/s"), (3.0, "3/s"), (7.0, "7/s"), (0.5, "1 per 2 s")] {
        let (limiter, clock) = bucket(5, rate);
        while limiter.allow("k").unwrap().allowed {}
        // Exactly 1/rate, as a test would write it.
        clock.advance(Duration::from_secs_f64(1.0 / rate));
        assert!(limiter.allow("k").unwrap().allowed, "{label}: one token back after 1/rate");
        assert!(!limiter.allow("k").unwrap().allowed, "{label}: and only one");
    }
}

#[test]
fn refill_loses_no_fraction() {
    // 10/s polled every 50 ms: half a token each time, which an integer
    // bucket would truncate to nothing.
    let (limiter, clock) = bucket(1, 10.0);
    assert!(limiter.allow("k").unwrap().allowed);
    let mut granted = 0;
    for _ in 0..200 {
        clock.advance(Duration::from_millis(50));
        granted += u32::from(limiter.allow("k").unwrap().allowed);
    }
    assert_eq!(granted, 100); // 10 s at 10/s
}

#[test]
fn per_key_isolated() {
    let (limiter, _clock) = bucket(2, 1.0);
    assert!(limiter.allow("a").unwrap().allowed);
    assert!(limiter.allow("a").unwrap().allowed);
    assert!(!limiter.allow("a").unwrap().allowed);
    let b = limiter.allow("b").unwrap();
    assert!(b.allowed);
    assert_eq!(b.remaining, 1);
    // Keys are bytes: these differ only in their last byte or in length.
    assert!(limiter.allow(b"a\0".as_slice()).unwrap().allowed);
    assert!(limiter.allow(&[0xFFu8; 100]).unwrap().allowed);
    assert!(limiter.allow(&[0xFFu8; 101]).unwrap().allowed);
    assert_eq!(limiter.len(), 5);
}

#[test]
fn concurrent_allow_grants_at_most_capacity() {
    for _round in 0..20 {
        let (limiter, _clock) = bucket(50, 1.0);
        let limiter = Arc::new(limiter);
        let barrier = Arc::new(Barrier::new(100));
        let handles: Vec<_> = (0..100)
            .map(|_| {
                let (limiter, barrier) = (limiter.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    limiter.allow("hot").unwrap().allowed
                })
            })
            .collect();
        let granted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count();
        assert_eq!(granted, 50);
    }
}

#[test]
fn allow_n_peek_refund_reset() {
    let (limiter, clock) = bucket(10, 1.0);
    let d = limiter.allow_n("k", 4).unwrap();
    assert_eq!((d.allowed, d.remaining, d.limit), (true, 6, 10));
    assert_eq!(d.reset_after, Duration::from_secs(4));

    let p = limiter.peek_n("k", 7).unwrap();
    assert_eq!((p.allowed, p.remaining), (false, 6));
    assert_eq!(p.retry_after, Duration::from_secs(1));
    assert_eq!(limiter.peek_n("k", 0).unwrap().remaining, 6, "peek changes nothing");

    // Cost 0 answers like peek.
    assert_eq!(limiter.allow_n("k", 0).unwrap(), limiter.peek_n("k", 0).unwrap());
    assert_eq!(limiter.peek_n("k", 0).unwrap().remaining, 6);

    limiter.refund("k", 3).unwrap();
    assert_eq!(limiter.peek_n("k", 0).unwrap().remaining, 9);
    limiter.refund("k", 1000).unwrap();
    assert_eq!(limiter.peek_n("k", 0).unwrap().remaining, 10, "never above full");

    let _ = limiter.allow_n("k", 10).unwrap();
    assert!(!limiter.allow("k").unwrap().allowed);
    limiter.reset("k").unwrap();
    assert_eq!(limiter.peek_n("k", 0).unwrap().remaining, 10);
    assert_eq!(limiter.len(), 0, "a reset key is forgotten");

    clock.advance(Duration::from_secs(1));
    assert!(limiter.allow_n("k", 10).unwrap().allowed);
}

#[test]
fn remaining_and_reset_after_follow_the_spec() {
    let (limiter, clock) = bucket(4, 4.0); // T = 250 ms
    let _ = limiter.allow_n("k", 4).unwrap();
    clock.advance(Duration::from_millis(300)); // 1.2 tokens back
    let d = limiter.peek_n("k", 0).unwrap(); // the state now
    assert_eq!((d.allowed, d.remaining), (true, 1));
    assert_eq!(d.reset_after, Duration::from_millis(700));
    let d = limiter.peek("k").unwrap(); // what taking one token would leave
    assert_eq!((d.allowed, d.remaining), (true, 0));
    assert_eq!(d.reset_after, Duration::from_millis(950));
    let d = limiter.allow_n("k", 2).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_millis(200));
}

#[test]
fn bad_input_is_an_error_and_changes_nothing() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder(Quota::new(5, 1.0).unwrap()).clock(clock).max_key_len(8).build().unwrap();
    let _ = limiter.allow_n("k", 2).unwrap();

    assert_eq!(limiter.allow_n("k", 6), Err(Error::CostExceedsLimit { cost: 6, limit: 5 }));
    assert_eq!(limiter.peek_n("k", 6), Err(Error::CostExceedsLimit { cost: 6, limit: 5 }));
    assert_eq!(limiter.allow("123456789"), Err(Error::KeyTooLong { len: 9, max: 8 }));
    assert_eq!(limiter.refund("123456789", 1), Err(Error::KeyTooLong { len: 9, max: 8 }));
    assert_eq!(limiter.reset("123456789"), Err(Error::KeyTooLong { len: 9, max: 8 }));
    assert_eq!(limiter.peek_n("k", 0).unwrap().remaining, 3);
    assert_eq!(limiter.len(), 1);

    for options in [Options::default().max_keys(0), Options::default().max_key_len(0), Options::default().shards(3)] {
        let err = TokenBucket::builder(Quota::per_second(1).unwrap()).options(options).build().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    }
    let msg = Error::CostExceedsLimit { cost: 6, limit: 5 }.to_string();
    assert!(msg.contains('6') && msg.contains('5'));
}

#[test]
fn u64_keys() {
    let limiter =
        TokenBucket::builder(Quota::per_second(1).unwrap()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
    assert!(limiter.allow(&7).allowed);
    assert!(!limiter.allow(&7).allowed);
    assert!(limiter.allow(&8).allowed);
    assert_eq!(limiter.len(), 2);
}

#[test]
fn allow_many_decides_each_pair_in_order() {
    let (limiter, _clock) = bucket(2, 1.0);
    let out = limiter.allow_many([(b"a".as_slice(), 1), (b"a", 1), (b"a", 1), (b"b", 2)]).unwrap();
    let allowed: Vec<_> = out.iter().map(|d| d.allowed).collect();
    assert_eq!(allowed, [true, true, false, true]);
}

#[test]
fn a_batch_with_an_invalid_request_fails_whole_and_changes_nothing() {
    // Every request is checked before any is decided.
    let (limiter, _clock) = bucket(2, 1.0);
    let long = [b'x'; 2000];
    let err = limiter.allow_many([(b"a".as_slice(), 1), (b"b", 3), (&long, 1)]).unwrap_err();
    assert_eq!(err, Error::InvalidRequest { index: 1, error: Box::new(Error::CostExceedsLimit { cost: 3, limit: 2 }) });
    assert_eq!(err.cause(), &Error::CostExceedsLimit { cost: 3, limit: 2 });
    assert!(err.to_string().starts_with("request 1 of the batch: cost 3 exceeds"), "{err}");
    let err = limiter.allow_many([(b"a".as_slice(), 1), (&long, 1)]).unwrap_err();
    assert!(
        matches!(err, Error::InvalidRequest { index: 1, ref error } if matches!(**error, Error::KeyTooLong { .. }))
    );
    assert_eq!(limiter.peek_n("a", 0).unwrap().remaining, 2, "request 0 was not charged");
    assert!(limiter.is_empty());
}

#[test]
fn a_time_beyond_the_last_valid_one_is_an_error_and_changes_nothing() {
    use ratomic::MAX_TIME;
    let (limiter, clock) = bucket(2, 1.0);
    assert!(limiter.allow_at("k", 1, MAX_TIME).unwrap().allowed);
    let e = limiter.allow_at("k", 1, MAX_TIME + 1).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "now", .. }), "{e}");
    clock.set_nanos(u64::MAX); // a clock that reads nonsense is never clamped
    assert!(limiter.allow("other").is_err());
    assert!(limiter.peek("other").is_err());
    assert!(limiter.gc().is_err());
    assert_eq!(limiter.len(), 1, "nothing was stored");
}

#[test]
fn clock_stepping_back_never_grants_more() {
    let (limiter, clock) = bucket(2, 1.0);
    clock.set_nanos(10_000_000_000);
    let _ = limiter.allow_n("k", 2).unwrap();
    clock.set_nanos(5_000_000_000); // five seconds back
    let d = limiter.allow("k").unwrap();
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    assert_eq!(d.retry_after, Duration::from_secs(6));
}

#[test]
fn direct_bucket() {
    let clock = ManualClock::new();
    let b = DirectTokenBucket::with_clock(Quota::new(2, 1.0).unwrap(), clock.clone());
    assert!(b.allow().allowed);
    assert!(b.allow().allowed);
    let d = b.allow();
    assert_eq!((d.allowed, d.retry_after), (false, Duration::from_secs(1)));
    assert_eq!(b.allow_n(3), Err(Error::CostExceedsLimit { cost: 3, limit: 2 }));
    b.refund(1).unwrap();
    assert!(b.peek().allowed);
    b.reset();
    assert_eq!(b.peek_at(0, b.now()).unwrap().remaining, 2);
    assert_eq!(b.peek().remaining, 1, "peek answers what allow would: one token taken");
    clock.advance(Duration::from_secs(5));
    assert_eq!(b.allow_n(2).unwrap().remaining, 0);
}

#[test]
fn check_validates_without_storing() {
    use ratomic::{ManualClock, Quota, TokenBucket};
    let limiter =
        TokenBucket::builder(Quota::parse("3/s").unwrap()).max_key_len(4).clock(ManualClock::new()).build().unwrap();
    assert!(limiter.check("k", 3).is_ok());
    assert!(matches!(limiter.check("k", 4), Err(ratomic::Error::CostExceedsLimit { cost: 4, limit: 3 })));
    assert!(matches!(limiter.check("12345", 1), Err(ratomic::Error::KeyTooLong { len: 5, max: 4 })));
    assert_eq!(limiter.len(), 0);
}
