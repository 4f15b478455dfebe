#!/usr/bin/env bash
# The main job: build xlat, install what the lab needs, and run `xlat lab run quick` -- the
# tester's ceiling, then plain forwarding, the kernel's NAT44, xlat's NAT44 over its TUN device
# and xlat's NAT44 with the XDP fast path, in the same namespace testbed at 64 B and 512 B: throughput at 0.1% loss, then latency and
# the device's CPU cost per packet at a fixed load over three interleaved rounds, each as a ratio to the round's forward4, printed as
# tables and one sentence per comparison (docs/LAB.md, quick). Results land in results/<time>-quick/
# (results.json, report.md, report.html with plots).
#
# Usage: sudo bash scripts/lab.sh [more `xlat lab run quick` options]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need_root "scripts/lab.sh (network namespaces, TUN, real-time threads)"
ensure_pkgs
ensure_cargo
say "building xlat (release)"
cargo build --release --quiet -p xlat
XLAT="$PWD/target/release/xlat"
[ -x "$XLAT" ] || die "$XLAT was not built"
say "xlat lab run quick"
timeout -k 10 900 "$XLAT" lab run quick "$@"
