//! IP addresses as keys: stored in the slot (no allocation), IPv4 and IPv6
//! independent, IPv4-mapped IPv6 one key with its IPv4 address, IPv6
//! grouped by network through `ip_key`; and the calls that cannot fail.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ratomic::{ip_key, Error, Ipv6Grouping, ManualClock, TokenBucket, MAX_TIME};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn per_ip(rate: &str) -> (TokenBucket<IpAddr, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (TokenBucket::builder(rate).keys::<IpAddr>().clock(clock.clone()).build().unwrap(), clock)
}

#[test]
fn ipv4_and_ipv6_keys_are_independent() {
    let (l, _) = per_ip("2/min");
    let keys = [ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1"), ip("2001:db8::2"), ip("::1"), ip("0.0.0.1")];
    for k in &keys {
        assert_eq!(l.allow(k).remaining, 1, "{k}: a fresh key");
    }
    for k in &keys {
        assert!(l.allow(k).allowed, "{k}: its own second token");
        assert!(!l.allow(k).allowed, "{k}: its own bucket is empty");
    }
    assert_eq!(l.len(), keys.len());
    // `::1` and `0.0.0.1` share their low bits but not their family.
    l.reset(&ip("::1")).unwrap();
    assert!(l.allow(&ip("::1")).allowed);
    assert!(!l.allow(&ip("0.0.0.1")).allowed);
}

#[test]
fn ipv4_mapped_ipv6_is_its_ipv4_address() {
    // A dual-stack socket reports an IPv4 client as ::ffff:a.b.c.d: the
    // limiter counts it against a.b.c.d, with or without `ip_key`.
    let (l, _) = per_ip("2/min");
    assert!(l.allow(&ip("::ffff:198.51.100.7")).allowed);
    assert!(l.allow(&ip("198.51.100.7")).allowed);
    let d = l.allow(&IpAddr::V6(Ipv4Addr::new(198, 51, 100, 7).to_ipv6_mapped()));
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_secs(30));
    assert_eq!(l.len(), 1);
    assert_eq!(ip_key(ip("::ffff:198.51.100.7"), Ipv6Grouping::Slash48), ip("198.51.100.7"));
    // The deprecated IPv4-compatible form (::a.b.c.d) is an IPv6 address.
    assert!(l.allow(&ip("::198.51.100.7")).allowed);
}

#[test]
fn one_ipv6_network_shares_a_bucket_only_when_grouped() {
    let a = ip("2001:db8:aa:bb:1::1");
    let b = ip("2001:db8:aa:bb:ffff:ffff:ffff:ffff"); // same /64
    let c = ip("2001:db8:aa:bc::1"); // next /64, same /56
    let (exact, _) = per_ip("1/min");
    assert!(exact.allow(&a).allowed);
    assert!(exact.allow(&b).allowed, "ungrouped, every address is its own key");
    assert!(exact.allow(&ip_key(b, Ipv6Grouping::Address)).remaining == 0 && exact.len() == 2);

    let (grouped, _) = per_ip("1/min");
    let by64 = |x| ip_key(x, Ipv6Grouping::Slash64);
    assert!(grouped.allow(&by64(a)).allowed);
    assert!(!grouped.allow(&by64(b)).allowed, "one key for the /64");
    assert!(grouped.allow(&by64(c)).allowed, "the next /64 is another key");
    assert_eq!(grouped.len(), 2);
    assert_eq!(by64(b), ip("2001:db8:aa:bb::"));
    assert_eq!(ip_key(c, Ipv6Grouping::Slash56), ip_key(a, Ipv6Grouping::Slash56));
    assert_eq!(ip_key(c, Ipv6Grouping::Slash48), ip("2001:db8:aa::"));
    // IPv4 is never grouped.
    assert_eq!(ip_key(ip("203.0.113.9"), Ipv6Grouping::Slash48), ip("203.0.113.9"));
}

#[test]
fn ipv4_and_ipv6_address_types_are_key_types_too() {
    let v4 = TokenBucket::builder("1/s").keys::<Ipv4Addr>().build().unwrap();
    assert!(v4.allow(&Ipv4Addr::new(10, 0, 0, 1)).allowed);
    assert!(!v4.allow(&Ipv4Addr::new(10, 0, 0, 1)).allowed);
    assert!(v4.allow(&Ipv4Addr::new(10, 0, 0, 2)).allowed);
    let v6 = TokenBucket::builder("1/s").keys::<Ipv6Addr>().build().unwrap();
    assert!(v6.allow(&Ipv6Addr::LOCALHOST).allowed);
    assert!(!v6.peek(&Ipv6Addr::LOCALHOST).allowed);
    assert!(v6.peek(&Ipv6Addr::UNSPECIFIED).allowed);
}

#[test]
fn ip_keys_hold_no_memory_outside_the_table() {
    // 10,000 distinct IPv6 clients: a byte-keyed limiter given their text
    // (up to 39 bytes, past the 23 kept inline) stores the long ones on the
    // heap; an IpAddr-keyed one keeps every address in its slot.
    let (l, _) = per_ip("5/min");
    let text = TokenBucket::builder("5/min").clock(ManualClock::new()).build().unwrap();
    let empty = l.memory_bytes();
    for i in 0..10_000u128 {
        let addr = Ipv6Addr::from(0x2001_0db8_ffff_ffff_0000_0000_0000_0000 | (i * 0x1_0000_0001));
        assert!(l.allow(&IpAddr::V6(addr)).allowed);
        assert!(text.allow(addr.to_string().as_str()).unwrap().allowed);
    }
    assert_eq!(l.len(), 10_000);
    assert!(l.memory_bytes() > empty);
    assert!(l.memory_bytes() < text.memory_bytes(), "{} vs {}", l.memory_bytes(), text.memory_bytes());
}

#[test]
fn infallible_calls_answer_like_the_checked_ones() {
    let (l, clock) = per_ip("3/s");
    let k = ip("192.0.2.10");
    clock.set_nanos(5_000);
    let now = l.now();
    assert_eq!(l.peek(&k), l.peek_at(&k, 1, now).unwrap());
    let d = l.allow(&k);
    assert_eq!((d.allowed, d.remaining, d.limit), (true, 2, 3));
    assert_eq!(l.allow_at(&k, 2, now).unwrap().remaining, 0);
    // The cost check stays exact where a cost is given.
    assert_eq!(l.allow_n(&k, 4), Err(Error::CostExceedsLimit { cost: 4, limit: 3 }));
    let denied = l.allow(&k);
    assert!(!denied.allowed);
    assert_eq!(denied, l.peek(&k));
}

#[test]
fn a_clock_past_max_time_is_an_error_at_and_a_panic_without() {
    let (l, clock) = per_ip("3/s");
    let k = ip("192.0.2.10");
    clock.set_nanos(MAX_TIME + 1);
    assert!(matches!(l.allow_at(&k, 1, l.now()), Err(Error::InvalidArgument { name: "now", .. })));
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.allow(&k))).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("past MAX_TIME"), "{message}");
    assert!(message.contains(&(MAX_TIME + 1).to_string()), "{message}");
    clock.set_nanos(MAX_TIME);
    assert_eq!(l.allow(&k).remaining, 2, "the failed calls changed nothing");
}

#[cfg(target_os = "linux")]
#[test]
fn ip_keys_work_in_a_shared_file() {
    let path = std::env::temp_dir().join(format!("ratomic-ip-keys-{}.ratomic", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // A shared file reads the host's monotonic clock (no other is accepted);
    // no test lasts the half hour a token takes to refill.
    let build = || TokenBucket::builder("2/h").keys::<IpAddr>().shared_file(&path).build().unwrap();
    let (a, b) = (build(), build());
    assert!(a.allow(&ip("2001:db8::1")).allowed);
    assert!(b.allow(&ip("2001:db8::1")).allowed);
    assert!(!a.allow(&ip("2001:db8::1")).allowed, "both handles count against one bucket");
    assert!(b.allow(&ip("::ffff:192.0.2.1")).allowed);
    assert_eq!(a.peek(&ip("192.0.2.1")).remaining, 0);
    std::fs::remove_file(&path).unwrap();
}
