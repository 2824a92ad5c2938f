//! Unit tests of what C cannot easily provoke: a panic inside the boundary.

use std::ffi::CStr;
use std::ptr;

use ratomic_core::{DirectTokenBucket, Keyed, Options, Quota, Rule};

use crate::boundary::run;
use crate::handle::{ratomic_limiter, Engine};
use crate::options::FfiClock;
use crate::*;

/// A token bucket (capacity 3, 1/s) whose clock panics on every reading.
fn limiter_with_panicking_clock() -> *mut ratomic_limiter {
    let rule = Rule::token_bucket(Quota::new(3, 1.0).unwrap());
    let keyed = Keyed::with_algorithm(rule, FfiClock::panicking(), Options::default()).unwrap();
    Box::into_raw(Box::new(ratomic_limiter {
        engine: Engine::One(std::sync::Arc::new(keyed)),
        names: Box::new([c"token_bucket".into()]),
    }))
}

fn last_error() -> String {
    let mut buf = [0 as std::ffi::c_char; 256];
    let mut len = 0usize;
    // SAFETY: `buf` holds 256 bytes; `len` is writable.
    let code = unsafe { ratomic_last_error_message(buf.as_mut_ptr(), buf.len(), &mut len) };
    assert_eq!(code, ratomic_result::RATOMIC_OK);
    // SAFETY: the function NUL-terminates within `buf`.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap().to_owned()
}

#[test]
fn boundary_turns_a_panic_into_a_result() {
    assert_eq!(run(|| panic!("boom")), ratomic_result::RATOMIC_PANIC);
    assert_eq!(last_error(), "internal panic caught at the C boundary: boom");
    let formatted = 42;
    assert_eq!(run(|| panic!("boom {formatted}")), ratomic_result::RATOMIC_PANIC);
    assert_eq!(last_error(), "internal panic caught at the C boundary: boom 42");
    assert_eq!(run(|| std::panic::panic_any(7u8)), ratomic_result::RATOMIC_PANIC);
    assert_eq!(last_error(), "internal panic caught at the C boundary: a non-string payload");
}

#[test]
fn panicking_clock_gives_panic_result_and_writes_nothing() {
    let l = limiter_with_panicking_clock();
    let sentinel = ratomic_decision { allowed: true, remaining: 99, limit: 99, retry_after_ns: 99, reset_after_ns: 99 };
    let mut d = sentinel;
    let key = b"k";
    // Every entry point that reads the clock.
    // SAFETY: `l` is live; `key` is 1 readable byte; `d` is writable.
    unsafe {
        assert_eq!(ratomic_allow(l, key.as_ptr(), 1, 1, &mut d), ratomic_result::RATOMIC_PANIC);
        assert_eq!(ratomic_peek(l, key.as_ptr(), 1, 1, &mut d), ratomic_result::RATOMIC_PANIC);
        assert_eq!(ratomic_refund(l, key.as_ptr(), 1, 1), ratomic_result::RATOMIC_PANIC);
        assert_eq!(ratomic_reset(l, key.as_ptr(), 1), ratomic_result::RATOMIC_PANIC);
        let mut now = 0u64;
        assert_eq!(ratomic_now(l, &mut now), ratomic_result::RATOMIC_PANIC);
        assert_eq!(now, 0);
        assert_eq!(ratomic_gc(l, ptr::null_mut()), ratomic_result::RATOMIC_PANIC);
        assert_eq!(ratomic_acquire(l, key.as_ptr(), 1, 1, RATOMIC_NO_TIMEOUT, &mut d), ratomic_result::RATOMIC_PANIC);
        let req = ratomic_request { key: key.as_ptr(), key_len: 1, cost: 1 };
        assert_eq!(ratomic_allow_many(l, &req, 1, &mut d), ratomic_result::RATOMIC_PANIC);
        let mut entries = [ratomic_limit_decision { name: ptr::null(), decision: sentinel }; 1];
        let mut n = 0usize;
        assert_eq!(
            ratomic_allow_detailed(l, key.as_ptr(), 1, 1, &mut d, entries.as_mut_ptr(), 1, &mut n),
            ratomic_result::RATOMIC_PANIC
        );
        assert!(entries[0].name.is_null() && n == 0);
    }
    assert_eq!(d, sentinel, "out-params are written only on success");
    assert_eq!(last_error(), "internal panic caught at the C boundary: the test clock panics");

    // The limiter survives: the explicit-time forms do not read the clock.
    // SAFETY: as above.
    unsafe {
        assert_eq!(ratomic_allow_at(l, key.as_ptr(), 1, 3, 0, &mut d), ratomic_result::RATOMIC_OK);
        assert!(d.allowed && d.remaining == 0 && d.limit == 3);
        assert_eq!(ratomic_allow_at(l, key.as_ptr(), 1, 1, 0, &mut d), ratomic_result::RATOMIC_OK);
        assert!(!d.allowed && d.retry_after_ns == 1_000_000_000);
        let mut dropped = 99;
        assert_eq!(ratomic_gc_at(l, 10_000_000_000, &mut dropped), ratomic_result::RATOMIC_OK);
        assert_eq!(dropped, 1);
        ratomic_limiter_free(l);
    }
}

#[test]
fn direct_bucket_with_panicking_clock_gives_panic_result_and_writes_nothing() {
    let bucket = DirectTokenBucket::with_clock(Quota::new(3, 1.0).unwrap(), FfiClock::panicking());
    let b = Box::into_raw(Box::new(ratomic_direct { bucket: std::sync::Arc::new(bucket) }));
    let sentinel = ratomic_decision { allowed: true, remaining: 99, limit: 99, retry_after_ns: 99, reset_after_ns: 99 };
    let mut d = sentinel;
    // Every entry point that reads the clock.
    // SAFETY: `b` is live; `d` is writable.
    unsafe {
        assert_eq!(ratomic_direct_allow(b, 1, &mut d), ratomic_result::RATOMIC_PANIC);
        assert_eq!(ratomic_direct_peek(b, 1, &mut d), ratomic_result::RATOMIC_PANIC);
        assert_eq!(ratomic_direct_refund(b, 1), ratomic_result::RATOMIC_PANIC);
        assert_eq!(ratomic_direct_acquire(b, 1, RATOMIC_NO_TIMEOUT, &mut d), ratomic_result::RATOMIC_PANIC);
        let mut now = 0u64;
        assert_eq!(ratomic_direct_now(b, &mut now), ratomic_result::RATOMIC_PANIC);
        assert_eq!(now, 0);
    }
    assert_eq!(d, sentinel, "out-params are written only on success");
    assert_eq!(last_error(), "internal panic caught at the C boundary: the test clock panics");

    // The bucket survives: the explicit-time forms and reset read no clock.
    // SAFETY: as above.
    unsafe {
        assert_eq!(ratomic_direct_allow_at(b, 3, 0, &mut d), ratomic_result::RATOMIC_OK);
        assert!(d.allowed && d.remaining == 0 && d.limit == 3);
        assert_eq!(ratomic_direct_allow_at(b, 1, 0, &mut d), ratomic_result::RATOMIC_OK);
        assert!(!d.allowed && d.retry_after_ns == 1_000_000_000);
        assert_eq!(ratomic_direct_reset(b), ratomic_result::RATOMIC_OK);
        assert_eq!(ratomic_direct_peek_at(b, 0, 0, &mut d), ratomic_result::RATOMIC_OK);
        assert!(d.allowed && d.remaining == 3);
        ratomic_direct_free(b);
    }
}

#[test]
fn every_code_has_its_own_message() {
    use ratomic_result::*;
    let codes = [
        RATOMIC_OK,
        RATOMIC_NULL_ARGUMENT,
        RATOMIC_INVALID_RATE,
        RATOMIC_INVALID_ARGUMENT,
        RATOMIC_COST_EXCEEDS_LIMIT,
        RATOMIC_KEY_TOO_LONG,
        RATOMIC_BUFFER_TOO_SMALL,
        RATOMIC_PANIC,
        RATOMIC_OTHER_ERROR,
        RATOMIC_INVALID_REQUEST,
    ];
    // SAFETY: the function returns static NUL-terminated strings.
    let message = |c: u32| unsafe { CStr::from_ptr(ratomic_result_message(c)) }.to_str().unwrap().to_owned();
    let unknown = message(1_000);
    assert_eq!(unknown, "unknown ratomic_result code");
    let mut seen: Vec<String> = codes.iter().map(|&c| message(c as u32)).collect();
    assert!(seen.iter().all(|m| *m != unknown));
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), codes.len());
    // The numbers are ABI: pin them.
    assert_eq!(codes.map(|c| c as u32), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
}

#[test]
fn kinds_are_what_their_constructors_say() {
    let mut out = ptr::null_mut();
    // SAFETY: valid NUL-terminated rate and out-pointer.
    unsafe {
        assert_eq!(
            ratomic_sliding_window_from_rate(c"5/s".as_ptr(), ptr::null(), &mut out),
            ratomic_result::RATOMIC_OK
        );
        assert!(matches!(&(*out).engine, Engine::One(k) if matches!(k.algorithm(), Rule::SlidingWindow(_))));
        assert_eq!(&*(*out).names, [c"sliding_window".to_owned()]);
        ratomic_limiter_free(out);
    }
}
