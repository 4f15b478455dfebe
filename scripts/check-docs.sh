#!/usr/bin/env bash
# Checks that the tests docs/RFC-COMPLIANCE.md cites exist, so a row cannot claim a test that
# was renamed or never written. A cited name is a backticked snake_case word with an underscore
# (`rfc4787_req1_endpoint_independent_mapping`, or a family: `rfc7915_4_3_*`). One that starts
# with `rfc` and digits must name a function in crates/ (`fn NAME`, or for NAME* some function
# starting with NAME) or a golden vector (tests/vectors/**/NAME.in.pcap). Any other such word
# must be one of those, or a counter or key the code spells as a string ("NAME" in crates/*/src)
# or docs/CONFIG.md documents (`NAME`). Exits 1 naming every citation that resolves to nothing.
#
# Usage: bash scripts/check-docs.sh [file.md ...]   (default: docs/RFC-COMPLIANCE.md)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- docs/RFC-COMPLIANCE.md

fns=$(grep -rhoE '\bfn [a-z_][a-z0-9_]*' crates --include='*.rs' | cut -c4- | sort -u)
vectors=$(find tests/vectors -name '*.in.pcap' -printf '%f\n' | sed 's/\.in\.pcap$//' | sort -u)
names=$(printf '%s\n%s\n' "$fns" "$vectors")
strings=$(grep -rhoE '"[a-z][a-z0-9_]*"' crates/*/src --include='*.rs' | tr -d '"' | sort -u)
config=$(grep -oE '`[a-z][a-z0-9_.]*`' docs/CONFIG.md | tr -d '`' | tr '.' '\n' | sort -u)

# Does the list on stdin hold $1 exactly, or (with a trailing *) a word starting with it?
has() {
    local want=$1
    if [[ $want == *'*' ]]; then
        grep -q "^${want%\*}"
    else
        grep -qx -- "$want"
    fi
}

bad=0 checked=0
for doc in "$@"; do
    [ -f "$doc" ] || { echo "check-docs: no such file: $doc" >&2; exit 1; }
    while read -r name; do
        checked=$((checked + 1))
        has "$name" <<<"$names" && continue
        if [[ ! $name =~ ^rfc[0-9] ]]; then
            has "$name" <<<"$strings" && continue
            has "$name" <<<"$config" && continue
        fi
        echo "$doc: cites \`$name\`, but no test (fn $name), vector or counter of that name exists" >&2
        bad=$((bad + 1))
    done < <(grep -oE '`[a-z][a-z0-9]*_[a-z0-9_]*\*?`' "$doc" | tr -d '`' | sort -u)
done
[ "$checked" -gt 0 ] || { echo "check-docs: found no cited names in $*" >&2; exit 1; }
if [ "$bad" -gt 0 ]; then
    echo "check-docs: $bad of $checked cited names do not exist" >&2
    exit 1
fi
echo "check-docs: all $checked cited names exist"
