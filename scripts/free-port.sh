# Sourced by redis/server.sh and postgres/server.sh: loopback_free_port prints
# a 127.0.0.1 port nothing listens on (bash's /dev/tcp connects or fails at
# once), chosen below the kernel's ephemeral range: a port in that range can
# be taken as the local end of any outgoing connection (a test client's)
# between this check and the server's bind, which then fails with "Address
# already in use" (seen once in CI).
loopback_free_port() {
    local low=32768 high port span
    read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    span=$((low - 10000))
    for _ in $(seq 1 200); do
        if ((span >= 1000)); then
            port=$((10000 + RANDOM % span))
        else
            # An unusual ephemeral range starting below 11,000: above it.
            port=$(( ${high:-60999} + 1 + RANDOM % (65535 - ${high:-60999}) ))
        fi
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
    done
    echo "no free port found" >&2
    return 1
}
