# Sourced by the test scripts that need a real redis-server (redis/run-tests.sh,
# ffi-c/run-tests.sh): installs it with apt when missing, finds free loopback
# ports, starts servers without persistence, and stops what it started.
# The caller calls redis_stop_all in its EXIT trap.

# shellcheck source=scripts/free-port.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/free-port.sh"

redis_pids=()
redis_work=$(mktemp -d)

redis_install() {
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        echo "== installing redis-server (apt)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq redis-server >/dev/null
    fi
}

# A free loopback port below the ephemeral range (scripts/free-port.sh).
free_port() {
    loopback_free_port
}

start_redis() { # port [extra args…]
    local port=$1
    shift
    mkdir -p "$redis_work/$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$redis_work/$port" \
        --daemonize no --loglevel warning "$@" >"$redis_work/$port/log" 2>&1 &
    redis_pids+=($!)
    for _ in $(seq 1 500); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then return; fi
        sleep 0.01
    done
    echo "redis-server on port $port did not start:" >&2
    cat "$redis_work/$port/log" >&2
    return 1
}

redis_stop_all() {
    for pid in "${redis_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${redis_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$redis_work"
}
