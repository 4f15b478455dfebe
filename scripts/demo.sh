#!/usr/bin/env bash
# xlat demo: builds xlat, builds a three-namespace testbed and measures traffic through the
# gateway with three devices in turn:
#   forward     plain kernel forwarding, no NAT (OUT gets a route back to the inside)
#   kernel-nat  Linux NAT44: nftables masquerade in GW
#   xlat        xlat NAPT (userspace, TUN)
# and prints a comparison table: ping RTT, TCP throughput, 64-byte UDP loss at a fixed rate.
#
#   IN 198.18.0.20/24 -- [198.18.0.1 GW 198.19.0.1] -- OUT 198.19.0.2/24
#
# Usage: sudo bash scripts/demo.sh
# Environment: SECONDS_PER_TEST (5), PPS (50000), PINGS (20), XLAT_DEMO_KEEP=1 keeps the
# work directory (configs, logs, iperf3 JSON).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need_root "scripts/demo.sh"
SECS=${SECONDS_PER_TEST:-5}
PPS=${PPS:-50000}
PINGS=${PINGS:-20}
UDP_LEN=64

ensure_pkgs
ensure_cargo
say "building xlat (release)"
cargo build --release --quiet
XLAT="$PWD/target/release/xlat"
[ -x "$XLAT" ] || die "$XLAT was not built"

P="xd$(printf %x $$)"
NS_IN="$P-in" NS_GW="$P-gw" NS_OUT="$P-out"
IN_DEV="${P}i" GW_BR="${P}br" GW_IN="${P}gi" GW_OUT="${P}go" OUT_DEV="${P}o" TUN="${P}t"
IN_ADDR=198.18.0.20 OUT_ADDR=198.19.0.2 POOL=198.19.0.100
WORK=$(mktemp -d /tmp/xlat-demo.XXXXXX)
XLAT_PID="" IPERF_PID=""

# ---- cleanup -------------------------------------------------------------------------------

stop_pid() { # pid signal: signal, wait up to 5 s, then SIGKILL
    local pid=$1 sig=${2:-TERM} i
    [ -n "$pid" ] || return 0
    kill -"$sig" "$pid" 2>/dev/null || return 0
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

teardown() {
    stop_pid "$IPERF_PID" TERM; IPERF_PID=""
    stop_pid "$XLAT_PID" TERM; XLAT_PID=""
    local ns pid
    for ns in "$NS_IN" "$NS_GW" "$NS_OUT"; do
        ip netns list 2>/dev/null | grep -qw "^$ns" || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
}

cleanup() {
    local rc=$?
    teardown
    if [ -n "${XLAT_DEMO_KEEP:-}" ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- topology ------------------------------------------------------------------------------

nsx() { local ns=$1; shift; timeout -k 2 30 ip netns exec "$ns" "$@"; }

offloads_off() { nsx "$1" ethtool -K "$2" tso off gso off gro off >/dev/null 2>&1 || true; }

build_topo() {
    teardown
    local ns
    for ns in "$NS_IN" "$NS_GW" "$NS_OUT"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
    done
    ip -n "$NS_GW" link add name "$GW_BR" type bridge
    ip -n "$NS_GW" addr add 198.18.0.1/24 dev "$GW_BR"
    ip -n "$NS_GW" link set "$GW_BR" up
    nsx "$NS_GW" sysctl -qw net.ipv4.ip_forward=1

    ip -n "$NS_GW" link add name "$GW_IN" type veth peer name "$IN_DEV" netns "$NS_IN"
    ip -n "$NS_GW" link set "$GW_IN" master "$GW_BR"
    ip -n "$NS_IN" addr add "$IN_ADDR/24" dev "$IN_DEV"
    ip -n "$NS_GW" link add name "$GW_OUT" type veth peer name "$OUT_DEV" netns "$NS_OUT"
    ip -n "$NS_GW" addr add 198.19.0.1/24 dev "$GW_OUT"
    ip -n "$NS_OUT" addr add "$OUT_ADDR/24" dev "$OUT_DEV"
    offloads_off "$NS_GW" "$GW_BR"
    offloads_off "$NS_GW" "$GW_IN"; offloads_off "$NS_IN" "$IN_DEV"
    offloads_off "$NS_GW" "$GW_OUT"; offloads_off "$NS_OUT" "$OUT_DEV"
    ip -n "$NS_GW" link set "$GW_IN" up
    ip -n "$NS_IN" link set "$IN_DEV" up
    ip -n "$NS_GW" link set "$GW_OUT" up
    ip -n "$NS_OUT" link set "$OUT_DEV" up
    ip -n "$NS_IN" route add default via 198.18.0.1
    # OUT has no route to 198.18.0.0/24: only translated traffic returns (except "forward").
}

wait_until() { # tries description command...: runs command every 0.1 s, at most tries times
    local tries=$1 what=$2 i; shift 2
    for i in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "timed out waiting for $what" >&2
    return 1
}

listening() { [ -n "$(nsx "$1" ss -Hltn "sport = :$2")" ]; }

start_xlat() {
    local cfg="$WORK/xlat.toml" sock="$WORK/xlat.sock"
    cat >"$cfg" <<EOF
[tun]
name = "$TUN"
mtu = 1500
auto_routes = true

[nat44]
inside = ["198.18.0.0/24"]
pool = ["$POOL/32"]
mode = "napt"
filtering = "address-dependent"
ports = "1024-65535"

[control]
socket = "$sock"
EOF
    "$XLAT" check -c "$cfg" >/dev/null || { echo "xlat check rejected $cfg" >&2; return 1; }
    ip netns exec "$NS_GW" "$XLAT" run -c "$cfg" >"$WORK/xlat.log" 2>&1 &
    XLAT_PID=$!
    xlat_ready() {
        kill -0 "$XLAT_PID" 2>/dev/null || return 2
        ip -n "$NS_GW" -o link show dev "$TUN" 2>/dev/null | grep -q ',UP' || return 1
        [ -n "$(ip -n "$NS_GW" -4 route show table all dev "$TUN" 2>/dev/null)" ] || return 1
        [ -S "$sock" ] && "$XLAT" show stats --json --socket "$sock" >/dev/null 2>&1
    }
    if ! wait_until 150 "xlat to start" xlat_ready; then
        echo "xlat did not start; its log:" >&2
        tail -n 30 "$WORK/xlat.log" >&2
        return 1
    fi
}

setup_device() {
    build_topo
    case $1 in
    forward)
        ip -n "$NS_OUT" route add 198.18.0.0/24 via 198.19.0.1
        ;;
    kernel-nat)
        # Several lines: nft 1.0.6 rejects some one-line rulesets.
        cat >"$WORK/masq.nft" <<EOF
table ip demo_nat {
    chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        ip saddr 198.18.0.0/24 oifname "$GW_OUT" masquerade
    }
}
EOF
        nsx "$NS_GW" nft -f "$WORK/masq.nft"
        ;;
    xlat)
        start_xlat
        ;;
    esac
}

# ---- measurements --------------------------------------------------------------------------

json_get() { # file python-expression-on-j
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

measure() { # device: sets RTT TCP LOSS UDP_PPS
    local dev=$1 out
    RTT=fail TCP=fail LOSS=fail UDP_PPS=-
    out=$(nsx "$NS_IN" ping -n -q -c "$PINGS" -i 0.2 -W 2 "$OUT_ADDR" 2>&1) || true
    RTT=$(awk -F/ '/^rtt|^round-trip/ {print $5}' <<<"$out")
    [ -n "$RTT" ] || { RTT=fail; echo "[$dev] ping: $out" >&2; }

    ip netns exec "$NS_OUT" iperf3 -s -B "$OUT_ADDR" -p 5201 >"$WORK/$dev-iperf3-server.log" 2>&1 &
    IPERF_PID=$!
    wait_until 100 "iperf3 server" listening "$NS_OUT" 5201 || return 0

    if timeout -k 2 $((SECS + 20)) ip netns exec "$NS_IN" \
        iperf3 -c "$OUT_ADDR" -p 5201 -t "$SECS" -J --connect-timeout 5000 >"$WORK/$dev-tcp.json" 2>&1; then
        TCP=$(json_get "$WORK/$dev-tcp.json" '"%.0f" % (j["end"]["sum_received"]["bits_per_second"] / 1e6)')
    else
        echo "[$dev] iperf3 TCP failed: $(head -c 300 "$WORK/$dev-tcp.json")" >&2
    fi

    # 64-byte UDP payloads at a fixed offered rate; iperf3's -b counts payload bits.
    if timeout -k 2 $((SECS + 20)) ip netns exec "$NS_IN" \
        iperf3 -c "$OUT_ADDR" -p 5201 -u -l "$UDP_LEN" -b $((PPS * UDP_LEN * 8)) -t "$SECS" -J \
        --connect-timeout 5000 >"$WORK/$dev-udp.json" 2>&1; then
        LOSS=$(json_get "$WORK/$dev-udp.json" '"%.2f" % j["end"]["sum"]["lost_percent"]')
        UDP_PPS=$(json_get "$WORK/$dev-udp.json" '"%.0f" % (j["end"]["sum"]["packets"] / j["end"]["sum"]["seconds"])')
    else
        echo "[$dev] iperf3 UDP failed: $(head -c 300 "$WORK/$dev-udp.json")" >&2
    fi
    stop_pid "$IPERF_PID" TERM
    IPERF_PID=""
}

xlat_report() {
    local sock="$WORK/xlat.sock"
    "$XLAT" show stats --json --socket "$sock" >"$WORK/xlat-stats.json" 2>/dev/null || return 0
    python3 - "$WORK/xlat-stats.json" <<'EOF' || true
import json, sys
j = json.load(open(sys.argv[1]))
ev = {e["name"]: e["value"] for e in j.get("events", [])}
dr = {e["name"]: e["value"] for e in j.get("drops", []) if e["value"]}
print("  xlat counters: packets_in=%s packets_out=%s outbound=%s inbound=%s sessions=%s"
      % (ev.get("packets_in"), ev.get("packets_out"), ev.get("outbound"), ev.get("inbound"), j.get("sessions")))
print("  xlat drops: " + (", ".join("%s=%s" % kv for kv in dr.items()) or "none"))
EOF
}

# ---- run -----------------------------------------------------------------------------------

declare -A R_RTT R_TCP R_LOSS R_PPS
FAILED=0
DEVICES=(forward kernel-nat xlat)
NOTES=()
for dev in "${DEVICES[@]}"; do
    say "device: $dev"
    if ! setup_device "$dev"; then
        R_RTT[$dev]=fail R_TCP[$dev]=fail R_LOSS[$dev]=fail R_PPS[$dev]=-
        FAILED=1
        continue
    fi
    measure "$dev"
    R_RTT[$dev]=$RTT R_TCP[$dev]=$TCP R_LOSS[$dev]=$LOSS R_PPS[$dev]=$UDP_PPS
    [[ "$RTT $TCP $LOSS" == *fail* ]] && FAILED=1
    if [ "$dev" = xlat ]; then
        NOTES+=("$(xlat_report)")
        stop_pid "$XLAT_PID" TERM
        if wait "$XLAT_PID"; then NOTES+=("  xlat exited 0 on SIGTERM"); else
            NOTES+=("  xlat exit status on SIGTERM: $?"); FAILED=1; fi
        XLAT_PID=""
    fi
done
teardown

echo
echo "xlat demo: IN 198.18.0.20 -> GW -> OUT 198.19.0.2 (veth, offloads off, $(nproc) cores)"
echo "ping: $PINGS x 56 B; TCP: iperf3 ${SECS} s; UDP: iperf3 ${SECS} s, ${UDP_LEN} B payload offered at $PPS pps"
echo
printf '%-12s %13s %10s %16s %14s\n' device "ping avg ms" "TCP Mb/s" "UDP 64B loss %" "UDP sent pps"
printf '%-12s %13s %10s %16s %14s\n' ------------ ------------- ---------- ---------------- --------------
for dev in "${DEVICES[@]}"; do
    printf '%-12s %13s %10s %16s %14s\n' "$dev" "${R_RTT[$dev]}" "${R_TCP[$dev]}" "${R_LOSS[$dev]}" "${R_PPS[$dev]}"
done
for n in "${NOTES[@]}"; do [ -n "$n" ] && echo "$n"; done
if [ "$FAILED" != 0 ]; then
    echo "some measurements failed (logs: rerun with XLAT_DEMO_KEEP=1 and see $WORK)" >&2
    exit 1
fi
