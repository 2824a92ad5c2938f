use super::*;
use std::time::Duration;

use crate::{FixedWindowCounter, Gcra, Limiter, ManualClock, Quota, Rate, Rule};

fn decision(allowed: bool, remaining: u64, limit: u64, retry_ns: u64, reset_ns: u64) -> Decision {
    Decision {
        allowed,
        remaining,
        limit,
        retry_after: Duration::from_nanos(retry_ns),
        reset_after: Duration::from_nanos(reset_ns),
    }
}

const S: u64 = 1_000_000_000;

#[test]
fn integers_are_written_as_write_does() {
    for v in [0, 7, 10, 99, 100, 4_294_967_296, MAX_SF_INTEGER, u64::MAX] {
        let mut out = String::new();
        push_int(&mut out, v);
        assert_eq!(out, v.to_string());
    }
}

#[test]
fn seconds_round_up_at_every_edge() {
    for (ns, secs) in [(0, 0), (1, 1), (S - 1, 1), (S, 1), (S + 1, 2), (200_000_000, 1), (u64::MAX, 18_446_744_074)] {
        assert_eq!(ceil_secs(Duration::from_nanos(ns)), secs, "{ns} ns");
    }
}

#[test]
fn reset_time_rounds_up_in_the_ratelimit_field() {
    let p = Policy::new("default", 10, Duration::from_secs(1)).unwrap();
    for (ns, t) in [(0, "0"), (1, "1"), (S, "1"), (S + 1, "2")] {
        let h = Headers::single(&p, decision(true, 3, 10, 0, ns));
        assert_eq!(h.ratelimit(), format!(r#""default";r=3;t={t}"#));
        assert_eq!(h.legacy()[2], ("X-RateLimit-Reset", t.to_owned()));
    }
}

#[test]
fn retry_after_rounds_up_and_is_never_zero() {
    let p = Policy::new("default", 10, Duration::from_secs(1)).unwrap();
    // A denial's retry_after is positive by contract; 0 still gives 1.
    for (ns, secs) in [(0, 1), (1, 1), (200_000_000, 1), (S, 1), (S + 1, 2), (90 * S, 90)] {
        let h = Headers::single(&p, decision(false, 0, 10, ns, 5 * S));
        assert_eq!(h.retry_after(), Some(secs), "{ns} ns");
        assert!(h.fields(false).contains(&("Retry-After", secs.to_string())));
    }
    let allowed = Headers::single(&p, decision(true, 9, 10, 0, S));
    assert_eq!(allowed.retry_after(), None);
    assert!(allowed.fields(true).iter().all(|(n, _)| *n != "Retry-After"));
    assert_eq!(allowed.problem_json(), None);
}

#[test]
fn policy_window_rounds_up_to_at_least_one_second() {
    for (window, w) in [
        (Duration::ZERO, 1),
        (Duration::from_nanos(1), 1),
        (Duration::from_secs(1), 1),
        (Duration::from_nanos(S + 1), 2),
    ] {
        assert_eq!(Policy::new("p", 3, window).unwrap().window_secs(), w);
    }
    let p = Policy::new("p", 3, Duration::from_millis(250)).unwrap();
    let h = Headers::single(&p, decision(true, 2, 3, 0, 1));
    assert_eq!(h.policy(), r#""p";q=3;w=1"#);
}

#[test]
fn names_are_structured_field_strings() {
    let p = Policy::new(r#"a "quoted" \ name"#, 5, Duration::from_secs(60)).unwrap();
    let h = Headers::single(&p, decision(true, 4, 5, 0, 12 * S));
    assert_eq!(h.policy(), r#""a \"quoted\" \\ name";q=5;w=60"#);
    assert_eq!(h.ratelimit(), r#""a \"quoted\" \\ name";r=4;t=12"#);
    assert_eq!(p.name(), r#"a "quoted" \ name"#);
}

#[test]
fn names_outside_printable_ascii_are_errors() {
    for bad in ["", "tab\there", "new\nline", "caf\u{e9}", "\u{7f}"] {
        let err = Policy::new(bad, 1, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "policy name", .. }), "{bad:?}: {err}");
    }
    assert!(Policy::new(" ~", 1, Duration::from_secs(1)).is_ok(), "space and tilde are the bounds");
}

#[test]
fn large_values_are_capped_at_the_largest_structured_field_integer() {
    let p = Policy::new("big", u64::MAX, Duration::from_nanos(u64::MAX)).unwrap();
    let h = Headers::single(&p, decision(true, u64::MAX, u64::MAX, 0, u64::MAX));
    assert_eq!(h.policy(), r#""big";q=999999999999999;w=18446744074"#);
    assert_eq!(h.ratelimit(), r#""big";r=999999999999999;t=18446744074"#);
    // The legacy fields are plain integers, not Structured Fields.
    assert_eq!(h.legacy()[0].1, u64::MAX.to_string());
}

#[test]
fn fields_and_lines_in_order() {
    let p = Policy::new("default", 10, Duration::from_secs(1)).unwrap();
    let h = Headers::single(&p, decision(false, 0, 10, 100_000_000, S));
    assert_eq!(
        h.lines(true),
        "RateLimit-Policy: \"default\";q=10;w=1\r\n\
         RateLimit: \"default\";r=0;t=1\r\n\
         Retry-After: 1\r\n\
         X-RateLimit-Limit: 10\r\n\
         X-RateLimit-Remaining: 0\r\n\
         X-RateLimit-Reset: 1\r\n"
    );
    assert_eq!(h.fields(false).len(), 3);
}

#[test]
fn earlier_drafts_list_each_limit_unnamed_and_answer_for_the_combined_decision() {
    let policies = [
        Policy::new("burst", 2, Duration::from_secs(1)).unwrap(),
        Policy::new("daily", 100, Duration::from_secs(86_400)).unwrap(),
    ];
    let h = Headers::from_parts(
        &policies,
        [(0, decision(false, 0, 2, 200_000_000, S)), (1, decision(true, 98, 100, 0, 86_400 * S))],
        decision(false, 0, 2, 200_000_000, S),
    )
    .unwrap();
    assert_eq!(
        h.lines_in(Draft::Draft7, true),
        "RateLimit-Policy: 2;w=1, 100;w=86400\r\n\
         RateLimit: limit=2, remaining=0, reset=1\r\n\
         Retry-After: 1\r\n\
         X-RateLimit-Limit: 2\r\n\
         X-RateLimit-Remaining: 0\r\n\
         X-RateLimit-Reset: 1\r\n"
    );
    assert_eq!(
        h.lines_in(Draft::Draft6, false),
        "RateLimit-Policy: 2;w=1, 100;w=86400\r\n\
         RateLimit-Limit: 2\r\n\
         RateLimit-Remaining: 0\r\n\
         RateLimit-Reset: 1\r\n\
         Retry-After: 1\r\n"
    );
    assert_eq!(h.lines_in(Draft::Draft11, true), h.lines(true));
}

#[test]
fn lines_are_the_fields_in_every_draft() {
    let policies = [
        Policy::new("burst", 2, Duration::from_secs(1)).unwrap(),
        Policy::new("daily", 100, Duration::from_secs(86_400)).unwrap(),
    ];
    for allowed in [true, false] {
        let d = decision(allowed, 1, 2, if allowed { 0 } else { 1 }, S + 1);
        let h = Headers::from_parts(&policies, [(0, d), (1, decision(true, 98, 100, 0, 7 * S))], d).unwrap();
        for draft in [Draft::Draft11, Draft::Draft7, Draft::Draft6] {
            for legacy in [false, true] {
                let joined: String = h.fields_in(draft, legacy).iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
                let mut appended = String::from("before\r\n");
                h.write_lines_in(draft, legacy, &mut appended);
                assert_eq!(h.lines_in(draft, legacy), joined, "{draft:?} legacy={legacy} allowed={allowed}");
                assert_eq!(appended, format!("before\r\n{joined}"));
            }
        }
    }
}

#[test]
fn a_limiter_names_every_limit_and_the_ones_that_denied() {
    let limiter = Limiter::builder()
        .limit("burst", Rule::token_bucket(Quota::parse("2/s").unwrap()))
        .limit("daily", Rule::fixed_window(Rate::parse("100/d").unwrap()).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let policies = Policy::for_limiter(&limiter).unwrap();
    let d = limiter.allow("k").unwrap();
    let h = Headers::multi(&policies, &d).unwrap();
    assert_eq!(h.policy(), r#""burst";q=2;w=1, "daily";q=100;w=86400"#);
    assert_eq!(h.ratelimit(), r#""burst";r=1;t=1, "daily";r=99;t=86400"#);
    let _ = limiter.allow("k").unwrap();
    let d = limiter.allow("k").unwrap();
    let h = Headers::multi(&policies, &d).unwrap();
    assert_eq!(h.retry_after(), Some(1));
    assert_eq!(h.denied_by().collect::<Vec<_>>(), ["burst"]);
    let body = h.problem_json().unwrap();
    assert!(
        body.contains(
            r#""detail":"Quota exceeded for burst; retry after 1 s.","violated-policies":["burst"],"retry-after":1}"#
        ),
        "{body}"
    );

    // A call subject to some limits lists only those.
    let daily = limiter.limit_set(&["daily"]).unwrap();
    let d = limiter.select(daily).allow("k").unwrap();
    let h = Headers::multi(&policies, &d).unwrap();
    assert_eq!(h.policy(), r#""daily";q=100;w=86400"#);
    assert_eq!(h.ratelimit(), r#""daily";r=97;t=86400"#);
}

#[test]
fn problem_body_escapes_names_and_lists_every_denier() {
    let a = Policy::new(r#"x"y"#, 1, Duration::from_secs(1)).unwrap();
    let b = Policy::new(r"back\slash", 1, Duration::from_secs(1)).unwrap();
    let policies = [a, b];
    let h = Headers::from_parts(
        &policies,
        [(0, decision(false, 0, 1, S, S)), (1, decision(false, 0, 1, 2 * S + 1, 3 * S))],
        decision(false, 0, 1, 2 * S + 1, 3 * S),
    )
    .unwrap();
    assert_eq!(
        h.problem_json().unwrap(),
        r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Quota exceeded for x\"y, back\\slash; retry after 3 s.","violated-policies":["x\"y","back\\slash"],"retry-after":3}"#
    );
}

#[test]
fn from_parts_rejects_bad_indexes_and_empty_entries() {
    let p = [Policy::new("p", 1, Duration::from_secs(1)).unwrap()];
    assert!(Headers::from_parts(&p, [(1, decision(true, 0, 1, 0, 0))], decision(true, 0, 1, 0, 0)).is_err());
    assert!(Headers::from_parts(&p, [], decision(true, 0, 1, 0, 0)).is_err());
    assert!(Policy::for_limiter(&Limiter::builder().limit("a", Rule::parse("1/s").unwrap()).build().unwrap()).is_ok());
}

#[test]
fn policies_of_each_algorithm() {
    let tb = Policy::of("tb", &Gcra::new(Quota::new(5, 2.0).unwrap())).unwrap();
    assert_eq!((tb.quota(), tb.window_secs()), (5, 3), "5 tokens at 2/s fill in 2.5 s");
    let fw = Policy::of("fw", &FixedWindowCounter::new(Rate::parse("100/min").unwrap()).unwrap()).unwrap();
    assert_eq!((fw.quota(), fw.window_secs()), (100, 60));
}
