#!/usr/bin/env bash
# Server-side cost of statement shapes for the common call (one token bucket,
# allow, server clock), pgbench -M prepared on one connection, one hot key,
# interleaved rounds: today's PL/pgSQL ratomic_v1_call ("fn"), its fast-path
# upsert as one plain SQL statement on the same table ("plain"), the same on a
# table with bigint columns instead of the state array ("cols"), and the
# hand-written GCRA that postgres/examples/pg_bench_vs_raw.rs compares with
# ("raw", which answers allowed-or-not only). Prints each shape / raw per round.
#   bash postgres/bench-shapes.sh [rounds] [seconds]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source postgres/server.sh
work=$(mktemp -d)
trap 'pg_stop_all; rm -rf "$work"' EXIT
pg_install
pg_start "$(pg_free_port)"
psql() { "$pg_bin/psql" "$PG_URL" -q "$@"; }
psql -f postgres/sql/ratomic.sql >/dev/null
psql -c "CREATE TABLE raw_gcra (key text PRIMARY KEY, tat bigint NOT NULL);"
psql -c "CREATE TABLE cols (prefix text NOT NULL, key bytea NOT NULL, tat bigint NOT NULL, fence bigint NOT NULL, full_at bigint NOT NULL, PRIMARY KEY (prefix, key)) WITH (fillfactor = 80);"
cat > $work/cols.sql <<'SQL'
WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
INSERT INTO cols AS s (prefix, key, tat, fence, full_at)
  SELECT 'bench3', '\x01'::bytea, t.now + 10, 0, t.now + 10 FROM t
  ON CONFLICT (prefix, key) DO UPDATE
    SET tat = greatest(s.tat, excluded.tat - 10) + 10, full_at = greatest(s.tat, excluded.tat - 10) + 10
    WHERE greatest(s.tat, excluded.tat - 10) + 10 - (excluded.tat - 10) <= 1000000
  RETURNING (SELECT ARRAY[1, 1, CASE WHEN s.tat - t.now >= 1000000 THEN 0 ELSE (1000000 - (s.tat - t.now)) / 10 END, 100000, 0, s.tat - t.now]::bigint[] FROM t);
SQL
# (b) the fast path as a plain SQL statement on the same table, full reply on an allow
cat > $work/fn.sql <<'SQL'
SELECT ratomic_v1_call('a', 'bench', '\x01'::bytea, NULL, 1, 'g', '{10}', '{100000}');
SQL
cat > $work/plain.sql <<'SQL'
WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
INSERT INTO ratomic_v1_state AS s (prefix, key, kinds, state, full_at)
  SELECT 'bench2', '\x01'::bytea, 'g', ARRAY[t.now + 10, 0, 0]::bigint[], t.now + 10 FROM t
  ON CONFLICT (prefix, key) DO UPDATE
    SET kinds = 'g',
        state = ARRAY[greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, excluded.full_at - 10) + 10,
                      CASE WHEN s.kinds = 'g' THEN s.state[2] ELSE 0 END, 0],
        full_at = greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, excluded.full_at - 10) + 10
    WHERE greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, excluded.full_at - 10) + 10 - (excluded.full_at - 10) <= 1000000
  RETURNING (SELECT ARRAY[1, 1, CASE WHEN s.state[1] - t.now >= 1000000 THEN 0 ELSE (1000000 - (s.state[1] - t.now)) / 10 END, 100000, 0, s.state[1] - t.now]::bigint[] FROM t);
SQL
cat > $work/raw.sql <<'SQL'
WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
    INSERT INTO raw_gcra AS r (key, tat) SELECT 'k', t.now + 10 FROM t
    ON CONFLICT (key) DO UPDATE SET tat = greatest(r.tat, excluded.tat - 10) + 10
        WHERE greatest(r.tat, excluded.tat - 10) + 10 - (excluded.tat - 10) <= 1000000
    RETURNING tat;
SQL
declare -A tps
ratio() { awk -v a="${tps[$1]}" -v b="${tps[raw]}" 'BEGIN { printf "%.2f", a / b }'; }
for round in $(seq 1 "${1:-6}"); do
  for f in fn plain cols raw; do
    tps[$f]=$("$pg_bin/pgbench" "$PG_URL" -n -M prepared -c 1 -T "${2:-2}" -f "$work/$f.sql" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  done
  echo "round $round: raw ${tps[raw]} tps; fn $(ratio fn) plain $(ratio plain) cols $(ratio cols) of raw"
done
