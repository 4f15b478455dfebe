#!/usr/bin/env bash
# How long `xlat run` takes to set up and tear down its routes for many static entries
# (tun.auto_routes), and how fast it honours SIGTERM in the middle of the set-up.
#
#   sudo scripts/route-setup-time.sh [XLAT_BINARY] [ENTRIES]
#
# In a network namespace of its own (removed at exit): an outside veth on 198.19.0.0/16, so
# every static outside address is on a connected subnet and gets a proxy-ARP entry, and
# static inside addresses outside the `inside` prefix, so each gets its own policy rule --
# the most routing work per entry: one rule, two routes (and the fail-closed twin), one
# proxy-ARP entry. Prints the times of: start -> "routes set up" logged, SIGTERM -> exit,
# and SIGTERM 0.2 s after start -> exit, with what routing was left behind (nothing).
set -euo pipefail

XLAT=${1:-target/release/xlat}
N=${2:-2000}
NS="xlat-rtime-$$"
DIR=$(mktemp -d)
cleanup() {
    [[ -n ${PID:-} ]] && kill -KILL "$PID" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

ip netns add "$NS"
ip -n "$NS" link set lo up
ip -n "$NS" link add rto0 type veth peer name rto1
ip -n "$NS" addr add 198.19.0.1/16 dev rto0
ip -n "$NS" link set rto0 up
ip -n "$NS" link set rto1 up

{
    printf '[tun]\nname = "xrt0"\nauto_routes = true\n'
    printf '[nat44]\ninside = ["198.18.0.0/24"]\npool = ["198.19.255.0/30"]\nmode = "napt"\nstatic = [\n'
    for ((i = 0; i < N; i++)); do
        printf '  { inside = "198.18.%d.%d", outside = "198.19.%d.%d" },\n' \
            $((i / 250 + 1)) $((i % 250 + 1)) $((i / 250 + 1)) $((i % 250 + 1))
    done
    printf ']\n[control]\nsocket = "%s/xlat.sock"\n' "$DIR"
} >"$DIR/xlat.toml"

now() { date +%s.%N; }
wait_log() { # PATTERN: until the log has it (at most 120 s)
    touch "$DIR/log"
    for ((k = 0; k < 12000; k++)); do
        grep -q "$1" "$DIR/log" && return 0
        sleep 0.01
    done
    echo "timed out waiting for '$1'" >&2
    cat "$DIR/log" >&2
    return 1
}
wait_exit() { # until $PID is gone (at most 120 s)
    for ((k = 0; k < 12000; k++)); do
        kill -0 "$PID" 2>/dev/null || return 0
        sleep 0.01
    done
    echo "xlat did not exit" >&2
    return 1
}
routes() { # xlat's routes in main (not the kernel's connected route of rto0)
    ip -n "$NS" -4 route show | grep '198.19' | grep -vc 'proto kernel'
}
leftovers() {
    echo "  left behind: $(ip -n "$NS" -4 rule show | grep -c 'lookup 4400') rules," \
        "$(routes) main-table routes," \
        "$(ip -n "$NS" neigh show proxy | wc -l) proxy-ARP entries"
}

echo "xlat: $XLAT, $N static entries"
t0=$(now)
ip netns exec "$NS" "$XLAT" run -c "$DIR/xlat.toml" >"$DIR/log" 2>&1 &
PID=$!
wait_log "routes set up"
t1=$(now)
echo "  set-up: start -> routes set up: $(echo "$t1 - $t0" | bc) s"
echo "  routing: $(ip -n "$NS" -4 rule show | grep -c 'lookup 4400') rules," \
    "$(routes) main-table routes," \
    "$(ip -n "$NS" neigh show proxy | wc -l) proxy-ARP entries"
sleep 0.5
t2=$(now)
kill -TERM "$PID"
wait_exit
t3=$(now)
PID=
echo "  teardown: SIGTERM -> exit: $(echo "$t3 - $t2" | bc) s"
leftovers

: >"$DIR/log"
ip netns exec "$NS" "$XLAT" run -c "$DIR/xlat.toml" >"$DIR/log" 2>&1 &
PID=$!
sleep 0.2
t4=$(now)
kill -TERM "$PID"
wait_exit
t5=$(now)
PID=
echo "  SIGTERM 0.2 s into the start -> exit: $(echo "$t5 - $t4" | bc) s"
leftovers
