#!/usr/bin/env bash
# ratomic-postgres against a real PostgreSQL: installs it with apt when initdb
# is missing, creates a throwaway cluster in a temp dir on a free loopback
# port (as an unprivileged user: initdb refuses root), runs the crate's server
# tests (parity, concurrency, batches, gc, faults) and removes the cluster.
# Fault tests start and stop clusters of their own the same way. Nothing
# listens beyond 127.0.0.1.
#
#   bash postgres/run-tests.sh            # everything
#   bash postgres/run-tests.sh parity     # only tests whose name matches
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

# shellcheck source=postgres/server.sh
source "$here/server.sh"
trap pg_stop_all EXIT
pg_install
"$pg_bin/postgres" --version

port=$(pg_free_port)
pg_start "$port"
export RATOMIC_POSTGRES_URL=$PG_URL
# For the tests that run clusters of their own.
export RATOMIC_PG_BIN=$pg_bin RATOMIC_PG_USER=$pg_user
echo "== postgres on $RATOMIC_POSTGRES_URL"

cargo test -p ratomic-postgres --features server-tests --test server -- "$@"
