//! Stacks of limiters on different keys, all or nothing.

use std::sync::{Arc, Barrier};
use std::thread;

use ratomic::{DirectTokenBucket, Error, FixedWindow, Limiter, ManualClock, Quota, Rate, Rule, Stack, TokenBucket};

struct Fixture {
    ip: Arc<TokenBucket<[u8], ManualClock>>,
    user: Arc<Limiter<[u8], ManualClock>>,
    global: Arc<DirectTokenBucket<ManualClock>>,
    stack: Stack<ManualClock>,
}

fn fixture() -> Fixture {
    let clock = ManualClock::new();
    let ip = Arc::new(TokenBucket::builder(Quota::parse("5/s").unwrap()).clock(clock.clone()).build().unwrap());
    let user = Arc::new(
        Limiter::builder()
            .limit("burst", Rule::parse("3/s").unwrap())
            .limit("daily", Rule::fixed_window(Rate::parse("100/d").unwrap()).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("8/s").unwrap(), clock.clone()));
    let stack = Stack::builder()
        .member("ip", ip.clone())
        .member("user", user.clone())
        .member("global", global.clone())
        .clock(clock)
        .build()
        .unwrap();
    Fixture { ip, user, global, stack }
}

#[test]
fn a_stack_charges_every_member_or_none_and_names_who_denied() {
    let f = fixture();
    for _ in 0..3 {
        assert!(f.stack.allow(&["1.1.1.1", "alice", ""]).unwrap().allowed());
    }
    let d = f.stack.allow(&["1.1.1.1", "alice", ""]).unwrap();
    assert_eq!(d.denied_by().collect::<Vec<_>>(), ["user"]);
    assert_eq!(f.ip.peek_n("1.1.1.1", 0).unwrap().remaining, 2, "ip given back");
    assert_eq!(f.global.peek_at(0, 0).unwrap().remaining, 5, "global never charged");
    // Another user on the same IP: the IP has 2 left.
    let granted = (0..5).filter(|_| f.stack.allow(&["1.1.1.1", "bob", ""]).unwrap().allowed()).count();
    assert_eq!(granted, 2);
    assert_eq!(f.stack.peek(&["1.1.1.1", "bob", ""]).unwrap().denied_by().collect::<Vec<_>>(), ["ip"]);
    // And the global limit: 8 in all, across IPs and users.
    let more = (0..10)
        .filter(|i| f.stack.allow(&[format!("ip{i}"), format!("u{i}"), String::new()]).unwrap().allowed())
        .count();
    assert_eq!(more, 3);
    assert_eq!(f.user.peek_n("u9", 0).unwrap().get("daily").unwrap().remaining, 100, "u9 was never charged");
}

#[test]
fn stack_errors_change_nothing() {
    let f = fixture();
    assert!(matches!(f.stack.allow(&["1.1.1.1", "alice"]), Err(Error::InvalidArgument { name: "keys", .. })));
    assert!(matches!(f.stack.allow(&["1.1.1.1", &"x".repeat(2000), ""]), Err(Error::KeyTooLong { .. })));
    assert!(matches!(
        f.stack.allow_n(&["1.1.1.1", "alice", ""], 4),
        Err(Error::CostExceedsLimit { cost: 4, limit: 3 })
    ));
    assert_eq!(f.ip.peek_n("1.1.1.1", 0).unwrap().remaining, 5);
    assert_eq!(f.global.peek_at(0, 0).unwrap().remaining, 8);

    let empty = Stack::builder().build();
    assert!(matches!(empty, Err(Error::InvalidArgument { name: "members", .. })));
    let w = Arc::new(FixedWindow::new(1, std::time::Duration::from_secs(1)).unwrap());
    let dup = Stack::builder().member("a", w.clone()).member("a", w).build();
    assert!(matches!(dup, Err(Error::InvalidArgument { .. })));
}

#[test]
fn concurrent_stack_calls_never_over_grant_any_member() {
    for _ in 0..20 {
        let f = Arc::new(fixture());
        let barrier = Arc::new(Barrier::new(32));
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let (f, b) = (f.clone(), barrier.clone());
                thread::spawn(move || {
                    b.wait();
                    let user = if i % 2 == 0 { "alice" } else { "bob" };
                    f.stack.allow(&["1.1.1.1", user, ""]).unwrap().allowed()
                })
            })
            .collect();
        let granted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count() as u64;
        assert!(granted <= 5, "the IP allows 5");
        assert!(granted >= 1);
        // Every grant charged every member. A denied call takes back what it
        // charged only where nothing moved the word since (never more), so a
        // member may keep a denied call's charge: at most one per denial.
        let denied = 32 - granted;
        let ip_used = 5 - f.ip.peek_n("1.1.1.1", 0).unwrap().remaining;
        let global_used = 8 - f.global.peek_at(0, 0).unwrap().remaining;
        let users: u64 = ["alice", "bob"].iter().map(|u| 3 - f.user.peek_n(*u, 0).unwrap().decision.remaining).sum();
        for (name, used) in [("ip", ip_used), ("global", global_used), ("users", users)] {
            assert!(used >= granted, "{name}: {used} used for {granted} grants");
            assert!(used <= granted + denied, "{name}: {used} used for {granted} grants and {denied} denials");
        }
    }
}

#[test]
fn a_stack_refuses_members_on_another_clock() {
    let clock = ManualClock::new();
    let on_clock = Arc::new(TokenBucket::builder(Quota::parse("5/s").unwrap()).clock(clock.clone()).build().unwrap());
    let other = Arc::new(TokenBucket::builder(Quota::parse("5/s").unwrap()).clock(ManualClock::new()).build().unwrap());
    let monotonic = Arc::new(TokenBucket::new(Quota::parse("5/s").unwrap()));
    // The stack's own clock is monotonic unless given: a manual-clock member is refused.
    let e = Stack::builder().member("a", on_clock.clone()).build().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "member", .. }), "{e}");
    assert!(e.to_string().contains("\"a\""), "{e}");
    let e = Stack::builder().member("a", on_clock.clone()).member("b", other).clock(clock.clone()).build();
    assert!(e.is_err(), "a clock that is not a clone of the stack's is another timeline");
    assert!(Stack::builder().member("a", on_clock).clock(clock.clone()).build().is_ok());
    assert!(Stack::builder().member("m", monotonic.clone()).build().is_ok(), "every MonotonicClock agrees");
    assert!(Stack::builder().member("m", monotonic).clock(clock).build().is_err());
}

#[test]
fn a_stack_refunds_resets_and_acquires_on_every_member() {
    let f = fixture();
    let keys = ["1.1.1.1", "alice", ""];
    for _ in 0..3 {
        assert!(f.stack.allow(&keys).unwrap().allowed());
    }
    assert!(!f.stack.allow(&keys).unwrap().allowed());
    f.stack.refund(&keys, 1).unwrap();
    assert_eq!(f.ip.peek_n(keys[0], 0).unwrap().remaining, 3);
    assert_eq!(f.user.peek_n(keys[1], 0).unwrap().get("daily").unwrap().remaining, 98);
    assert_eq!(f.global.peek_at(0, 0).unwrap().remaining, 6);
    f.stack.reset(&keys).unwrap();
    assert_eq!(f.ip.peek_n(keys[0], 0).unwrap().remaining, 5);
    assert_eq!(f.user.peek_n(keys[1], 0).unwrap().get("daily").unwrap().remaining, 100);
    assert_eq!(f.global.peek_at(0, 0).unwrap().remaining, 8);
    // Errors change nothing, on every member.
    assert!(f.stack.refund(&keys[..2], 1).is_err());
    // acquire waits on the stack's (manual) clock: the user's burst refills
    // one token every 333 ms.
    for _ in 0..3 {
        assert!(f.stack.allow(&keys).unwrap().allowed());
    }
    let before = f.stack.now();
    let d = f.stack.acquire(&keys, 1, None).unwrap();
    assert!(d.allowed());
    assert_eq!(f.stack.now() - before, 333_333_333, "waited exactly one token of the user's burst");
    let d = f.stack.acquire(&keys, 1, Some(std::time::Duration::from_millis(10))).unwrap();
    assert!(!d.allowed(), "with a timeout shorter than the wait, the denial comes back at once");
}

#[test]
fn a_denied_stack_call_reports_what_each_member_still_has() {
    let f = fixture();
    // user's burst (3/s) allows 3; the ip (5/s) and global (8/s) have room.
    for _ in 0..3 {
        assert!(f.stack.allow(&["10.0.0.1", "alice", ""]).unwrap().allowed());
    }
    for d in [f.stack.peek(&["10.0.0.1", "alice", ""]).unwrap(), f.stack.allow(&["10.0.0.1", "alice", ""]).unwrap()] {
        assert!(!d.allowed());
        assert_eq!(d.denied_by().collect::<Vec<_>>(), ["user"]);
        let ip = d.get("ip").unwrap();
        assert!(ip.allowed);
        assert_eq!(ip.remaining, 2, "nothing was charged: the ip still has 2, not 1");
        assert_eq!(d.get("global").unwrap().remaining, 5);
        assert_eq!(d.decision.remaining, 0, "user has none left");
    }
    assert_eq!(f.ip.peek_n("10.0.0.1", 0).unwrap().remaining, 2);
}

#[test]
fn stack_headers_list_every_member_and_name_who_denied() {
    use ratomic::headers::Headers;
    let clock = ManualClock::new();
    let ip = Arc::new(TokenBucket::builder(Quota::parse("2/s").unwrap()).clock(clock.clone()).build().unwrap());
    let window = Rate::parse("100/min").unwrap();
    let user = Arc::new(FixedWindow::builder(window).clock(clock.clone()).build().unwrap());
    let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("1000/s").unwrap(), clock.clone()));
    let stack =
        Stack::builder().member("ip", ip).member("user", user).member("global", global).clock(clock).build().unwrap();
    let policies = stack.policies().unwrap();
    let keys = ["10.0.0.1", "alice", ""];
    let h = Headers::multi(&policies, &stack.allow(&keys).unwrap()).unwrap();
    assert_eq!(h.policy(), r#""ip";q=2;w=1, "user";q=100;w=60, "global";q=1000;w=1"#);
    assert_eq!(h.ratelimit(), r#""ip";r=1;t=1, "user";r=99;t=60, "global";r=999;t=1"#);
    assert!(stack.allow(&keys).unwrap().allowed());
    let d = stack.allow(&keys).unwrap();
    let h = Headers::multi(&policies, &d).unwrap();
    // Nothing charged on the denial: user still at 98, global at 998.
    assert_eq!(h.ratelimit(), r#""ip";r=0;t=1, "user";r=98;t=60, "global";r=998;t=1"#);
    assert_eq!(h.retry_after(), Some(1));
    assert!(h.problem_json().unwrap().contains(r#""violated-policies":["ip"]"#));
}

#[test]
fn a_limiter_member_has_no_single_policy() {
    let f = fixture();
    let e = f.stack.policies().unwrap_err();
    assert!(e.to_string().contains("\"user\""), "{e}");
}
