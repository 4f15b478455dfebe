#!/usr/bin/env python3
"""Golden 6in4 tunnel vectors (6to4 RFC 3056 / RFC 3964, ISATAP RFC 5214, RFC 4213 3):
pcap in -> expected pcap out, built by an independent oracle.

Every expected packet is built here from scratch with scapy, which computes every checksum;
nothing is copied from the engine's output. Run from anywhere:

    python3 tests/vectors/tunnel/gen_tunnel.py

It rewrites tests/vectors/tunnel/NAME.in.pcap, NAME.out.pcap and vectors.json (and removes pcaps
of vectors that no longer exist in this directory). crates/xlat/tests/vectors.rs feeds
each NAME.in.pcap through `xlat translate` and compares the result with NAME.out.pcap byte for
byte, then the counters: every drop reason listed must have that count and every other drop
reason must be 0; the events listed must have their counts.

Pcaps are LINKTYPE_RAW (101): each record one IPv4 or IPv6 packet. The timestamp is the time
the engine sees. Addresses: the endpoints' IPv4 addresses are in the benchmarking range
198.18.0.0/15 (RFC 2544) -- which RFC 3964 5.3.1 does not refuse -- and the 6to4 prefixes
2002:c612::/32 derive from them; ISATAP uses 2001:2:0:5::/64, native IPv6 2001:2:0:6::/64 and
2001:db8::/32.
"""

import json
import os
import struct
import sys

try:
    from scapy.all import IP, ICMP, UDP, Raw, IPv6, ICMPv6PacketTooBig, ICMPv6DestUnreach
    from scapy.all import ICMPv6ND_RS, ICMPv6ND_RA, ICMPv6NDOptPrefixInfo, ICMPv6NDOptMTU
    from scapy.all import ICMPv6EchoRequest
except ImportError:  # a python3 other than Debian's (pyenv, venv): use Debian's python3-scapy
    sys.path.append("/usr/lib/python3/dist-packages")
    from scapy.all import IP, ICMP, UDP, Raw, IPv6, ICMPv6PacketTooBig, ICMPv6DestUnreach
    from scapy.all import ICMPv6ND_RS, ICMPv6ND_RA, ICMPv6NDOptPrefixInfo, ICMPv6NDOptMTU
    from scapy.all import ICMPv6EchoRequest

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_700_000_000

# --- addresses ----------------------------------------------------------------------------
A4 = "198.18.0.2"          # this 6to4 endpoint
B4 = "198.18.1.2"          # a remote 6to4 site
C4 = "198.18.1.3"          # another remote 6to4 site
RELAY4 = "198.18.1.1"      # the relay router (RFC 3056 5.3; unicast, RFC 7526)
RTR4 = "198.18.0.254"      # an IPv4 router on the path (sends ICMPv4 errors)
A6 = "2002:c612:2::1"      # 2002:V4ADDR::1 of A4: the TUN's address
A6H = "2002:c612:2:1::10"  # a host in A's 6to4 site
B6 = "2002:c612:102::1"    # a host in B's site
C6 = "2002:c612:103::1"
NATIVE = "2001:db8::1"     # a native IPv6 host behind the relay

ISA_R4 = "198.18.0.1"      # ISATAP router
ISA_H4 = "198.18.0.2"      # ISATAP host
ISA_O4 = "198.18.0.3"      # another ISATAP host
ISA_PREFIX = "2001:2:0:5::"
ISA_R_LL = "fe80::5efe:c612:1"       # RFC 5214 7.4: fe80::/64 + 0:5efe:V4 (198.18/15 is not
ISA_H_LL = "fe80::5efe:c612:2"       # global, so the u/l bit stays 0, RFC 5214 6.1)
ISA_H = "2001:2:0:5::5efe:c612:2"
ISA_O = "2001:2:0:5::5efe:c612:3"
ISA_R = "2001:2:0:5::5efe:c612:1"
SERVER6 = "2001:2:0:6::1"            # native IPv6 behind the ISATAP router


def sixtofour_config(relay=True, relay_router=False, pmtud=True):
    lines = ["[tunnel.6to4]", f'ipv4 = "{A4}"']
    if relay:
        lines.append(f'relay = "{RELAY4}"')
    if relay_router:
        lines.append("relay_router = true")
    if not pmtud:
        lines.append("pmtud = false")
    return "\n".join(lines) + "\n\n[engine]\nseed = 1\n"


def isatap_router_config():
    return f"""[tunnel.isatap]
role = "router"
ipv4 = "{ISA_R4}"
prefix = "{ISA_PREFIX}/64"

[engine]
seed = 1
"""


def isatap_host_config():
    return f"""[tunnel.isatap]
role = "host"
ipv4 = "{ISA_H4}"
routers = ["{ISA_R4}"]

[engine]
seed = 1
"""


# --- packet builders ----------------------------------------------------------------------

def udp6(src, dst, n=32, hlim=63, tc=0, sport=5000, dport=53):
    """An IPv6 UDP packet; `n` payload bytes."""
    return IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0x12345) / UDP(sport=sport, dport=dport) / \
        Raw(bytes(i & 0xff for i in range(n)))


def outer(src, dst, inner, id, ttl=64, tos=None, df=False, **kw):
    """`inner` in IPv4 protocol 41 (RFC 4213 3.5)."""
    b = bytes(inner)
    if tos is None:
        tos = b[0] << 4 & 0xf0 | b[1] >> 4   # RFC 6040 4.1: traffic class copied
    return IP(src=src, dst=dst, id=id, ttl=ttl, tos=tos, flags="DF" if df else 0, proto=41,
              **kw) / Raw(b)


def arrived(src, dst, inner, ttl=60, tos=0):
    """A protocol-41 packet as it arrives from the far end (IP ID fixed at 0x4242)."""
    return IP(src=src, dst=dst, id=0x4242, ttl=ttl, tos=tos, proto=41) / Raw(bytes(inner))


def icmp4_error(src, dst, type, code, quoted, quote, mtu=0):
    """An ICMPv4 error quoting the first `quote` bytes of `quoted` (RFC 792; RFC 1191 for the
    next-hop MTU of Fragmentation Needed)."""
    q = bytes(quoted)[:quote]
    icmp = ICMP(type=type, code=code, nexthopmtu=mtu) if type == 3 and code == 4 else \
        ICMP(type=type, code=code)
    return IP(src=src, dst=dst, id=0x77, ttl=62) / icmp / Raw(q)


def icmp6_error(cls, src, dst, quoted, **kw):
    """An ICMPv6 error from the endpoint quoting the IPv6 packet (RFC 4443 2.4 c: up to 1280
    bytes in all)."""
    q = bytes(quoted)[:1280 - 48]
    return IPv6(src=src, dst=dst, hlim=64, tc=0, fl=0) / cls(**kw) / Raw(q)


# --- vectors ------------------------------------------------------------------------------

class Vector:
    def __init__(self, name, rule, cfg):
        self.name, self.rule, self.config = name, rule, cfg
        self.inp, self.out = [], []
        self.drops, self.events = {}, {}

    def xlat(self, t, pkt_in, pkt_out):
        self.inp.append((t, pkt_in))
        self.out.append((t, pkt_out))

    def send(self, t, pkt_in):
        self.inp.append((t, pkt_in))

    def expect(self, t, pkt_out):
        self.out.append((t, pkt_out))

    def drop(self, t, pkt_in, reason):
        self.inp.append((t, pkt_in))
        self.drops[reason] = self.drops.get(reason, 0) + 1


VECTORS = []


def vector(rule, cfg):
    def register(fn):
        VECTORS.append((fn.__name__, rule, cfg, fn))
        return fn
    return register


# The engine numbers the outer IPv4 headers it builds (RFC 4213 3.5: unique per packet) from
# a counter derived from [engine].seed, so that replays are identical: with seed = 1 the first
# is 0x4141, then one more per packet. The oracle states that sequence explicitly.
FIRST_ID = 0x4141


def ids(start=FIRST_ID):
    n = start
    while True:
        yield n & 0xffff
        n += 1


@vector("RFC 3056 5.3 / RFC 4213 3.3, 3.5: IPv6 to a 2002::/16 address is encapsulated in "
        "protocol 41 to the IPv4 address it embeds; outer TTL 64, traffic class copied, hop "
        "limit untouched; no DF up to 1280 bytes, DF above (RFC 4213 3.2.2)",
        sixtofour_config())
def rfc3056_5_3_encapsulate_to_embedded_ipv4(v):
    i = ids()
    p = udp6(A6H, B6, n=32, tc=0xb8)
    v.xlat(0, p, outer(A4, B4, p, next(i)))
    p = udp6(A6H, C6, n=1300, hlim=7)
    v.xlat(1, p, outer(A4, C4, p, next(i), df=True))
    v.events = {"tunnel_encapsulated": 2}


@vector("RFC 3056 5.3, RFC 7526: IPv6 to a native destination goes to the configured "
        "(unicast) relay router", sixtofour_config())
def rfc3056_5_3_native_destination_to_relay(v):
    i = ids()
    p = udp6(A6H, NATIVE)
    v.xlat(0, p, outer(A4, RELAY4, p, next(i)))


@vector("RFC 3056 5.3: without a relay, a native destination has no next hop", sixtofour_config(relay=False))
def rfc3056_5_3_no_relay_dropped(v):
    v.drop(0, udp6(A6H, NATIVE), "tunnel_no_relay")


@vector("RFC 3964 5.3.1: sending -- a destination embedding refused IPv4 (private, loopback, "
        "multicast, broadcast, 0/8), a source outside our 2002:V4ADDR::/48, link-local or "
        "multicast addresses, and our own prefix (a loop) are dropped", sixtofour_config())
def rfc3964_5_3_1_encapsulation_refusals(v):
    for dst in ["2002:0a01:0203::1", "2002:c0a8:0101::1", "2002:ac10:0001::1", "2002:7f00:0001::1",
                "2002:e000:0001::1", "2002:ffff:ffff::1", "2002:0001:0203::1", "2002:a9fe:0101::1"]:
        v.drop(0, udp6(A6H, dst), "tunnel_6to4_address_refused")
    v.drop(1, udp6("2002:c612:3::1", B6), "tunnel_spoofed_source")
    v.drop(1, udp6("fe80::1", B6), "tunnel_bad_inner_address")
    v.drop(1, udp6(A6H, "ff0e::1"), "tunnel_bad_inner_address")
    v.drop(1, udp6(A6H, "2002:c612:2:ff::1"), "tunnel_loop")


@vector("RFC 4213 3.6 / RFC 3964 5.3.1: a protocol-41 packet whose 6to4 source embeds the outer "
        "source and whose 6to4 destination embeds ours is decapsulated unchanged", sixtofour_config())
def rfc4213_3_6_decapsulate(v):
    p = udp6(B6, A6H, n=40, hlim=61, tc=0x20)
    v.xlat(0, arrived(B4, A4, p), p)
    p = udp6(NATIVE, A6H)
    v.xlat(1, arrived(RELAY4, A4, p), p)   # native source through our relay
    v.events = {"tunnel_decapsulated": 2}


@vector("RFC 3964 5.3.1: decapsulation -- a 6to4 source not embedding the outer source, a native "
        "source not from our relay, a destination not embedding the outer destination, refused "
        "IPv4 (outer or embedded), link-local and multicast inner addresses are dropped",
        sixtofour_config())
def rfc3964_5_3_1_decapsulation_refusals(v):
    v.drop(0, arrived(B4, A4, udp6(C6, A6H)), "tunnel_spoofed_source")
    v.drop(0, arrived(B4, A4, udp6(NATIVE, A6H)), "tunnel_spoofed_source")
    v.drop(0, arrived(B4, A4, udp6(B6, "2002:c612:3::1")), "tunnel_wrong_destination")
    v.drop(0, arrived(B4, A4, udp6(B6, "2001:db8::9")), "tunnel_wrong_destination")
    v.drop(0, arrived("10.1.2.3", A4, udp6("2002:0a01:0203::1", A6H)), "tunnel_6to4_address_refused")
    v.drop(0, arrived("192.168.1.1", A4, udp6(NATIVE, A6H)), "tunnel_6to4_address_refused")
    v.drop(0, arrived(B4, A4, udp6("fe80::1", A6H)), "tunnel_bad_inner_address")
    v.drop(0, arrived(B4, A4, udp6(B6, "ff02::1")), "tunnel_bad_inner_address")
    bad = bytearray(bytes(udp6(B6, A6H)))
    bad[0] = 0x45
    v.drop(0, arrived(B4, A4, Raw(bytes(bad))), "tunnel_bad_inner_packet")


@vector("RFC 3056 5 / RFC 3964 5.3.1: a relay router accepts native destinations and carries "
        "native sources to 6to4 sites", sixtofour_config(relay=False, relay_router=True))
def rfc3056_5_relay_router(v):
    p = udp6(B6, NATIVE)
    v.xlat(0, arrived(B4, A4, p), p)
    i = ids()
    p = udp6(NATIVE, B6)
    v.xlat(1, p, outer(A4, B4, p, next(i)))


@vector("RFC 4213 3.2: an IPv6 packet larger than the tunnel MTU (1480) gets ICMPv6 Packet Too "
        "Big with MTU 1480 back, quoting as much of it as fits in 1280 bytes (RFC 4443 2.4 c)",
        sixtofour_config())
def rfc4213_3_2_packet_too_big(v):
    p = udp6(A6H, B6, n=1481 - 48)
    assert len(bytes(p)) == 1481
    v.xlat(0, p, icmp6_error(ICMPv6PacketTooBig, A6, A6H, p, mtu=1480))
    i = ids()
    p = udp6(A6H, B6, n=1480 - 48)
    v.xlat(1, p, outer(A4, B4, p, next(i), df=True))
    v.drops = {"too_big": 1}
    v.events = {"icmp_errors_sent": 1}


@vector("RFC 4213 3.2.1: with a static tunnel MTU (pmtud = false) DF is never set",
        sixtofour_config(pmtud=False))
def rfc4213_3_2_1_static_mtu_no_df(v):
    i = ids()
    p = udp6(A6H, B6, n=1400)
    v.xlat(0, p, outer(A4, B4, p, next(i), df=False))


@vector("RFC 4213 3.4, 3.2.2: ICMPv4 errors about our protocol-41 packets are relayed to the IPv6 "
        "source: Fragmentation Needed -> Packet Too Big (IPv4 MTU - 20, at least 1280), "
        "unreachable and TTL exceeded -> Destination Unreachable (address unreachable; "
        "administratively prohibited kept)", sixtofour_config())
def rfc4213_3_4_icmpv4_errors_relayed(v):
    inner = udp6(A6H, B6, n=1400)
    sent = outer(A4, B4, inner, 0x1111, df=True)
    v.xlat(0, icmp4_error(RTR4, A4, 3, 4, sent, 576, mtu=1400),
           icmp6_error(ICMPv6PacketTooBig, A6, A6H, bytes(sent)[20:576], mtu=1380))
    v.xlat(1, icmp4_error(RTR4, A4, 3, 4, sent, 576, mtu=1000),
           icmp6_error(ICMPv6PacketTooBig, A6, A6H, bytes(sent)[20:576], mtu=1280))
    v.xlat(2, icmp4_error(RTR4, A4, 3, 1, sent, 100),
           icmp6_error(ICMPv6DestUnreach, A6, A6H, bytes(sent)[20:100], code=3))
    v.xlat(3, icmp4_error(RTR4, A4, 11, 0, sent, 100),
           icmp6_error(ICMPv6DestUnreach, A6, A6H, bytes(sent)[20:100], code=3))
    v.xlat(4, icmp4_error(RTR4, A4, 3, 13, sent, 100),
           icmp6_error(ICMPv6DestUnreach, A6, A6H, bytes(sent)[20:100], code=1))
    v.events = {"tunnel_icmp_relayed": 5}


@vector("RFC 4213 3.4: an ICMPv4 error quoting less than the inner IPv6 header cannot be relayed; "
        "parameter problems and reassembly timeouts have no ICMPv6 equivalent; ICMPv4 that is not "
        "about our tunnel packets (an echo request) goes back to the host unchanged",
        sixtofour_config())
def rfc4213_3_4_icmpv4_not_relayed(v):
    sent = outer(A4, B4, udp6(A6H, B6), 0x1111)
    v.drop(0, icmp4_error(RTR4, A4, 3, 1, sent, 28), "tunnel_icmp_too_short")
    v.drop(1, icmp4_error(RTR4, A4, 12, 0, sent, 100), "tunnel_icmp_not_relayed")
    v.drop(2, icmp4_error(RTR4, A4, 11, 1, sent, 100), "tunnel_icmp_not_relayed")
    ping = IP(src=B4, dst=A4, id=5, ttl=60) / ICMP(type=8, id=7, seq=1) / Raw(b"ping-xlat")
    v.xlat(3, ping, ping)
    v.events = {"tunnel_icmp_passed": 1}


@vector("RFC 4213 3.6: fragmented protocol-41 packets are reassembled, then decapsulated",
        sixtofour_config())
def rfc4213_3_6_fragments_reassembled(v):
    inner = udp6(B6, A6H, n=1000)
    whole = bytes(arrived(B4, A4, inner))
    payload = whole[20:]
    f1 = IP(src=B4, dst=A4, id=0x4343, ttl=60, proto=41, flags="MF", frag=0) / Raw(payload[:512])
    f2 = IP(src=B4, dst=A4, id=0x4343, ttl=60, proto=41, frag=64) / Raw(payload[512:])
    v.send(0, f2)
    v.send(0.5, f1)
    v.expect(0.5, inner)
    v.events = {"tunnel_reassembled": 1, "tunnel_decapsulated": 1}


@vector("RFC 6040 4.2: outer CE with an ECT inner packet marks the inner CE; with a Not-ECT "
        "inner packet the packet is dropped", sixtofour_config())
def rfc6040_4_2_ecn_decapsulation(v):
    p = udp6(B6, A6H, tc=0x22)
    v.xlat(0, arrived(B4, A4, p, tos=0x03), udp6(B6, A6H, tc=0x23))
    v.drop(1, arrived(B4, A4, udp6(B6, A6H, tc=0x20), tos=0x03), "tunnel_ecn_not_ect")


def rs(src_ll, dst_ll, hlim=255):
    return IPv6(src=src_ll, dst=dst_ll, hlim=hlim, tc=0, fl=0) / ICMPv6ND_RS()


def ra(lifetime=1800):
    """The RA the router sends (RFC 4861 4.2, 4.6.2, 4.6.4; RFC 5214 8.2)."""
    return IPv6(src=ISA_R_LL, dst=ISA_H_LL, hlim=255, tc=0, fl=0) / \
        ICMPv6ND_RA(chlim=64, M=0, O=0, H=0, prf=0, P=0, routerlifetime=lifetime, reachabletime=0, retranstimer=0) / \
        ICMPv6NDOptPrefixInfo(prefixlen=64, L=1, A=1, validlifetime=2592000,
                              preferredlifetime=604800, prefix=ISA_PREFIX) / \
        ICMPv6NDOptMTU(mtu=1480)


@vector("RFC 5214 8.2, RFC 4861 6.2.6: an ISATAP router answers a Router Solicitation from a "
        "host's ISATAP link-local address with a Router Advertisement of its prefix, sent "
        "(encapsulated) to that host only", isatap_router_config())
def rfc5214_8_2_router_answers_solicitation(v):
    i = ids()
    v.xlat(0, arrived(ISA_H4, ISA_R4, rs(ISA_H_LL, ISA_R_LL)), outer(ISA_R4, ISA_H4, ra(), next(i)))
    v.xlat(1, arrived(ISA_H4, ISA_R4, rs(ISA_H_LL, "ff02::2")), outer(ISA_R4, ISA_H4, ra(), next(i)))
    v.events = {"isatap_ra_sent": 2}


@vector("RFC 4861 6.1.1 / RFC 5214 7.3: solicitations with hop limit below 255, or from a source "
        "whose ISATAP identifier does not embed the outer source, are dropped", isatap_router_config())
def rfc5214_7_3_invalid_solicitations(v):
    v.drop(0, arrived(ISA_H4, ISA_R4, rs(ISA_H_LL, ISA_R_LL, hlim=254)), "isatap_invalid_nd")
    v.drop(1, arrived(ISA_O4, ISA_R4, rs(ISA_H_LL, ISA_R_LL)), "tunnel_spoofed_source")


@vector("RFC 5214 7.1, 7.3: the router encapsulates to the IPv4 address in an ISATAP "
        "destination of its prefix and decapsulates from hosts whose ISATAP source embeds the "
        "outer source; other identifiers in the prefix have no IPv4 next hop", isatap_router_config())
def rfc5214_7_1_router_forwarding(v):
    i = ids()
    p = udp6(SERVER6, ISA_H)
    v.xlat(0, p, outer(ISA_R4, ISA_H4, p, next(i)))
    p = udp6(ISA_H, SERVER6)
    v.xlat(1, arrived(ISA_H4, ISA_R4, p), p)
    v.drop(2, arrived(ISA_O4, ISA_R4, udp6(ISA_H, SERVER6)), "tunnel_spoofed_source")
    v.drop(3, udp6(SERVER6, "2001:2:0:5::1"), "isatap_no_next_hop")


@vector("RFC 5214 8.3: an ISATAP host solicits its PRL router (RS to the router's ISATAP "
        "link-local address, then 4 s later again), learns the prefix and default router from "
        "the advertisement, then sends on-link ISATAP destinations directly and the rest to the "
        "router", isatap_host_config())
def rfc5214_8_3_host_router_discovery(v):
    i = ids()
    # Before any advertisement, off-link destinations have no router.
    v.drop(0, udp6(ISA_H_LL, SERVER6), "isatap_no_router")
    # xlat translate runs the engine's timers every 100 ms of capture time: the first run
    # (at t=0.2) sends the solicitation, the next one 4 s later.
    v.send(0.2, udp6(ISA_H_LL, "ff02::16"))
    v.expect(0.2, outer(ISA_H4, ISA_R4, rs(ISA_H_LL, ISA_R_LL), next(i)))
    v.drops["tunnel_bad_inner_address"] = 1
    v.send(4.3, arrived(ISA_R4, ISA_H4, ra()))
    v.expect(4.3, outer(ISA_H4, ISA_R4, rs(ISA_H_LL, ISA_R_LL), next(i)))
    p = udp6(ISA_H, SERVER6)
    v.xlat(5, p, outer(ISA_H4, ISA_R4, p, next(i)))
    p = udp6(ISA_H, ISA_O)
    v.xlat(6, p, outer(ISA_H4, ISA_O4, p, next(i)))
    p = udp6(SERVER6, ISA_H)
    v.xlat(7, arrived(ISA_R4, ISA_H4, p), p)
    v.events = {"isatap_rs_sent": 2, "isatap_ra_received": 1}


@vector("RFC 5214 7.3, 8.3.3: a host accepts any source from its PRL router, only embedded "
        "ISATAP sources from others, packets to its own addresses only, and advertisements only "
        "from PRL routers", isatap_host_config())
def rfc5214_7_3_host_decapsulation_checks(v):
    # All at t = 0: the engine's timers (and so its Router Solicitations) do not run.
    p = udp6(ISA_O, ISA_H_LL)
    v.xlat(0, arrived(ISA_O4, ISA_H4, p), p)
    v.drop(0, arrived(ISA_O4, ISA_H4, udp6(SERVER6, ISA_H_LL)), "tunnel_spoofed_source")
    v.drop(0, arrived(ISA_R4, ISA_H4, udp6(SERVER6, "fe80::5efe:c612:9")), "tunnel_wrong_destination")
    fake = IPv6(src="fe80::5efe:c612:3", dst=ISA_H_LL, hlim=255) / ICMPv6ND_RA(routerlifetime=1800)
    v.drop(0, arrived(ISA_O4, ISA_H4, fake), "isatap_invalid_nd")


# --- output -------------------------------------------------------------------------------

def write_pcap(path, timed):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        for t, p in timed:
            b = bytes(p)
            usec = round(t * 1_000_000)
            f.write(struct.pack("<IIII", T0 + usec // 1_000_000, usec % 1_000_000, len(b), len(b)))
            f.write(b)


def main():
    manifest, names = [], set()
    for name, rule, cfg, fn in VECTORS:
        assert name not in names, name
        names.add(name)
        v = Vector(name, rule, cfg)
        fn(v)
        write_pcap(os.path.join(HERE, f"{name}.in.pcap"), v.inp)
        write_pcap(os.path.join(HERE, f"{name}.out.pcap"), v.out)
        manifest.append({"name": name, "rule": rule, "config": cfg, "drops": v.drops,
                         "events": v.events})
    for f in os.listdir(HERE):
        if f.endswith(".pcap") and f.split(".")[0] not in names:
            os.remove(os.path.join(HERE, f))
    with open(os.path.join(HERE, "vectors.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"{len(manifest)} tunnel vectors written to {HERE}")


if __name__ == "__main__":
    main()
