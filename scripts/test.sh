#!/usr/bin/env bash
# xlat full test suite: unit tests, golden pcap vectors, and the end-to-end tests in network
# namespaces. The tests that need root are #[ignore = "needs root: scripts/test.sh"], so a plain
# `cargo test` lists them as ignored; here they run (--include-ignored), and fail if they cannot.
#
# Usage: sudo bash scripts/test.sh [extra cargo test arguments, e.g. a test name filter]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need_root "scripts/test.sh (end-to-end tests in network namespaces)"
ensure_pkgs
ensure_cargo
[ -e /dev/net/tun ] || die "/dev/net/tun is missing: xlat needs the TUN driver"

# One test at a time: the end-to-end tests move real traffic and share the machine's cores.
timeout -k 10 2400 cargo test --workspace --release "$@" -- --include-ignored --test-threads=1
# The NAT44 and NAT64/SIIT (with DNS64) end-to-end suites once more with the XDP fast path
# carrying established flows and SIIT's address pairs ([dataplane] fast_path = "xdp"): every
# behaviour must hold with it on and off.
if [ $# -eq 0 ]; then
    say "NAT44, NAT64/SIIT, FTP ALG, metrics, logging and IPFIX end-to-end tests with the XDP fast path"
    XLAT_E2E_FAST_PATH=1 timeout -k 10 1200 cargo test --release -p xlat --test e2e_nat44 --test e2e_nat64 --test e2e_ftp --test e2e_reload --test e2e_metrics --test e2e_logging --test e2e_ipfix -- --include-ignored --test-threads=1
    # And on two packet workers ([dataplane] workers = 2: a multi-queue TUN device, packets
    # handed between workers, inbound fragments placed by their first fragment, a reload
    # applied by every worker, events logged from both).
    say "NAT44, NAT64, FTP ALG, fast-path, reload, metrics, logging and IPFIX end-to-end tests on two packet workers"
    XLAT_E2E_WORKERS=2 timeout -k 10 1200 cargo test --release -p xlat --test e2e_nat44 --test e2e_nat64 --test e2e_ftp --test e2e_fast_path --test e2e_reload --test e2e_metrics --test e2e_logging --test e2e_ipfix -- --include-ignored --test-threads=1
    # And with the AF_XDP slow path ([dataplane] slow_path = "af_xdp": what the engine
    # translates comes from AF_XDP sockets and leaves through them, not the TUN device; with
    # the fast path's recipes too in e2e_fast_path), on one worker and on two.
    say "NAT44, NAT64/SIIT, fast-path, metrics and logging end-to-end tests with the AF_XDP slow path"
    XLAT_E2E_AF_XDP=1 timeout -k 10 1200 cargo test --release -p xlat --test e2e_nat44 --test e2e_nat64 --test e2e_fast_path --test e2e_metrics --test e2e_logging -- --include-ignored --test-threads=1
    XLAT_E2E_AF_XDP=1 XLAT_E2E_WORKERS=2 timeout -k 10 1200 cargo test --release -p xlat --test e2e_nat44 --test e2e_nat64 --test e2e_afxdp -- --include-ignored --test-threads=1
fi
leftover=$(ip netns list | grep -E '^x[0-9a-f]+[ndtpf][0-9]+-(in|in2|gw|out|cli|srv|a|r|b|swi|swo)( |$)' || true)
leftover+=$(ip netns list | grep -E '^s[0-9a-f]+-(t|ir|or|n[0-9]+)( |$)' || true)
[ -z "$leftover" ] || die "test namespaces were left behind: $leftover"
echo "all tests passed"
