//! Keeping a shard within its bounds, under its insert lock: eviction,
//! forgetting full keys, and migration to a new table.

use super::*;

impl<S: StoredKey> Store<S> {
    /// Maintains a shard, under its insert lock: evicts keys to respect the
    /// bounds, then migrates to a new table if the current one is too full
    /// (dropping full keys on the way) or, on `gc`, to forget full keys and
    /// shrink.
    pub(super) fn maintain_locked(
        &self,
        shard: &Shard<S>,
        now: u64,
        retention: &impl Retention,
        guard: &epoch::Guard,
        why: Trigger,
    ) {
        let table = shard.table.load(Ordering::Acquire, guard);
        // SAFETY: as in `update`; only the maintainer replaces it.
        let t = unsafe { table.deref() };
        let extra = matches!(why, Trigger::Insert { .. }) as usize;
        let extra_bytes = match why {
            Trigger::Insert { bytes, .. } => bytes,
            Trigger::Gc => 0,
        };

        // Pass 1, only when a bound binds (or on `gc`): every live key, with
        // how long until it would be droppable (0: it carries no
        // information now). Growth alone needs no scan here: the migration
        // forgets idle keys on its way.
        let limit = self.max_per_shard;
        let byte_limit = self.max_bytes_per_shard;
        let over_keys = shard.live.load(Ordering::Relaxed) + extra > limit;
        let over_bytes = shard.key_bytes.load(Ordering::Relaxed) + extra_bytes > byte_limit;
        let w = self.width;
        let mut keys: Vec<(u64, usize, usize, u64)> = Vec::new(); // (wait, bytes, slot, first)
        let (mut kept, idle) = if over_keys || over_bytes || matches!(why, Trigger::Gc) {
            for i in 0..t.capacity() {
                let mut states = [0u64; MAX_WIDTH];
                if !Self::read_live(t, i, &mut states[..w]) {
                    continue;
                }
                let wait = retention.idle_after(&states[..w], now);
                keys.push((wait, S::heap_bytes(t.key(i)), i, states[0]));
            }
            let idle = keys.iter().filter(|k| k.0 == 0).count();
            (keys.len() - idle, idle)
        } else {
            (shard.live.load(Ordering::Relaxed), 0)
        };

        // Pass 2: if a bound binds, forget in place every full key and,
        // among the others, the ones closest to full — an eighth of the
        // shard at a time, so eviction is amortised over the inserts that
        // refill it — then, while the byte budget binds, long keys in the
        // same order.
        if over_keys || over_bytes {
            let survivors = kept;
            let survivor_bytes: usize = keys.iter().filter(|k| k.0 > 0).map(|k| k.1).sum();
            keys.sort_unstable_by_key(|&(wait, ..)| wait);
            let keep_keys = if survivors + extra > limit {
                survivors.min((limit - limit / 8).min(limit - extra))
            } else {
                survivors
            };
            let cells = (t.capacity() / 8).max(8).next_power_of_two().min(self.max_cells);
            let byte_target = (byte_limit - byte_limit / 8).min(byte_limit.saturating_sub(extra_bytes));
            let mut bytes = survivor_bytes;
            let cut = keys.len() - keep_keys; // the idle keys, then the survivors to evict
            for (k, &(wait, b, i, first)) in keys.iter().enumerate() {
                let evict = k < cut || (bytes > byte_target && b > 0);
                if evict && self.forget(shard, t, i, first, now, cells, retention, guard) && wait > 0 {
                    bytes -= b;
                    kept -= 1;
                }
            }
        }

        // Pass 3: migrate when the table is too full (dead slots count: they
        // lengthen chains), dropping full keys on the way; or on gc when that
        // drops or shrinks something. The new table holds the keys that
        // move at a load of 1/2.
        let used = t.used.load(Ordering::Relaxed);
        let at_target = |keys: usize| at_target(keys).max(self.min_capacity);
        match why {
            // A rebuild for room never shrinks the table: keys that went
            // idle and come back (most clients of a per-IP limit) would
            // otherwise shrink and regrow it over and over. `gc` shrinks it.
            // Sized by the migration's own count of the keys that move
            // (idle keys are forgotten on its way).
            Trigger::Insert { .. } => {
                if (used + extra) * MAX_LOAD.1 > t.capacity() * MAX_LOAD.0 {
                    let cap = t.capacity();
                    // Keys idle for less than their window stay: most come
                    // back (a client under its limit), and forgetting them
                    // would make every return an insert.
                    let since = now.saturating_sub(retention.linger());
                    self.migrate(
                        shard,
                        table,
                        |moving| at_target(moving + extra).max(cap),
                        now,
                        since,
                        retention,
                        guard,
                    );
                }
            }
            Trigger::Gc => {
                // An empty shard frees its table, unless `reserve_keys` asked
                // for room up front (which stays).
                let cap = if kept == 0 && self.min_capacity <= MIN_CAPACITY { 0 } else { at_target(kept) };
                if idle > 0 || cap < t.capacity() {
                    self.migrate(shard, table, |_| cap, now, now, retention, guard);
                }
            }
        }
    }

    /// Reads live slot `i`'s states into `out`; false if the slot is not live
    /// or holds a marker.
    fn read_live(t: &Table<S>, i: usize, out: &mut [u64]) -> bool {
        for (o, w) in out.iter_mut().zip(t.states(i)) {
            *o = w.load(Ordering::Acquire);
            if *o >= FIRST_MARKER {
                return false;
            }
        }
        true
    }

    /// Forgets live slot `i` (first state `first`) in place: locks it,
    /// captures its states, remembers them in the summary and releases the
    /// slot. False if the slot changed since it was read (it is then left
    /// alone).
    #[allow(clippy::too_many_arguments)]
    fn forget(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        i: usize,
        first: u64,
        now: u64,
        cells: usize,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) -> bool {
        let Some(states) = t.lock_all(i, first) else { return false };
        let wait = retention.idle_after(&states[..self.width], now);
        self.drop_locked(shard, t, i, &states[..self.width], wait, now, cells, retention, guard);
        true
    }

    /// Forgets locked slot `i`, whose captured states are `states` (`wait`
    /// ns from idle): remembered in the summary, the slot released.
    #[allow(clippy::too_many_arguments)]
    fn drop_locked(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        i: usize,
        states: &[u64],
        wait: u64,
        now: u64,
        cells: usize,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) {
        let hash = S::rehash(t.key(i), &self.hasher);
        if wait > 0 {
            // Evicted while not idle: the key may come back fuller than it
            // left (a displaced summary, under `Fair`), where a give-back of
            // a charge made before must not land (see `Mark`).
            self.credits(shard, hash).fetch_add(1, Ordering::SeqCst);
        }
        shard.summary.forget(hash, states, wait, now, cells, retention, guard);
        shard.key_bytes.fetch_sub(S::heap_bytes(t.key(i)), Ordering::Relaxed);
        t.release(i, guard);
        shard.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// Moves every key of `old` to a new table of `size(n)` slots (`n`: at
    /// most how many keys will move; the table is made larger if it could
    /// not hold them), forgetting the keys already droppable at `since`
    /// (`now`, or earlier to keep keys that have been idle less than their
    /// window; droppable then means droppable now), under the shard's
    /// insert lock, while lookups go on: each live slot is locked, captured,
    /// copied into the new table and marked MOVED on its own (a key moves
    /// once per growth); lookups of a key not moved yet find it in `old`,
    /// and of a moved key follow `old`'s `next`, set before the first move.
    /// The shard's table becomes the new one with one pointer store at the
    /// end; new keys wait for the lock until then. `old` is freed through
    /// the epoch.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn migrate(
        &self,
        shard: &Shard<S>,
        old: epoch::Shared<'_, Table<S>>,
        size: impl FnOnce(usize) -> usize,
        now: u64,
        since: u64,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) {
        // SAFETY: as in `update`.
        let from = unsafe { old.deref() };
        // No key is placed in the old table while the lock is held, so the
        // keys to move are at most the slots live or locked now.
        let cells = (from.capacity() / 8).max(8).next_power_of_two().min(self.max_cells);
        let w = self.width;
        // One scan: keys that carry no information are forgotten in place,
        // and every other slot that holds a key (live, or locked by a
        // credit) is counted, so the new table is sized for the keys that
        // will move.
        let mut bound = 0usize;
        // One buffer for both scans, written and read word by word in place.
        let mut buffer = [0u64; MAX_WIDTH];
        let states = &mut buffer[..w];
        for i in 0..from.capacity() {
            if matches!(from.control(i), EMPTY | DEAD | MOVED) {
                continue;
            }
            if Self::read_live(from, i, states)
                && retention.idle_after(states, since) == 0
                && from.lock_into(i, states[0], states)
            {
                if retention.idle_after(states, since) == 0 {
                    self.drop_locked(shard, from, i, states, 0, now, cells, retention, guard);
                    continue;
                }
                from.unlock(i, states);
            }
            bound += 1;
        }
        let cap = size(bound);
        let cap = cap.max(if bound == 0 { 0 } else { (bound * 8).div_ceil(7) + 1 });
        let new = epoch::Owned::new(Table::new(cap, self.width)).into_shared(guard);
        // SAFETY: just made; published below.
        let to = unsafe { new.deref() };
        // Before the first key moves: a lookup that finds its key MOVED, or
        // absent, follows it (see `absent_while_migrating`).
        from.next.store(new, Ordering::Release);
        for i in 0..from.capacity() {
            let mut backoff = Backoff::new();
            loop {
                let c = from.control(i);
                match c {
                    // Free slots stay as they are: nobody else places keys.
                    EMPTY | DEAD | MOVED => break,
                    // A credit or a reset holds the slot: wait.
                    LOCKED => backoff.snooze(),
                    first => {
                        if !from.lock_into(i, first, states) {
                            continue;
                        }
                        let hash = S::rehash(from.key(i), &self.hasher);
                        if retention.idle_after(states, since) == 0 {
                            // Full since `since`: forgotten on the way (the floor keeps it).
                            shard.summary.forget(hash, states, 0, now, cells, retention, guard);
                            shard.key_bytes.fetch_sub(S::heap_bytes(from.key(i)), Ordering::Relaxed);
                            S::retire(from.key(i), guard);
                            shard.live.fetch_sub(1, Ordering::Relaxed);
                        } else {
                            to.adopt(hash, from.key(i), states);
                        }
                        from.mark_moved(i);
                        if stop::here(stop::At::Migration) {
                            return;
                        }
                        break;
                    }
                }
            }
        }
        shard.table.store(new, Ordering::Release);
        // SAFETY: replaced above; threads pinned now may still read it.
        unsafe { guard.defer_destroy(old) };
        // Seal the old table now rather than when this thread's bag of
        // deferred frees fills up (64 of them): a growing store would
        // otherwise keep dozens of old tables alive at once. After a growth
        // it is freed as soon as this call ends, at the price of two
        // `membarrier`s: a growing store's memory is mostly its tables, and
        // the allocator reuses a block freed at once for the next table
        // (with the old tables' frees left to the epoch's next collection,
        // RSS per key after 100k inserts rose by a quarter, and freeing only
        // the old tables of 16 KiB or more at once did not help: `bin
        // memory`). Other rebuilds wait for the epoch's next collection, at
        // most one a millisecond: those that do not grow, and those of a
        // shard near its `max_keys` share, whose table shrinks and grows
        // again under churn (one every ~3,000 keys in `bin churn`), so that
        // churn does not pay two `membarrier`s each time.
        let near_bound = shard.live.load(Ordering::Relaxed) >= self.max_per_shard / 2;
        if to.capacity() > from.capacity() && !near_bound {
            guard.flush_now();
        } else {
            guard.flush();
        }
    }
}
