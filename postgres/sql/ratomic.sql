-- ratomic-postgres, schema version 1: one table and three functions.
-- The library runs this (in one transaction, under an advisory lock) when a
-- limiter connects, unless told not to; `ratomic_postgres::schema::sql()`
-- prints it for a DBA to run instead. Safe to run again.
--
-- Every time is whole microseconds in bigint; nothing is floating point
-- but the one reading of clock_timestamp(). The arithmetic is the in-memory
-- engine's (GCRA, fixed and sliding windows, several limits all or
-- nothing), and the parity tests hold it to that engine on explicit times.

CREATE /*UNLOGGED*/ TABLE IF NOT EXISTS ratomic_v1_state (
    prefix  text   NOT NULL,
    key     bytea  NOT NULL,
    -- One letter per limit ('g' token bucket, 'f' fixed, 's' sliding
    -- window): state written under other rules is not read as these.
    kinds   text   NOT NULL,
    -- Three words per limit: GCRA [tat, 0, 0]; fixed [index, count, 0];
    -- sliding [index, previous count, current count]. Zeros: a full key.
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
-- [limits changed]; reset [1].
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
    IF op IS NULL OR op NOT IN ('a', 'p', 'r', 'x') OR pfx IS NULL OR k IS NULL OR amount IS NULL OR amount < 0
       OR n = 0 OR cardinality(p1) <> n OR cardinality(p2) <> n THEN
        RAISE EXCEPTION 'ratomic_v1_call: bad arguments (op %, amount %, kinds %)', op, amount, kinds
            USING ERRCODE = '22023';
    END IF;
    IF op = 'x' THEN
        DELETE FROM ratomic_v1_state s WHERE s.prefix = pfx AND s.key = k;
        RETURN ARRAY[1::bigint];
    END IF;
    -- The common call: one token bucket, allow. One upsert that charges
    -- only if the bucket allows (its ON CONFLICT locks the row either way);
    -- the same equations and reply as the general path below. A denial
    -- (nothing written) is answered by the general path.
    IF n = 1 AND op = 'a' AND amount > 0 AND kinds = 'g' THEN
        t := p1[1]; b := p2[1];
        tau := b * t;
        need := amount * t;
        now_us := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        INSERT INTO ratomic_v1_state AS s (prefix, key, kinds, state, full_at)
            VALUES (pfx, k, 'g', ARRAY[now_us + need, 0, 0]::bigint[], now_us + need)
            ON CONFLICT (prefix, key) DO UPDATE
                SET kinds = 'g',
                    state = ARRAY[greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, now_us) + need, 0, 0],
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
                        nst[j + 1] := aft;
                        changed := changed + 1;
                        d := aft - now_us;
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
