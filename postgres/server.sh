# Sourced by the test scripts that need a real PostgreSQL (postgres/run-tests.sh,
# ffi-c/run-tests.sh): installs it with apt when initdb is missing, creates a
# throwaway cluster in a temp dir on a free loopback port as an unprivileged
# user (initdb refuses root), and removes everything it made. The caller calls
# pg_stop_all in its EXIT trap.
#
#   pg_install; port=$(pg_free_port); pg_start "$port"   # then $PG_URL

# shellcheck source=scripts/free-port.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/free-port.sh"

pg_clusters=()
pg_work=$(mktemp -d)
pg_bin=""
pg_user=""

pg_install() {
    local dir
    if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        echo "== installing postgresql (apt)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq postgresql >/dev/null
    fi
    if command -v initdb >/dev/null; then
        pg_bin=$(dirname "$(readlink -f "$(command -v initdb)")")
    else
        for dir in /usr/lib/postgresql/*/bin; do pg_bin=$dir; done
    fi
    # initdb and postgres refuse to run as root: the cluster belongs to an
    # unprivileged user (postgres if it exists, else one made for this).
    if [[ $(id -u) -eq 0 ]]; then
        if id postgres >/dev/null 2>&1; then
            pg_user=postgres
        else
            id ratomic-pg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin ratomic-pg
            pg_user=ratomic-pg
        fi
        chmod 755 "$pg_work"
    fi
}

# Runs a command as the cluster's owner.
pg_as() {
    if [[ -n $pg_user ]]; then runuser -u "$pg_user" -- "$@"; else "$@"; fi
}

# A free loopback port below the ephemeral range (scripts/free-port.sh).
pg_free_port() {
    loopback_free_port
}

# Starts a cluster on 127.0.0.1:$1 (trust authentication on loopback only,
# no fsync: a test cluster) and sets PG_URL to its database "postgres".
# PG_SYNCHRONOUS_COMMIT sets the server's synchronous_commit (default off;
# PostgreSQL's own default is on).
pg_start() { # port
    local port=$1 dir="$pg_work/$1"
    mkdir -p "$dir"
    [[ -z $pg_user ]] || chown "$pg_user" "$dir"
    pg_as "$pg_bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; return 1; }
    pg_as "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
        -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c fsync=off \
            -c synchronous_commit=${PG_SYNCHRONOUS_COMMIT:-off} -c full_page_writes=off -c max_connections=200" start >/dev/null ||
        { cat "$dir/log" >&2; return 1; }
    pg_clusters+=("$dir")
    PG_URL="postgresql://postgres@127.0.0.1:$port/postgres"
    export PG_URL
}

pg_stop_all() {
    local dir
    for dir in "${pg_clusters[@]}"; do
        pg_as "$pg_bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    done
    rm -rf "$pg_work"
}
