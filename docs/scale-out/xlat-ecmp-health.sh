#!/bin/bash
# xlat scale-out: the inside router's health check (docs/SCALE-OUT.md).
#
# Keeps the resilient nexthop group GROUP made of exactly the nodes whose pool prefix is in
# routing table TABLE. BIRD on this router fills TABLE from one BGP session per node
# (docs/scale-out/bird-inside.conf); a node's BIRD announces its pool only while the node's
# xlat has its route up (docs/scale-out/bird-node.conf). So a node whose xlat dies leaves the
# group within milliseconds and only its buckets move; a node that comes back or is new
# joins it and receives idle buckets only (unbalanced_timer 0).
#
# Usage: xlat-ecmp-health.sh NODES_FILE
#   NODES_FILE: one node a line, re-read on every check (add a line to add a node):
#       <nexthop id> <node's inside address> <device> <node's pool prefix>
#       1 198.18.16.2 n0 198.19.16.0/28
# Environment (defaults): GROUP=100 TABLE=200 BUCKETS=128 IDLE_TIMER=2 ROUTE=default
#   PERIOD=1 (seconds between checks when no route changes) MAX_SECONDS=0 (0: run forever)
# Needs bash, iproute2 (ip nexthop: Linux 5.13 or later for resilient groups).
set -u

NODES=${1:?usage: xlat-ecmp-health.sh NODES_FILE}
GROUP=${GROUP:-100}
TABLE=${TABLE:-200}
BUCKETS=${BUCKETS:-128}
IDLE_TIMER=${IDLE_TIMER:-2}
ROUTE=${ROUTE:-default}
PERIOD=${PERIOD:-1}
MAX_SECONDS=${MAX_SECONDS:-0}

log() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) xlat-ecmp-health: $*" >&2; }

# The group's members now, sorted ("" when there is no group).
members() {
    ip nexthop show id "$GROUP" 2>/dev/null |
        sed -n 's/.* group \([0-9/,]*\) .*/\1/p' | tr '/' '\n' | cut -d, -f1 |
        sort -n | paste -sd/ -
}

check() {
    local want="" id via dev pool have routes nexthops
    # One look at the table and the nexthops per check (forks cost milliseconds here).
    routes=" $(ip -4 route show table "$TABLE" 2>/dev/null | cut -d' ' -f1 | tr '\n' ' ')"
    nexthops=" $(ip nexthop show 2>/dev/null | cut -d' ' -f2 | tr '\n' ' ')"
    while read -r id via dev pool _; do
        case "$id" in '' | \#*) continue ;; esac
        if [[ "$nexthops" != *" $id "* ]]; then
            ip nexthop add id "$id" via "$via" dev "$dev" ||
                { log "cannot add nexthop $id via $via dev $dev"; continue; }
        fi
        # `ip route` prints a /32 without its length.
        if [[ "$routes" == *" ${pool%/32} "* ]]; then
            want="$want $id"
        fi
    done <"$NODES"
    want=$(echo "$want" | tr ' ' '\n' | sed '/^$/d' | sort -n | paste -sd/ -)
    have=$(members)
    [ "$want" = "$have" ] && return 0
    if [ -z "$want" ]; then
        # No node is healthy: keep the last group (an empty one cannot exist) and say so.
        log "no node announces its pool; group $GROUP stays ${have:-absent}"
        return 0
    fi
    local verb=replace
    [ -z "$have" ] && verb=add
    if ip nexthop "$verb" id "$GROUP" group "$want" type resilient buckets "$BUCKETS" \
        idle_timer "$IDLE_TIMER" unbalanced_timer 0; then
        log "group $GROUP: ${have:-none} -> $want"
        [ "$verb" = add ] && ip route replace "$ROUTE" nhid "$GROUP"
    else
        log "could not set group $GROUP to $want"
    fi
}

start=$SECONDS
# Wake on every route change (BIRD writing TABLE), and every PERIOD seconds anyway.
exec 3< <(exec ip -4 monitor route 2>/dev/null)
while :; do
    check
    if [ "$MAX_SECONDS" -gt 0 ] && [ $((SECONDS - start)) -ge "$MAX_SECONDS" ]; then
        exit 0
    fi
    if read -r -t "$PERIOD" _ <&3; then
        # Take the rest of a burst of changes before checking again.
        n=0
        while [ $n -lt 1000 ] && read -r -t 0.005 _ <&3; do n=$((n + 1)); done
    elif [ $? -le 128 ]; then
        # The monitor ended (not a timeout): fall back to polling.
        sleep "$PERIOD"
    fi
done
