//! Every error message names the parameter, the value as the caller gave
//! it and what is accepted: pinned here word for word, as a user reads them.

use std::time::Duration;

use ratomic::{Error, FixedWindow, Limiter, ManualClock, Rate, SlidingWindow, TokenBucket, MAX_TIME};

fn message<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn call_errors() {
    let clock = ManualClock::new();
    let l = TokenBucket::builder("5/min").max_key_len(8).clock(clock.clone()).build().unwrap();
    assert_eq!(message(l.allow_n("k", 6)), "cost 6 exceeds the limit 5: this call could never be allowed");
    assert_eq!(
        message(l.allow("user:123456")),
        "key is 11 bytes long; the limit is 8 bytes (the limiter's max_key_len option)"
    );
    assert_eq!(
        message(l.allow_at("k", 1, MAX_TIME + 1)),
        "invalid now: 4611686018427387904 (a time must be at most 2^62 − 1 ns (about 146 years after the clock's epoch))"
    );
    assert_eq!(
        message(l.allow_many([("a", 1), ("b", 9)])),
        "request 1 of the batch: cost 9 exceeds the limit 5: this call could never be allowed \
         (nothing in the batch was decided)"
    );
}

#[test]
fn option_errors_come_out_of_build() {
    assert_eq!(message(TokenBucket::builder("5/min").max_keys(0).build()), "invalid max_keys: 0 (must be at least 1)");
    assert_eq!(
        message(TokenBucket::builder("5/min").max_key_len(0).build()),
        "invalid max_key_len: 0 (must be between 1 and 2^32 − 1)"
    );
    assert_eq!(
        message(FixedWindow::builder("5/min").shards(3).build()),
        "invalid shards: 3 (must be a power of two, at most 65536)"
    );
}

#[test]
fn window_limits_name_the_window_and_the_maximum() {
    let too_many = 10_000_000;
    let e = message(SlidingWindow::builder(Rate::new(too_many, Duration::from_secs(1)).unwrap()).build());
    assert!(e.starts_with("invalid limit: 10000000 (is too large for a sliding window of 1s: at most "), "{e}");
    assert!(e.ends_with("use a longer window, a fixed window or a token bucket)"), "{e}");
}

#[test]
fn limiter_errors_name_the_limit() {
    assert_eq!(message(Limiter::builder().build()), "invalid limits: [] (a Limiter needs at least one limit)");
    let dup = Limiter::builder()
        .limit("a", ratomic::Rule::parse("1/s").unwrap())
        .limit("a", ratomic::Rule::parse("2/s").unwrap());
    assert_eq!(message(dup.build()), "invalid limit name: \"a\" (is used twice)");
    let l = Limiter::parse("10/s;100/min").unwrap();
    assert_eq!(message(l.limit_set(&["10/h"])), "invalid limit name: \"10/h\" (is not one of this limiter's limits)");
}
