#!/usr/bin/env bash
# Builds the Debian package of xlat with dpkg-deb: the binary, the systemd unit
# (packaging/xlat.service), a default /etc/xlat/xlat.toml (a conffile: upgrades keep an
# edited one), the docs, and -- when the binary can generate them -- bash/zsh/fish completions
# and the man page.
#
#   bash scripts/deb.sh [--binary PATH] [--out DIR]
#
# Without --binary it builds `cargo build --release -p xlat` first. The package lands in DIR
# (default target/deb) as xlat_VERSION_ARCH.deb; its path is the last line printed.
# Install with `sudo apt install ./target/deb/xlat_*.deb`, then edit /etc/xlat/xlat.toml and
# `sudo systemctl start xlat` (the package starts nothing by itself).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

bin="" out="target/deb"
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) bin="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) die "unknown argument $1; usage: scripts/deb.sh [--binary PATH] [--out DIR]" ;;
    esac
done
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing (Debian package dpkg)"
if [ -z "$bin" ]; then
    ensure_cargo
    say "cargo build --release -p xlat"
    cargo build --release -p xlat
    bin="${CARGO_TARGET_DIR:-target}/release/xlat"
fi
[ -x "$bin" ] || die "$bin is not an executable xlat binary"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || die "no version in Cargo.toml [workspace.package]"
arch=$(dpkg --print-architecture)
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"

install -D -m 0755 "$bin" "$root/usr/bin/xlat"
# The release profile keeps line tables for profiling; the package does not need them.
if command -v strip >/dev/null; then strip --strip-debug "$root/usr/bin/xlat"; fi
install -D -m 0644 packaging/xlat.service "$root/lib/systemd/system/xlat.service"
install -D -m 0644 packaging/xlat.toml "$root/etc/xlat/xlat.toml"
doc="$root/usr/share/doc/xlat"
install -d "$doc"
install -m 0644 README.md docs/CONFIG.md docs/CLI.md docs/OPERATIONS.md docs/LOGGING.md docs/METRICS.md "$doc/"
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: xlat"
    echo
    echo "Files: *"
    echo "License: MIT or Apache-2.0"
    echo
    cat LICENSE-MIT
} > "$doc/copyright"
# Completions and the man page, generated from the CLI's own definitions.
if "$bin" completions bash >/dev/null 2>&1; then
    install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
        "$root/usr/share/fish/vendor_completions.d" "$root/usr/share/man/man1"
    "$bin" completions bash > "$root/usr/share/bash-completion/completions/xlat"
    "$bin" completions zsh > "$root/usr/share/zsh/vendor-completions/_xlat"
    "$bin" completions fish > "$root/usr/share/fish/vendor_completions.d/xlat.fish"
    "$bin" man | gzip -9n > "$root/usr/share/man/man1/xlat.1.gz"
fi

install -d "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: xlat
Version: $version
Architecture: $arch
Maintainer: The xlat contributors <xlat@example.invalid>
Installed-Size: $size
Depends: libc6
Recommends: iproute2, nftables
Section: net
Priority: optional
Homepage: https://example.invalid/xlat
Description: userspace IP translator: NAT44, NAT64, SIIT, DNS64, 6in4 tunnels
 One engine, one configuration file (/etc/xlat/xlat.toml) and one CLI for NAT44 (static,
 pool, NAPT), stateful NAT64 (RFC 6146), SIIT (RFC 7915), DNS64 (RFC 6147) and 6to4/ISATAP
 tunnels, with an optional XDP fast path, Prometheus metrics and a live page. Runs as the
 systemd service xlat (Type=notify, watchdog); edit the configuration, then start it.
EOF
echo "/etc/xlat/xlat.toml" > "$root/DEBIAN/conffiles"
# systemd learns of the unit; nothing is enabled or started: the file must be edited first.
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
exit 0
EOF
cat > "$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then systemctl stop xlat.service || true; fi
exit 0
EOF
cat > "$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

deb="$out/xlat_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
say "built $deb"
echo "$deb"
