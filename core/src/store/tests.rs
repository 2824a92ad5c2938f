use std::cell::Cell;
use std::hash::BuildHasher;
use std::time::Duration;

use super::*;
use crate::algorithm::charge_in;
use crate::{Gcra, Quota, Rate};

/// A one-word store of 8 slots in one shard, with a bucket of 3, and
/// two keys X and K with one home slot.
struct Collide {
    gcra: Gcra,
    store: Store<u64>,
    x: u64,
    k: u64,
}

impl Collide {
    fn new() -> Self {
        let gcra = Gcra::new(Quota::from_rate(Rate::new(3, Duration::from_nanos(30)).unwrap()).unwrap());
        let store: Store<u64> = Store::new(&Options::default().shards(1).max_keys(16), 1, &gcra).unwrap();
        // Production hashers are seeded per store: hash with this one.
        let home = |k: u64| table::home_slot(store.hasher.hash_one(k), MIN_CAPACITY);
        let (x, k) = (1u64, (2u64..).find(|&k| home(k) == home(1)).unwrap());
        Collide { gcra, store, x, k }
    }

    fn hash(&self, key: u64) -> u64 {
        self.store.hasher.hash_one(key)
    }

    /// One call of cost `cost` (0: a peek) on `key` at time 0.
    fn call(&self, key: u64, cost: u64) -> crate::decision::Verdict {
        self.store.update::<false, _>(self.hash(key), &key, 0, &self.gcra, |cells| {
            Ok(charge_in(&self.gcra, cells, 0, 0, cost)?.0)
        })
    }

    fn slot_of(&self, key: u64) -> Find {
        let guard = epoch::pin();
        // SAFETY: tables are freed only through the epoch, and we are pinned.
        let t = unsafe { self.store.shard(self.hash(key)).table.load(Ordering::Acquire, &guard).deref() };
        t.find(self.hash(key), &key, &guard)
    }

    /// Forgets X, then charges K twice from full at time 0, which
    /// leaves K in X's old slot with the state a second charge of X
    /// from full leaves (TAT 20).
    fn forget_x_and_charge_k_twice(&self) {
        let x_slot = self.slot_of(self.x);
        self.store.reset(self.hash(self.x), &self.x, 0, &self.gcra);
        assert!(self.call(self.k, 1).allowed && self.call(self.k, 1).allowed);
        assert_eq!(self.slot_of(self.k), x_slot, "the race this test is for: K took X's slot");
    }
}

/// A call whose slot is forgotten and given to another key between its
/// charge and its check leaves the new key's charges alone, even when
/// the new key's state is exactly the value the call stored (both keys
/// charged from a full bucket at the same clock reading). Taking the
/// call's charge back by a CAS from that value erased one of them: the
/// new key then had a token more than its limit allows.
#[test]
fn a_call_on_a_slot_reused_meanwhile_leaves_the_new_key_s_charges_alone() {
    let c = Collide::new();
    assert!(c.call(c.x, 1).allowed);
    // X's second call: after its charge, and before its check, X is
    // forgotten and K takes the slot and is charged twice, which leaves
    // K's state where X's call left X's. Then the call looks again and
    // charges X's new copy.
    let meanwhile = Cell::new(true);
    let second = c.store.update::<false, _>(c.hash(c.x), &c.x, 0, &c.gcra, |cells| {
        let r = charge_in(&c.gcra, cells, 0, 0, 1)?.0;
        if meanwhile.replace(false) {
            c.forget_x_and_charge_k_twice();
        }
        Ok(r)
    });
    assert!(second.allowed);
    assert_eq!(c.call(c.k, 0).remaining, 1, "K keeps both of its charges");
    assert!(c.call(c.x, 0).remaining <= 2, "X's call counted at least once");
}

/// The same race for a run that gives its charge back (a multi-limit
/// call whose later limit denied): given back by a CAS from the value
/// it stored, in the run, the charge took K's instead. The store gives
/// it back only for a slot that held the key throughout, locked.
#[test]
fn a_give_back_on_a_slot_reused_meanwhile_leaves_the_new_key_s_charges_alone() {
    let c = Collide::new();
    assert!(c.call(c.x, 1).allowed);
    let meanwhile = Cell::new(true);
    c.store.update::<true, _>(c.hash(c.x), &c.x, 0, &c.gcra, |cells| {
        assert!(charge_in(&c.gcra, cells, 0, 0, 1)?.0.allowed);
        if meanwhile.replace(false) {
            c.forget_x_and_charge_k_twice();
        }
        cells.give_back();
        Ok(())
    });
    assert_eq!(c.call(c.k, 0).remaining, 1, "K keeps both of its charges");
    assert_eq!(c.call(c.x, 0).remaining, 3, "X's call, run again after the reset, gave its charge back");
}

/// A run that gives its changes back leaves a stored key as it found
/// it, and does not insert a key the store does not hold.
#[test]
fn a_give_back_takes_the_run_s_changes_back_exactly() {
    let c = Collide::new();
    assert!(c.call(c.x, 1).allowed);
    let give_back = |key: u64| {
        c.store.update::<true, _>(c.hash(key), &key, 0, &c.gcra, |cells| {
            assert!(charge_in(&c.gcra, cells, 0, 0, 2)?.0.allowed);
            cells.give_back();
            Ok(())
        })
    };
    give_back(c.x);
    assert_eq!(c.call(c.x, 0).remaining, 2, "X as before: one charge");
    give_back(c.k);
    assert_eq!(c.store.len(), 1, "K, absent, not inserted");
    assert_eq!(c.call(c.k, 0).remaining, 3);
}

/// An eviction of a key that is not idle moves its credit counter (the
/// key may come back fuller than it left, see `Mark`); forgetting idle
/// keys does not.
#[test]
fn evicting_a_key_that_is_not_idle_moves_the_credit_counter_and_forgetting_idle_keys_does_not() {
    let c = Collide::new();
    let credits = || c.store.shards[0].credits.iter().map(|w| w.load(Ordering::Relaxed)).sum::<u64>();
    // 16 keys, each one token down at time 0: the shard is full of keys
    // that are not idle.
    for key in 100..116 {
        assert!(c.call(key, 1).allowed);
    }
    assert_eq!((c.store.len(), credits()), (16, 0));
    assert!(c.call(116, 1).allowed, "a new key gets in by evicting");
    let evicted = 17 - c.store.len() as u64;
    assert!(evicted >= 1);
    assert_eq!(credits(), evicted, "one bump per key evicted");
    // Much later every key is idle: forgetting them all bumps nothing.
    assert!(c.store.gc(1_000_000, &c.gcra) > 0);
    assert_eq!(credits(), evicted);
}

/// A refund or a reset of the key between a run's charge and its
/// give-back, then a call charged from there to exactly the value the
/// run stored (same clock reading, same cost): the give-back must keep
/// its charge, or it erases that call's and the key has a token more
/// than its limit allows after the reset.
#[test]
fn a_give_back_after_a_reset_or_refund_of_the_key_leaves_later_charges_alone() {
    for credit in ["reset", "refund"] {
        let c = Collide::new();
        // X is stored, full again by `now`.
        assert!(c.call(c.x, 1).allowed);
        let now = 1_000_000_000_000;
        let at_now = |cost: u64| {
            c.store.update::<false, _>(c.hash(c.x), &c.x, now, &c.gcra, |cells| {
                Ok(charge_in(&c.gcra, cells, 0, now, cost)?.0)
            })
        };
        let meanwhile = Cell::new(true);
        c.store.update::<true, _>(c.hash(c.x), &c.x, now, &c.gcra, |cells| {
            assert!(charge_in(&c.gcra, cells, 0, now, 1)?.0.allowed);
            if meanwhile.replace(false) {
                if credit == "reset" {
                    c.store.reset(c.hash(c.x), &c.x, now, &c.gcra);
                } else {
                    let refunded = c.store.update_locked(c.hash(c.x), &c.x, now, &c.gcra, Credit::Refund, |cells| {
                        crate::algorithm::refund_in(&c.gcra, cells, 0, now, 1)
                    });
                    assert_eq!(refunded, Some(true));
                }
                // Charged from full at `now`: the value the run stored.
                assert_eq!(at_now(1).remaining, 2);
            }
            cells.give_back();
            Ok(())
        });
        assert_eq!(at_now(0).remaining, 2, "{credit}: the later call's charge stands");
    }
}

/// The store's hasher spreads `u64` keys counted up over the shards as
/// chance would, whatever the process's seed: 20,000 keys on 64 shards put
/// about 313 in each (a standard deviation near 18), so 470 in one is a
/// 9-sigma event. foldhash's `fast` variant, hashing a `u64` with one folded
/// multiply, does that for about one seed in a hundred (its low bits follow
/// the seed's); the check that it does here shows the test can tell.
#[test]
fn u64_keys_counted_up_spread_over_the_shards_for_every_seed() {
    use foldhash::SharedSeed;
    // The store's hasher is the one tested here, with its seeds chosen.
    let _: fn() -> foldhash::quality::RandomState = Hasher::default;
    let most_in_a_shard = |hash: &dyn Fn(u64) -> u64| {
        let mut counts = [0u32; 64];
        for k in 0..20_000u64 {
            counts[(hash(k) & 63) as usize] += 1;
        }
        *counts.iter().max().unwrap()
    };
    let (mut fast_crowded, mut worst) = (0, 0);
    for seed in 0..400u64 {
        let shared: &'static SharedSeed = Box::leak(Box::new(SharedSeed::from_u64(seed)));
        let per_hasher = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let ours = foldhash::quality::SeedableRandomState::with_seed(per_hasher, shared);
        let fast = foldhash::fast::SeedableRandomState::with_seed(per_hasher, shared);
        worst = worst.max(most_in_a_shard(&|k| ours.hash_one(k)));
        fast_crowded += usize::from(most_in_a_shard(&|k| fast.hash_one(k)) >= 470);
    }
    assert!(worst < 470, "a seed put {worst} of 20,000 keys in one of 64 shards");
    assert!(fast_crowded > 0, "the fast variant crowds a shard for some seed (the test can tell)");
}
