#!/usr/bin/env bash
# Instructions per translated packet on the NAT44 or NAT64 fast path, counted by callgrind (repeatable
# on a noisy machine, unlike time). Two runs that differ only in the packet count; the
# difference divided by the extra packets is the per-packet cost.
# Usage: bash scripts/icount.sh [SESSIONS] [batch|single|nat64out|nat64in|fill44|fill64]
# (nat64out: IPv6 -> IPv4 NAT64 established packets, nat64in: IPv4 -> IPv6; fill44 / fill64:
# instructions per new session, NAT44 / NAT64, into a table sized for SESSIONS; all batched)
set -euo pipefail
cd "$(dirname "$0")/.."
sessions=${1:-1000}
mode=${2:-batch}
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p xlat-engine --example hotpath
bin=target/release/examples/hotpath
ir() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$sessions" "$1" "$mode" 2>&1 \
        | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
a=$(ir 32000)
b=$(ir 96000)
echo "sessions=$sessions mode=$mode instructions/packet=$(( (b - a) / 64000 ))"
