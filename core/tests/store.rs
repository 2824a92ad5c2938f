//! The keyed store: forgetting full buckets changes no decision, `max_keys`
//! bounds memory without ever granting more, tables grow and shrink.

use std::time::Duration;

use ratomic::{Clock, Eviction, ManualClock, Quota, TokenBucket};

const SEC: u64 = 1_000_000_000;

fn limiter(quota: Quota, max_keys: usize) -> (TokenBucket<[u8], ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (TokenBucket::builder(quota).clock(clock.clone()).max_keys(max_keys).build().unwrap(), clock)
}

/// xorshift: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn dropping_full_buckets_changes_no_decision() {
    let quota = Quota::new(3, 10.0).unwrap();
    let (kept, clock) = limiter(quota, 1 << 20);
    let forgetful = TokenBucket::builder(quota).clock(clock.clone()).shards(1).build().unwrap();
    let mut rng = Rng(42);
    let mut dropped = 0;
    for step in 0..50_000 {
        let key = format!("user:{}", rng.next() % 2_000);
        clock.advance_nanos(rng.next() % (SEC / 1_000));
        let cost = rng.next() % 3;
        assert_eq!(kept.allow_n(&key, cost).unwrap(), forgetful.allow_n(&key, cost).unwrap(), "step {step}");
        if step % 997 == 0 {
            dropped += forgetful.gc().unwrap();
        }
    }
    assert!(dropped > 1_000, "the test must actually drop keys (dropped {dropped})");
    assert!(forgetful.len() < kept.len());
}

#[test]
fn gc_forgets_exactly_the_full_buckets_and_shrinks() {
    let (l, clock) = limiter(Quota::new(2, 1.0).unwrap(), 1 << 20);
    for i in 0..10_000u32 {
        let _ = l.allow(&i.to_le_bytes()).unwrap();
    }
    let _ = l.allow_n("busy", 2).unwrap();
    assert_eq!(l.len(), 10_001);
    let big = l.memory_bytes();
    clock.advance(Duration::from_millis(999)); // nobody full yet
    assert_eq!(l.gc().unwrap(), 0);
    clock.advance(Duration::from_millis(1)); // one-token keys are full now; "busy" is not
    assert_eq!(l.gc().unwrap(), 10_000);
    assert_eq!(l.len(), 1);
    assert!(l.memory_bytes() * 100 < big, "tables shrink: {} -> {}", big, l.memory_bytes());
    assert_eq!(l.peek_n("busy", 0).unwrap().remaining, 1, "the busy key was kept, half refilled");
}

#[test]
fn full_buckets_are_dropped_as_tables_fill_without_gc() {
    // Each key is used once; its bucket is full again 1 ms later. Memory
    // stays proportional to the keys being limited, with no gc() call.
    let (l, clock) = limiter(Quota::new(1, 1000.0).unwrap(), 1 << 22);
    for i in 0..200_000u64 {
        let _ = l.allow(&i.to_le_bytes()).unwrap();
        clock.advance(Duration::from_micros(10)); // 100 keys live at any time
    }
    assert!(l.len() < 5_000, "{} keys held", l.len());
}

#[test]
fn keys_that_come_back_within_their_window_stay_as_the_store_grows() {
    // 1000/s with bursts of 1000: a window of 1 s. Each key takes one token
    // a pass and has it back 1 ms later, so it is full whenever the store
    // grows; a pass takes 0.1 s, well within the window. Forgotten at each
    // growth, every return would be an insert and the store would never
    // grow to hold them.
    let (l, clock) = limiter(Quota::new(1000, 1000.0).unwrap(), 1 << 22);
    let keys: Vec<[u8; 8]> = (0..20_000u64).map(u64::to_le_bytes).collect();
    for _pass in 0..3 {
        for k in &keys {
            assert_eq!(l.allow(k).unwrap().remaining, 999, "full on every return");
            clock.advance_nanos(5_000);
        }
    }
    assert_eq!(l.len(), keys.len(), "every returning key stayed");

    // Idle for longer than the window: gone at the next growth, with no gc().
    clock.advance(Duration::from_secs(2));
    for i in 0..40_000u64 {
        let _ = l.allow(&(i + (1 << 32)).to_le_bytes()).unwrap();
        clock.advance_nanos(5_000);
    }
    assert_eq!(l.len(), 40_000, "the idle keys are forgotten, the ones within their window stay");
    // gc() does not wait for the window: every full key goes.
    clock.advance(Duration::from_millis(2));
    assert_eq!(l.gc().unwrap(), 40_000);
    assert!(l.is_empty());
}

#[test]
fn max_keys_bounds_memory_and_never_blocks() {
    let (l, _clock) = limiter(Quota::per_hour(10).unwrap(), 1_000);
    for i in 0..100_000u64 {
        let _ = l.allow(&i.to_le_bytes()).unwrap();
    }
    assert!(l.len() <= 1_000 + 16, "{} keys held with max_keys 1000", l.len());
}

#[test]
fn eviction_under_pressure_never_grants_more() {
    // A key drained, then pushed out of a full store by a flood of other
    // keys, must not come back with tokens it did not earn.
    let (l, clock) = limiter(Quota::new(5, 1.0).unwrap(), 64);
    let _ = l.allow_n("victim", 5).unwrap();
    let mut flood = Rng(7);
    for _ in 0..10_000 {
        let _ = l.allow(&flood.next().to_le_bytes()).unwrap();
    }
    assert!(!l.allow("victim").unwrap().allowed, "an evicted empty bucket stays empty");
    clock.advance(Duration::from_secs(1));
    let d = l.allow("victim").unwrap();
    assert!(d.allowed, "and refills as it would have");
    assert_eq!(d.remaining, 0);
    assert!(!l.allow("victim").unwrap().allowed);
    // Once the flood's buckets are full again, everything is back to normal.
    clock.advance(Duration::from_secs(10));
    assert_eq!(l.allow_n("newcomer", 5).unwrap().remaining, 0);
}

#[test]
fn conformance_holds_per_key_under_pressure() {
    // Over any run, a key is never granted more than B + elapsed/T tokens,
    // even while other keys keep evicting it.
    let (l, clock) = limiter(Quota::new(4, 2.0).unwrap(), 32);
    let mut rng = Rng(99);
    let start = clock.now();
    let mut granted = 0u64;
    for _ in 0..20_000 {
        clock.advance_nanos(rng.next() % (SEC / 100));
        if rng.next() % 4 == 0 {
            granted += u64::from(l.allow("watched").unwrap().allowed);
        } else {
            let _ = l.allow(&(rng.next() % 500).to_le_bytes()).unwrap();
        }
    }
    let elapsed = clock.now() - start;
    let bound = 4 + elapsed / (SEC / 2);
    assert!(granted <= bound, "granted {granted} > bound {bound}");
    assert!(granted * 10 >= bound * 7, "and not starved: {granted} of {bound}");
}

#[test]
fn long_keys_survive_rebuilds() {
    let (l, _clock) = limiter(Quota::new(3, 1.0).unwrap(), 1 << 20);
    let key = |i: u32| format!("a-rather-long-key-that-lives-on-the-heap/{i:08}");
    for i in 0..5_000 {
        assert!(l.allow(&key(i)).unwrap().allowed);
    }
    for i in 0..5_000 {
        assert_eq!(l.peek_n(&key(i), 0).unwrap().remaining, 2, "key {i}");
    }
    for i in (0..5_000).step_by(2) {
        l.reset(&key(i)).unwrap();
    }
    assert_eq!(l.len(), 2_500);
    for i in 0..5_000 {
        assert_eq!(l.peek_n(&key(i), 0).unwrap().remaining, if i % 2 == 0 { 3 } else { 2 });
    }
}

#[test]
fn an_evicted_key_comes_back_to_its_own_state_and_a_reset_is_exact() {
    for policy in [Eviction::Fair, Eviction::Strict] {
        let clock = ManualClock::new();
        let l = TokenBucket::builder(Quota::new(2, 1.0).unwrap())
            .clock(clock.clone())
            .max_keys(1)
            .eviction(policy)
            .build()
            .unwrap();
        let _ = l.allow_n("a", 2).unwrap();
        // Room for one key: "a" is evicted, not yet full. (Under Strict, "b"
        // starts from its summary cell: if it shares drained "a"'s, it is
        // denied and not stored.)
        let _ = l.allow("b").unwrap();
        assert!(l.len() <= 1);
        assert!(!l.allow("a").unwrap().allowed, "{policy:?}: an evicted empty bucket stays empty");
        l.reset("a").unwrap();
        assert_eq!(l.allow_n("a", 2).unwrap().remaining, 0, "{policy:?}: a reset key is full");
    }
}

/// An attacker rotating single-use keys (say, one per IP of a botnet) at a
/// store bounded to 1,000 keys, while honest users each call once a minute:
/// under the fair policy the churn never denies an honest call; under the
/// strict one it denies most of them — the documented price of never
/// over-granting (figures at full scale in BENCHMARKS.md, "eviction").
#[test]
fn churn_on_other_keys_never_denies_an_honest_key_under_the_fair_policy() {
    churn_against_honest_keys(None);
}

/// The same through a shared file (`Options::shared_file`), whose table
/// makes room by its own protocol (probe windows, bounded steps, floor cells).
#[cfg(target_os = "linux")]
#[test]
fn churn_in_a_shared_file_never_denies_an_honest_key_under_the_fair_policy() {
    let dir = std::env::temp_dir().join(format!("ratomic-churn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    churn_against_honest_keys(Some(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn churn_against_honest_keys(shared_dir: Option<&std::path::Path>) {
    let run = |policy: Eviction| {
        // Times given to each call (`allow_at`): a shared file takes no
        // clock but the host's monotonic one.
        let b = TokenBucket::builder(Quota::per_hour(100).unwrap()).max_keys(1_000).eviction(policy);
        let l = match shared_dir {
            Some(dir) => b.shared_file(dir.join(format!("{policy:?}.shm"))).build().unwrap(),
            None => b.build().unwrap(),
        };
        let (mut denied, mut honest) = (0, 0);
        let mut attacker = 0u64;
        for second in 0..180u64 {
            let now = second * 1_000_000_000;
            for _ in 0..3_000 {
                attacker += 1;
                let _ = l.allow_at(&format!("bot:{attacker}"), 1, now).unwrap();
            }
            // 500 honest users, each calling once a minute, spread over the minute.
            for u in (0..500u64).filter(|u| u % 60 == second % 60) {
                honest += 1;
                denied += u32::from(!l.allow_at(&format!("user:{u}"), 1, now).unwrap().allowed);
            }
        }
        (denied, honest)
    };
    let (denied, honest) = run(Eviction::Fair);
    assert_eq!(denied, 0, "fair: {denied} of {honest} honest calls denied");
    let (denied, honest) = run(Eviction::Strict);
    assert!(denied * 2 > honest, "strict: the churn denies most new keys ({denied} of {honest})");
}

#[test]
fn long_keys_are_bounded_in_bytes_and_counted() {
    let clock = ManualClock::new();
    let l = TokenBucket::builder(Quota::per_hour(10).unwrap())
        .clock(clock)
        .shards(4)
        .max_key_bytes(64 << 10)
        .build()
        .unwrap();
    let empty = l.memory_bytes();
    for i in 0..10_000u32 {
        let key = format!("{i:08}{}", "x".repeat(992)); // 1000-byte keys, all distinct
        assert!(l.allow(&key).unwrap().allowed, "a new key is never denied by the churn");
    }
    let held = l.len();
    assert!(held <= 64 + 4, "{held} keys of 1000 bytes held under a 64 KiB budget");
    let bytes = l.memory_bytes() - empty;
    assert!(bytes >= held * 1000, "memory_bytes counts the long keys ({bytes} for {held})");
    assert!(bytes < (64 << 10) + 64 * 1024, "{bytes} bytes");
}

/// The adversarial review's replay (issue 11, part 2): fixed window of 5 per
/// 4000 ns, one shard; K uses 4 in window 5, another key 1 in window 6, and
/// `gc_at(8W)` forgets both. A call on K stamped back in window 5 must get
/// the answer a limiter that did not forget gives: denied (4 + 2 > 5). The
/// old join kept window 6's count and dropped window 5's, so it was allowed.
#[test]
fn a_call_stamped_before_a_gc_gets_the_answer_it_would_have_got() {
    use ratomic::{FixedWindow, Rate, SlidingWindow};
    const W: u64 = 4_000;
    let rate = Rate::new(5, Duration::from_nanos(W)).unwrap();
    let fixed = |gc: bool| {
        let l = FixedWindow::builder(rate).clock(ManualClock::new()).shards(1).build().unwrap();
        assert!(l.allow_at("K", 4, 5 * W + 10).unwrap().allowed);
        assert!(l.allow_at("other", 1, 6 * W + 10).unwrap().allowed);
        if gc {
            assert_eq!(l.gc_at(8 * W).unwrap(), 2);
        }
        l.allow_at("K", 2, 5 * W + 20).unwrap()
    };
    let (after_gc, kept) = (fixed(true), fixed(false));
    assert!(!kept.allowed && !after_gc.allowed, "{after_gc:?}");
    assert!(after_gc.remaining <= kept.remaining && after_gc.retry_after >= kept.retry_after);
    let sliding = |gc: bool| {
        let l = SlidingWindow::builder(rate).clock(ManualClock::new()).shards(1).build().unwrap();
        assert!(l.allow_at("K", 4, 5 * W + 10).unwrap().allowed);
        assert!(l.allow_at("other", 1, 6 * W + 10).unwrap().allowed);
        if gc {
            assert_eq!(l.gc_at(9 * W).unwrap(), 2);
        }
        l.allow_at("K", 2, 5 * W + 20).unwrap()
    };
    let (after_gc, kept) = (sliding(true), sliding(false));
    assert!(!kept.allowed && !after_gc.allowed, "{after_gc:?}");
    assert!(after_gc.remaining <= kept.remaining && after_gc.retry_after >= kept.retry_after);
}

/// `reserve_keys`: the room asked for is allocated when the limiter is built,
/// filling it grows no table (the memory stays what it was), every
/// decision is the one a limiter without it makes, and `gc` of every key
/// keeps the room (without `capacity` it frees the tables).
#[test]
fn reserve_keys_makes_room_up_front_and_keeps_it() {
    let clock = ManualClock::new();
    let build = |reserve: usize| {
        TokenBucket::builder(Quota::new(3, 1.0).unwrap())
            .keys::<u64>()
            .clock(clock.clone())
            .reserve_keys(reserve)
            .build()
            .unwrap()
    };
    let (sized, plain) = (build(20_000), build(0));
    let room = sized.memory_bytes();
    assert!(room >= 20_000 * 16, "room for 20,000 keys is allocated up front ({room} bytes)");
    assert!(plain.memory_bytes() * 10 < room, "and not without reserve_keys ({} bytes)", plain.memory_bytes());
    for round in 0..4 {
        for k in 0..20_000u64 {
            let (a, b) = (sized.allow(&k), plain.allow(&k));
            assert_eq!(a, b, "key {k}, call {round}: the same decision either way");
        }
    }
    assert_eq!(sized.len(), 20_000);
    assert_eq!(sized.memory_bytes(), room, "no table grew while the keys came");
    assert!(plain.memory_bytes() > plain.len() * 16, "the plain limiter grew to hold them");
    clock.advance(Duration::from_secs(10)); // every key is full again
    assert_eq!(sized.gc().unwrap(), 20_000);
    assert_eq!(plain.gc().unwrap(), 20_000);
    assert_eq!(sized.memory_bytes(), room, "gc keeps the room asked for");
    assert!(plain.memory_bytes() * 10 < room, "and frees it without reserve_keys ({} bytes)", plain.memory_bytes());
}

/// The room `reserve_keys` makes is room for the keys as hashing spreads
/// them over the shards, not as an even split: 640 keys on 64 shards put
/// 10 in a shard on average and over 15 (room for 10 at a load of 1/2 grows
/// past 3/4) in some shard of almost every limiter. Twenty limiters, each
/// with its own hash seed: none grows a table while its keys come.
#[test]
fn reserved_room_holds_the_keys_as_hashing_spreads_them() {
    for limiter in 0..20 {
        let sized = TokenBucket::builder(Quota::new(3, 1.0).unwrap())
            .clock(ManualClock::new())
            .shards(64)
            .reserve_keys(640)
            .build()
            .unwrap();
        let room = sized.memory_bytes();
        for k in 0..640 {
            assert!(sized.allow(format!("user:{k}").as_bytes()).unwrap().allowed);
        }
        assert_eq!(sized.len(), 640);
        assert_eq!(sized.memory_bytes(), room, "limiter {limiter}: a table grew before 640 keys came");
    }
}

#[test]
fn reserve_keys_above_max_keys_are_refused() {
    let e = TokenBucket::builder("5/s").max_keys(1_000).reserve_keys(1_001).build().unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid reserve_keys: 1001 (must be at most max_keys (1000): raise max_keys, or ask for fewer keys up front)"
    );
    assert!(TokenBucket::builder("5/s").max_keys(1_000).reserve_keys(1_000).build().is_ok());
}
