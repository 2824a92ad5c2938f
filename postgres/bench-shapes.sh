#!/usr/bin/env bash
# The server's cost of the common call (one token bucket, allow, the server's
# clock), statement by statement: one pgbench run on one connection, one hot
# key, that picks a script at random for each transaction, so that every
# shape is measured through the same seconds of this shared machine; each
# shape's mean latency ÷ the hand-written GCRA's ("raw", the statement
# postgres/examples/pg_bench_vs_raw.rs compares with; it answers
# allowed-or-not only). Shapes: "allow", today's upsert (schema::ALLOW, printed
# by the pg_shapes example), "call", the same call through ratomic_v1_call
# (PL/pgSQL), and any file given as SHAPE=path.sql (pgbench variables :prefix
# :key :zero :cost :inc :tau :t :burst). The server runs synchronous_commit=off
# unless PG_SYNCHRONOUS_COMMIT says otherwise (PostgreSQL's default is on).
#   bash postgres/bench-shapes.sh [runs] [seconds] [NAME=file.sql ...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source postgres/server.sh
work=$(mktemp -d)
trap 'pg_stop_all; rm -rf "$work"' EXIT
runs=${1:-3} seconds=${2:-10}
shift $(($# < 2 ? $# : 2))
cargo build -q --release -p ratomic-postgres --example pg_shapes
for s in allow call; do target/release/examples/pg_shapes "$s" >"$work/$s.sql"; done
cat >"$work/raw.sql" <<'SQL'
WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
    INSERT INTO raw_gcra AS r (key, tat) SELECT :rkey, t.now + :t FROM t
    ON CONFLICT (key) DO UPDATE SET tat = greatest(r.tat, excluded.tat - :t) + :t
        WHERE greatest(r.tat, excluded.tat - :t) + :t - (excluded.tat - :t) <= :tau
    RETURNING tat;
SQL
names=(allow call)
for extra in "$@"; do
  names+=("${extra%%=*}")
  cp "${extra#*=}" "$work/${extra%%=*}.sql"
done
pg_install
pg_start "$(pg_free_port)"
"$pg_bin/psql" "$PG_URL" -q -f postgres/sql/ratomic.sql >/dev/null
"$pg_bin/psql" "$PG_URL" -q -c "CREATE TABLE raw_gcra (key text PRIMARY KEY, tat bigint NOT NULL);"
scripts=(-f "$work/raw.sql@1")
for n in "${names[@]}"; do scripts+=(-f "$work/$n.sql@1"); done
echo "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}'), synchronous_commit=${PG_SYNCHRONOUS_COMMIT:-off}; mean latency ÷ raw's"
for run in $(seq 1 "$runs"); do
  # T = 10 µs, burst 100,000 (τ = 1 s): never denies at one connection's pace.
  "$pg_bin/pgbench" "$PG_URL" -n -M prepared -c 1 -T "$seconds" -D prefix=bench -D 'key=\x01' -D rkey=k \
    -D zero=0 -D cost=1 -D inc=10 -D tau=1000000 -D t=10 -D burst=100000 "${scripts[@]}" |
    awk -v names="raw ${names[*]}" -v run="$run" '
      BEGIN { n = split(names, nm, " ") }
      /^SQL script/ { s++ }
      /^ - latency average/ { lat[s] = $(NF-1) }
      END {
        line = sprintf("run %d: raw %.0f µs", run, lat[1] * 1000)
        for (i = 2; i <= n; i++) line = line sprintf(", %s %.2f", nm[i], lat[i] / lat[1])
        print line
      }'
done
