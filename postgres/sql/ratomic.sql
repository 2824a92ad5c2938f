-- ratomic-postgres, schema version 1: one table and five functions.
-- The library runs this (in one transaction, under an advisory lock) when a
-- limiter connects, unless told not to; `ratomic_postgres::schema::sql()`
-- prints it for a DBA to run instead. Safe to run again.
--
-- Every time is whole microseconds in bigint; nothing is floating point
-- but the one reading of clock_timestamp(). The arithmetic is the in-memory
-- engine's (GCRA, fixed and sliding windows, several limits all or
-- nothing), and the parity tests hold it to that engine on explicit times.
--
-- A decision answered is a decision kept: the statements that take tokens
-- (ratomic_v1_call, ratomic_v1_lease, and the client's plain upsert) commit
-- durably even where the server's default is synchronous_commit = off,
-- which answers before the commit is flushed (a crash would lose decisions
-- already answered, and the buckets come back fuller than they were). They
-- raise it to local for their own transaction (set_config(..., true), as
-- SET LOCAL: inside a caller's transaction, for that transaction), and
-- leave any other setting as it is. A transaction that wrote no WAL (an
-- UNLOGGED table's) is committed without a flush whatever the setting.

CREATE /*UNLOGGED*/ TABLE IF NOT EXISTS ratomic_v1_state (
    prefix  text   NOT NULL,
    key     bytea  NOT NULL,
    -- One letter per limit ('g' token bucket, 'f' fixed, 's' sliding
    -- window): state written under other rules is not read as these.
    kinds   text   NOT NULL,
    -- Three words per limit: GCRA [tat, fence, 0]; fixed [index, count, 0];
    -- sliding [index, previous count, current count]. Zeros: a full key.
    -- A GCRA fence is the end of the latest lease taken on the limit (see
    -- ratomic_v1_lease): refunds and resets never move the TAT below it.
    state   bigint[] NOT NULL,
    -- µs from which every limit is full again: ratomic_v1_gc removes the
    -- row after it.
    full_at bigint NOT NULL,
    PRIMARY KEY (prefix, key)
) WITH (fillfactor = 80);

-- One decision, refund or reset on one key. op: 'a' allow, 'p' peek,
-- 'r' refund (amount = tokens), 'x' reset. at_us: the caller's time, or
-- NULL for the server's clock_timestamp() (read once the row is locked).
-- Reply, as ratomic's Redis script: allow/peek [verdict, then per limit
-- allowed, remaining, limit, retry_after_us, reset_after_us]; refund
-- [limits changed]; reset [1]. A reset keeps a token bucket whose lease
-- fence is ahead of now at that fence (the slots leases hold stay theirs),
-- and a refund never moves a TAT below its fence.
--
-- An allow locks the key's row (SELECT … FOR UPDATE, or the INSERT of a
-- new one), so calls on one key serialize and never over-grant; a denial
-- or a peek writes nothing.
CREATE OR REPLACE FUNCTION ratomic_v1_call(
    op text, pfx text, k bytea, at_us bigint, amount bigint, kinds text, p1 bigint[], p2 bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
    n       int := length(kinds);
    now_us  bigint;
    st      bigint[];
    nst     bigint[];
    old_kinds text;
    had_row boolean;
    reply   bigint[];
    ok_all  boolean;
    write   boolean;
    changed int;
    full_us bigint;
    i int; j int;
    kind text;
    t bigint; b bigint; w bigint; l bigint;
    tat bigint; d bigint; tau bigint; need bigint; slack bigint; aft bigint;
    idx bigint; sidx bigint; off bigint; gap bigint; prev bigint; cur bigint;
    to_end bigint; carry bigint; fit bigint; back bigint;
    ok boolean; rem bigint; retry bigint; rst bigint; rem0 bigint; rst0 bigint;
    zero_rem bigint[]; zero_rst bigint[];
BEGIN
    -- Durable commits (see the note at the top): raised from off for this
    -- transaction only, never lowered.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    IF op IS NULL OR op NOT IN ('a', 'p', 'r', 'x') OR pfx IS NULL OR k IS NULL OR amount IS NULL OR amount < 0
       OR n = 0 OR cardinality(p1) <> n OR cardinality(p2) <> n THEN
        RAISE EXCEPTION 'ratomic_v1_call: bad arguments (op %, amount %, kinds %)', op, amount, kinds
            USING ERRCODE = '22023';
    END IF;
    IF op = 'x' THEN
        -- Every limit full again, but for the slots leases still hold.
        SELECT s.kinds, s.state INTO old_kinds, st FROM ratomic_v1_state s
            WHERE s.prefix = pfx AND s.key = k FOR UPDATE;
        IF NOT FOUND THEN RETURN ARRAY[1::bigint]; END IF;
        now_us := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        nst := array_fill(0::bigint, ARRAY[3 * length(old_kinds)]);
        full_us := 0;
        FOR i IN 1..length(old_kinds) LOOP
            j := 3 * (i - 1);
            IF substr(old_kinds, i, 1) = 'g' AND st[j + 2] > now_us THEN
                nst[j + 1] := st[j + 2]; nst[j + 2] := st[j + 2];
                full_us := greatest(full_us, st[j + 2]);
            END IF;
        END LOOP;
        IF full_us = 0 THEN
            DELETE FROM ratomic_v1_state s WHERE s.prefix = pfx AND s.key = k;
        ELSE
            UPDATE ratomic_v1_state s SET state = nst, full_at = full_us WHERE s.prefix = pfx AND s.key = k;
        END IF;
        RETURN ARRAY[1::bigint];
    END IF;
    -- The common call: one token bucket, allow. One upsert that charges
    -- only if the bucket allows (its ON CONFLICT locks the row either way);
    -- the same equations and reply as the general path below. A denial
    -- (nothing written) is answered by the general path. It keeps the
    -- lease fence (state[2]) as it is.
    IF n = 1 AND op = 'a' AND amount > 0 AND kinds = 'g' THEN
        t := p1[1]; b := p2[1];
        tau := b * t;
        need := amount * t;
        now_us := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        INSERT INTO ratomic_v1_state AS s (prefix, key, kinds, state, full_at)
            VALUES (pfx, k, 'g', ARRAY[now_us + need, 0, 0]::bigint[], now_us + need)
            ON CONFLICT (prefix, key) DO UPDATE
                SET kinds = 'g',
                    state = ARRAY[greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, now_us) + need,
                                  CASE WHEN s.kinds = 'g' THEN s.state[2] ELSE 0 END, 0],
                    full_at = greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, now_us) + need
                WHERE greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, now_us) + need - now_us <= tau
            RETURNING s.state[1] INTO tat;
        IF FOUND THEN
            aft := tat - now_us;
            rem := CASE WHEN aft >= tau THEN 0 ELSE (tau - aft) / t END;
            RETURN ARRAY[1, 1, rem, b, 0, aft]::bigint[];
        END IF;
    END IF;
    LOOP
        IF op = 'p' THEN
            SELECT s.kinds, s.state INTO old_kinds, st FROM ratomic_v1_state s WHERE s.prefix = pfx AND s.key = k;
        ELSE
            SELECT s.kinds, s.state INTO old_kinds, st FROM ratomic_v1_state s
                WHERE s.prefix = pfx AND s.key = k FOR UPDATE;
        END IF;
        had_row := FOUND;
        IF NOT had_row OR old_kinds IS DISTINCT FROM kinds OR cardinality(st) <> 3 * n THEN
            st := array_fill(0::bigint, ARRAY[3 * n]);
        END IF;
        now_us := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        nst := st;
        reply := ARRAY[1::bigint];
        zero_rem := '{}'; zero_rst := '{}';
        ok_all := true;
        write := false;
        changed := 0;
        full_us := 0;
        FOR i IN 1..n LOOP
            kind := substr(kinds, i, 1);
            j := 3 * (i - 1);
            IF kind = 'g' THEN
                t := p1[i]; b := p2[i];
                tau := b * t;
                tat := greatest(st[j + 1], now_us);
                d := tat - now_us;
                IF op = 'r' THEN
                    IF d > 0 AND amount > 0 THEN
                        IF amount >= (d + t - 1) / t THEN aft := now_us; ELSE aft := tat - amount * t; END IF;
                        -- Never below the lease fence: slots a lease holds
                        -- are not handed out again.
                        aft := greatest(aft, st[j + 2]);
                        IF aft < tat THEN
                            nst[j + 1] := aft;
                            changed := changed + 1;
                            d := aft - now_us;
                        END IF;
                    END IF;
                    full_us := greatest(full_us, d);
                    CONTINUE;
                END IF;
                need := amount * t;
                slack := tau - need;
                rem0 := CASE WHEN d >= tau THEN 0 ELSE (tau - d) / t END;
                rst0 := d;
                IF d > slack THEN
                    ok := false; rem := rem0; retry := d - slack; rst := d;
                ELSE
                    aft := d + need;
                    ok := true; rem := CASE WHEN aft >= tau THEN 0 ELSE (tau - aft) / t END; retry := 0; rst := aft;
                    IF need <> 0 THEN nst[j + 1] := tat + need; END IF;
                END IF;
            ELSE
                w := p1[i]; l := p2[i];
                sidx := st[j + 1];
                IF kind = 'f' THEN prev := 0; cur := st[j + 2]; ELSE prev := st[j + 2]; cur := st[j + 3]; END IF;
                idx := now_us / w; off := now_us % w; gap := 0;
                IF sidx = idx THEN
                    NULL;
                ELSIF sidx > idx THEN
                    idx := sidx; gap := sidx * w - now_us; off := 0;
                ELSIF sidx + 1 = idx THEN
                    prev := cur; cur := 0;
                ELSE
                    prev := 0; cur := 0;
                END IF;
                IF kind = 'f' THEN prev := 0; END IF;
                to_end := gap + w - off;
                carry := CASE WHEN prev = 0 THEN 0 ELSE (prev * (w - off) + w - 1) / w END;
                IF op = 'r' THEN
                    IF cur > 0 AND amount > 0 THEN
                        back := least(amount, cur);
                        cur := cur - back;
                        nst[j + 1] := idx;
                        IF kind = 'f' THEN nst[j + 2] := cur; ELSE nst[j + 2] := prev; nst[j + 3] := cur; END IF;
                        changed := changed + 1;
                    END IF;
                    full_us := greatest(full_us, CASE
                        WHEN cur > 0 AND kind = 's' THEN to_end + w
                        WHEN cur > 0 THEN to_end
                        WHEN prev > 0 THEN to_end
                        ELSE 0 END);
                    CONTINUE;
                END IF;
                aft := cur + amount;
                rem0 := greatest(0, l - cur - carry);
                rst0 := CASE WHEN cur > 0 AND kind = 's' THEN to_end + w WHEN cur > 0 THEN to_end
                             WHEN prev > 0 THEN to_end ELSE 0 END;
                IF aft + carry <= l THEN
                    ok := true; rem := l - aft - carry; retry := 0;
                    rst := CASE WHEN aft > 0 AND kind = 's' THEN to_end + w WHEN aft > 0 THEN to_end
                                WHEN prev > 0 THEN to_end ELSE 0 END;
                    IF amount > 0 THEN
                        nst[j + 1] := idx;
                        IF kind = 'f' THEN nst[j + 2] := aft; ELSE nst[j + 2] := prev; nst[j + 3] := aft; END IF;
                    END IF;
                ELSIF kind = 'f' THEN
                    ok := false; rem := l - cur; retry := to_end; rst := to_end;
                ELSE
                    ok := false; rem := rem0; rst := rst0;
                    IF cur + amount <= l THEN
                        fit := ((l - cur - amount) * w) / prev;
                        retry := gap + (w - fit) - off;
                    ELSE
                        fit := ((l - amount) * w) / cur;
                        retry := to_end + (w - fit);
                    END IF;
                END IF;
            END IF;
            ok_all := ok_all AND ok;
            reply := reply || ARRAY[CASE WHEN ok THEN 1 ELSE 0 END, rem, p2[i], retry, rst]::bigint[];
            zero_rem := zero_rem || rem0;
            zero_rst := zero_rst || rst0;
            full_us := greatest(full_us, rst);
        END LOOP;
        IF op = 'r' THEN
            IF changed = 0 THEN RETURN ARRAY[0::bigint]; END IF;
            reply := ARRAY[changed::bigint];
            write := true;
        ELSIF NOT ok_all THEN
            -- Nothing is charged: a limit that would have allowed the call
            -- answers for its state as it stands (cost 0), still allowed.
            reply[1] := 0;
            FOR i IN 1..n LOOP
                IF reply[5 * (i - 1) + 2] = 1 THEN
                    reply[5 * (i - 1) + 3] := zero_rem[i];
                    reply[5 * (i - 1) + 5] := 0;
                    reply[5 * (i - 1) + 6] := zero_rst[i];
                END IF;
            END LOOP;
            RETURN reply;
        ELSE
            write := op = 'a' AND amount > 0;
        END IF;
        IF NOT write THEN RETURN reply; END IF;
        -- Full from now + the longest wait until full, but never before the
        -- start of a stored window: a call stamped before it counts in it
        -- (its waits run to that window's end), which a removed row would
        -- not do.
        full_us := now_us + full_us;
        FOR i IN 1..n LOOP
            IF substr(kinds, i, 1) <> 'g' THEN
                full_us := greatest(full_us, nst[3 * (i - 1) + 1] * p1[i]);
            END IF;
        END LOOP;
        IF had_row THEN
            UPDATE ratomic_v1_state s SET kinds = ratomic_v1_call.kinds, state = nst, full_at = full_us
                WHERE s.prefix = pfx AND s.key = k;
            RETURN reply;
        END IF;
        INSERT INTO ratomic_v1_state AS s (prefix, key, kinds, state, full_at)
            VALUES (pfx, k, ratomic_v1_call.kinds, nst, full_us)
            ON CONFLICT (prefix, key) DO NOTHING;
        IF FOUND THEN RETURN reply; END IF;
        -- Another call created the row meanwhile: decide again on it.
    END LOOP;
END
$fn$;

-- Leases: ratomic's core/src/backend/lease.rs has the exactness argument;
-- these are the Redis script's 'l' and 'g' operations, the same rules, so
-- the same proof holds. A token bucket's TAT is the end of the emission
-- slots (T µs a token) granted so far. A lease of k tokens is the next k
-- slots after the call's own, [end − k·T, end): the TAT moves to `end`, so
-- no one else is granted them, and `end` is kept as the limit's fence
-- (state word 2): a refund or a reset never moves the TAT below it. A
-- give-back moves the TAT back to the first unused slot only while the
-- TAT and the fence are still that lease's end (nothing granted since).
--
-- Both functions read and write a bucket's TAT and fence only between the
-- "TAT access" markers: a change of where the TAT lives is an edit there.

-- Allow `amount` and lease up to `size` more tokens of every limit (the
-- same number of each; every limit a token bucket): at most half of what
-- the tightest limit has left after the call, so that a bucket near empty
-- is not leased out. Reply: as ratomic_v1_call's allow, then [tokens
-- leased, the server's now (µs, read once the row is locked), then per
-- limit the lease's end]. A denial writes nothing and leases nothing.
CREATE OR REPLACE FUNCTION ratomic_v1_lease(
    pfx text, k bytea, at_us bigint, amount bigint, size bigint, kinds text, p1 bigint[], p2 bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
    n       int := length(kinds);
    now_us  bigint;
    old_kinds text;
    st      bigint[];
    had_row boolean;
    tats    bigint[];
    fences  bigint[];
    ends    bigint[];
    rem0    bigint[];
    rst0    bigint[];
    reply   bigint[];
    ok_all  boolean;
    take    bigint;
    full_us bigint;
    i int;
    t bigint; b bigint; tau bigint; tat bigint; d bigint; need bigint; aft bigint; spare bigint;
BEGIN
    -- Durable commits (see the note at the top): raised from off for this
    -- transaction only, never lowered.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    IF kinds IS NULL OR pfx IS NULL OR k IS NULL OR amount IS NULL OR amount < 0 OR size IS NULL OR size < 0 OR n = 0
       OR kinds IS DISTINCT FROM repeat('g', n) OR cardinality(p1) <> n OR cardinality(p2) <> n THEN
        RAISE EXCEPTION 'ratomic_v1_lease: bad arguments (amount %, size %, kinds %): only token buckets lease',
            amount, size, kinds USING ERRCODE = '22023';
    END IF;
    LOOP
        -- ==== TAT access (read): each limit's TAT and fence, 0 for none.
        SELECT s.kinds, s.state INTO old_kinds, st FROM ratomic_v1_state s
            WHERE s.prefix = pfx AND s.key = k FOR UPDATE;
        had_row := FOUND;
        tats := array_fill(0::bigint, ARRAY[n]);
        fences := array_fill(0::bigint, ARRAY[n]);
        IF had_row AND old_kinds = kinds AND cardinality(st) = 3 * n THEN
            FOR i IN 1..n LOOP
                tats[i] := st[3 * i - 2];
                fences[i] := st[3 * i - 1];
            END LOOP;
        END IF;
        -- ==== end of TAT access (read)
        now_us := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        reply := ARRAY[1::bigint];
        ok_all := true;
        take := size;
        ends := '{}'; rem0 := '{}'; rst0 := '{}';
        FOR i IN 1..n LOOP
            t := p1[i]; b := p2[i]; tau := b * t;
            tat := greatest(tats[i], now_us);
            d := tat - now_us;
            need := amount * t;
            rem0 := rem0 || CASE WHEN d >= tau THEN 0 ELSE (tau - d) / t END;
            rst0 := rst0 || d;
            IF d > tau - need THEN
                ok_all := false;
                reply := reply || ARRAY[0, rem0[i], b, d - (tau - need), d]::bigint[];
            ELSE
                aft := d + need;
                reply := reply || ARRAY[1, CASE WHEN aft >= tau THEN 0 ELSE (tau - aft) / t END, b, 0, aft]::bigint[];
                -- At most half of what this limit has left after the call.
                spare := tau - aft;
                take := least(take, (spare / t) / 2);
            END IF;
            ends := ends || (tat + need);
        END LOOP;
        IF NOT ok_all THEN
            -- Nothing is charged: a limit that would have allowed the call
            -- answers for its state as it stands (cost 0), still allowed.
            reply[1] := 0;
            FOR i IN 1..n LOOP
                IF reply[5 * i - 3] = 1 THEN
                    reply[5 * i - 2] := rem0[i];
                    reply[5 * i] := 0;
                    reply[5 * i + 1] := rst0[i];
                END IF;
            END LOOP;
            RETURN reply || ARRAY[0, now_us]::bigint[] || array_fill(0::bigint, ARRAY[n]);
        END IF;
        take := greatest(take, 0);
        full_us := now_us;
        FOR i IN 1..n LOOP
            ends[i] := ends[i] + take * p1[i];
            full_us := greatest(full_us, ends[i]);
            tats[i] := ends[i];
            IF take > 0 THEN fences[i] := ends[i]; END IF;
        END LOOP;
        reply := reply || ARRAY[take, now_us]::bigint[] || ends;
        IF amount = 0 AND take = 0 THEN RETURN reply; END IF;
        -- ==== TAT access (write): tats and fences back into the row.
        st := array_fill(0::bigint, ARRAY[3 * n]);
        FOR i IN 1..n LOOP
            st[3 * i - 2] := tats[i];
            st[3 * i - 1] := fences[i];
        END LOOP;
        IF had_row THEN
            UPDATE ratomic_v1_state s SET kinds = ratomic_v1_lease.kinds, state = st, full_at = full_us
                WHERE s.prefix = pfx AND s.key = k;
            RETURN reply;
        END IF;
        INSERT INTO ratomic_v1_state AS s (prefix, key, kinds, state, full_at)
            VALUES (pfx, k, ratomic_v1_lease.kinds, st, full_us)
            ON CONFLICT (prefix, key) DO NOTHING;
        IF FOUND THEN RETURN reply; END IF;
        -- ==== end of TAT access (write)
        -- Another call created the row meanwhile: decide again on it.
    END LOOP;
END
$fn$;

-- Gives a lease's unused slots back: per limit, the lease's end and the
-- first slot its holder did not grant. Only while a limit's TAT and fence
-- are still that end (nothing granted on it since) does the TAT go back,
-- to that slot (or now, if later). at_us: the caller's time, or NULL for
-- the server's. Reply: [limits given back].
CREATE OR REPLACE FUNCTION ratomic_v1_give_back(
    pfx text, k bytea, at_us bigint, kinds text, ends bigint[], used bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
    n       int := length(kinds);
    now_us  bigint;
    old_kinds text;
    st      bigint[];
    tats    bigint[];
    fences  bigint[];
    back    bigint := 0;
    full_us bigint;
    i int;
    nw bigint;
BEGIN
    IF kinds IS NULL OR pfx IS NULL OR k IS NULL OR n = 0 OR kinds IS DISTINCT FROM repeat('g', n)
       OR cardinality(ends) IS DISTINCT FROM n OR cardinality(used) IS DISTINCT FROM n THEN
        RAISE EXCEPTION 'ratomic_v1_give_back: bad arguments (kinds %): an end and a used slot per limit', kinds
            USING ERRCODE = '22023';
    END IF;
    -- ==== TAT access (read)
    SELECT s.kinds, s.state INTO old_kinds, st FROM ratomic_v1_state s
        WHERE s.prefix = pfx AND s.key = k FOR UPDATE;
    IF NOT FOUND OR old_kinds <> kinds OR cardinality(st) <> 3 * n THEN RETURN ARRAY[0::bigint]; END IF;
    tats := array_fill(0::bigint, ARRAY[n]);
    fences := array_fill(0::bigint, ARRAY[n]);
    FOR i IN 1..n LOOP
        tats[i] := st[3 * i - 2];
        fences[i] := st[3 * i - 1];
    END LOOP;
    -- ==== end of TAT access (read)
    now_us := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    full_us := 0;
    FOR i IN 1..n LOOP
        IF tats[i] = ends[i] AND fences[i] = ends[i] THEN
            nw := greatest(used[i], now_us);
            IF nw < tats[i] THEN
                tats[i] := nw;
                fences[i] := nw;
                back := back + 1;
            END IF;
        END IF;
        full_us := greatest(full_us, tats[i]);
    END LOOP;
    IF back = 0 THEN RETURN ARRAY[0::bigint]; END IF;
    -- ==== TAT access (write)
    FOR i IN 1..n LOOP
        st[3 * i - 2] := tats[i];
        st[3 * i - 1] := fences[i];
    END LOOP;
    UPDATE ratomic_v1_state s SET state = st, full_at = full_us WHERE s.prefix = pfx AND s.key = k;
    -- ==== end of TAT access (write)
    RETURN ARRAY[back];
END
$fn$;

-- allow_many in one statement: the requests decided in key order (so that
-- two batches never wait for each other's rows in a cycle), each as it
-- would be alone at one clock reading, the replies in request order and
-- concatenated (1 + 5n integers each).
CREATE OR REPLACE FUNCTION ratomic_v1_many(
    op text, pfx text, ks bytea[], amounts bigint[], at_us bigint, kinds text, p1 bigint[], p2 bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
    m int := cardinality(ks);
    size int := 1 + 5 * length(kinds);
    now_us bigint := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    res bigint[] := array_fill(0::bigint, ARRAY[m * size]);
    r bigint[];
    i bigint;
BEGIN
    IF cardinality(amounts) IS DISTINCT FROM m THEN
        RAISE EXCEPTION 'ratomic_v1_many: % keys but % amounts', m, cardinality(amounts) USING ERRCODE = '22023';
    END IF;
    FOR i IN SELECT u.o FROM unnest(ks) WITH ORDINALITY AS u(kk, o) ORDER BY u.kk, u.o LOOP
        r := ratomic_v1_call(op, pfx, ks[i], now_us, amounts[i], kinds, p1, p2);
        res[(i - 1) * size + 1 : i * size] := r;
    END LOOP;
    RETURN res;
END
$fn$;

-- Removes up to max_rows rows of prefix pfx (NULL: every prefix) that are
-- full again at at_us (NULL: the server's time), skipping rows a call
-- holds; returns how many it removed. A removed row answers exactly as a
-- full one: no decision at that time or later changes.
CREATE OR REPLACE FUNCTION ratomic_v1_gc(pfx text, at_us bigint, max_rows int) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    now_us bigint := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    removed bigint;
BEGIN
    DELETE FROM ratomic_v1_state WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM ratomic_v1_state
        WHERE full_at <= now_us AND (pfx IS NULL OR prefix = pfx)
        LIMIT max_rows FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END
$fn$;
