# Shared helpers for scripts/demo.sh, scripts/test.sh and .ci/run. Source it; do not run it.

# Debian packages the demo and the end-to-end tests call. prometheus brings `promtool check
# metrics`; chromium and chromium-driver load the live page in e2e_metrics (about 70 s to
# install on a fresh machine); systemd brings `systemd-analyze verify` for the packaged unit;
# tshark and nfdump (nfcapd) decode and collect the IPFIX export in e2e_ipfix; conntrackd syncs
# the kernel NAT pair of `xlat lab run failover`; dnsperf measures the DNS64 resolvers of
# `xlat lab run dns64`.
XLAT_PKGS=(iproute2 iputils-ping nftables ethtool iperf3 apache2-utils tcpdump socat curl python3 procps coreutils
           unbound bind9-dnsutils dnsperf tayga clang-14 libbpf-dev conntrack prometheus chromium chromium-driver systemd
           tshark nfdump keepalived conntrackd vsftpd bird2)

die() { echo "error: $*" >&2; exit 1; }
say() { echo "==> $*" >&2; }

need_root() {
    [ "$(id -u)" = 0 ] || die "$1 needs root (network namespaces, TUN): run it with sudo"
}

# Installs the Debian packages given (default: XLAT_PKGS) that are missing; does nothing
# (and needs no network) when all are present.
ensure_pkgs() {
    local want=("$@") missing=() p
    [ ${#want[@]} -gt 0 ] || want=("${XLAT_PKGS[@]}")
    for p in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get update -qq
    timeout 1200 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Makes cargo reachable when run through sudo (which resets PATH): tries the invoking user's
# and root's ~/.cargo/bin.
ensure_cargo() {
    command -v cargo >/dev/null && return 0
    local h d
    for h in "${SUDO_USER:+$(getent passwd "$SUDO_USER" | cut -d: -f6)}" "$HOME" /root; do
        d="$h/.cargo/bin"
        if [ -n "$h" ] && [ -x "$d/cargo" ]; then
            export PATH="$d:$PATH"
            # rustup keeps the toolchains under the same user's home.
            [ -d "$h/.rustup" ] && export RUSTUP_HOME="${RUSTUP_HOME:-$h/.rustup}"
            return 0
        fi
    done
    die "cargo not found; install Rust (rustup) first"
}
