#!/usr/bin/env python3
"""Golden NAT44, SIIT and NAT64 vectors: pcap in -> expected pcap out, built by an independent
oracle.

Every expected output packet is built here from scratch with the translated fields, and scapy
computes its checksums; nothing is copied from the engine's output. Run from anywhere:

    python3 tests/vectors/gen.py

It rewrites tests/vectors/NAME.in.pcap, NAME.out.pcap and vectors.json. crates/xlat/tests/vectors.rs
feeds each NAME.in.pcap through `xlat translate` and compares the result with NAME.out.pcap.

Pcaps are LINKTYPE_RAW (101): each record is one IPv4 or IPv6 packet. Timestamps carry the time the engine
sees (timeouts are expressed through them). The manifest records, per vector, the rule it checks,
the config, the drop counters expected (every drop reason not listed must be 0), the event
counters expected (only those listed are checked), and `random_port`: output packets whose
source port or echo identifier the engine picks at random (the test checks the value is in range
and differs from `not`, and that the L4 checksum verifies, then compares every other byte).
"""

import json
import os
import struct
import sys

try:
    import scapy  # noqa: F401
except ImportError:  # a python3 other than Debian's (pyenv, venv): use Debian's python3-scapy
    sys.path.append("/usr/lib/python3/dist-packages")
from scapy.all import ICMP, IP, TCP, UDP, Raw, IPOption_Router_Alert  # noqa: E402
from scapy.all import (IPv6, ICMPv6EchoRequest, ICMPv6EchoReply, ICMPv6DestUnreach,  # noqa: E402
                       ICMPv6PacketTooBig, ICMPv6TimeExceeded, ICMPv6ParamProblem,
                       ICMPv6ND_NS, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting,
                       IPv6ExtHdrDestOpt)

HERE = os.path.dirname(os.path.abspath(__file__))

# --- addresses (RFC 2544 benchmarking range 198.18.0.0/15, as DESIGN.md asks) ----------------
A = "198.18.0.20"        # inside host, NAPT
C = "198.18.0.21"        # second inside host, NAPT
B_IN = "198.18.0.10"     # inside host with a static 1:1 entry ...
B_OUT = "198.19.0.10"    # ... and its outside address
POOL = "198.19.0.100"    # the one pool address
R1 = "198.19.0.2"        # remote hosts on the outside
R2 = "198.19.0.3"
RTR = "198.19.0.1"       # a router on the outside (sends ICMP time exceeded)

T0 = 1_700_000_000       # pcap time of t = 0 (seconds)


def config(mode="napt", filtering="address-dependent", pool="198.19.0.100/32", ports="1024-65535"):
    """The TOML config of a vector; most use the defaults."""
    return f"""[nat44]
inside = ["198.18.0.0/24"]
pool = ["{pool}"]
mode = "{mode}"
filtering = "{filtering}"
ports = "{ports}"
static = [{{ inside = "198.18.0.10", outside = "198.19.0.10" }}]

[engine]
seed = 1
"""


# --- packet builders -----------------------------------------------------------------------
# TTL, TOS, DF and IP ID are set to non-default values so that a translator that touched them
# would show. Callers give the same `id` to an input packet and its expected output.

def ip(src, dst, id, ttl=61, tos=0x28, df=True, **kw):
    return IP(src=src, dst=dst, id=id, ttl=ttl, tos=tos, flags="DF" if df else 0, **kw)


def udp(src, sport, dst, dport, id, payload=b"xlat-udp", chksum=None, **kw):
    return ip(src, dst, id, **kw) / UDP(sport=sport, dport=dport, chksum=chksum) / Raw(payload)


def tcp(src, sport, dst, dport, id, flags, seq=1000, ack=0, payload=b"", chksum=None, **kw):
    pkt = ip(src, dst, id, **kw) / TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack,
                                       window=8192, chksum=chksum)
    return pkt / Raw(payload) if payload else pkt


def echo(src, dst, id, ident, seq=1, reply=False, **kw):
    return ip(src, dst, id, **kw) / ICMP(type=0 if reply else 8, id=ident, seq=seq) / Raw(b"ping-xlat")


def icmp_error(src, dst, id, embedded, type=3, code=3, **kw):
    """An ICMP error carrying `embedded` (a packet, serialised with its own checksums) whole."""
    return ip(src, dst, id, df=False, **kw) / ICMP(type=type, code=code) / Raw(bytes(embedded))


def raw_proto(src, dst, id, proto, payload):
    """A packet of a protocol NAPT cannot translate (only a static entry carries it)."""
    return ip(src, dst, id, proto=proto) / Raw(payload)


def fragments(datagram, sizes):
    """Splits an IP datagram (built unfragmented, so that scapy computes the L4 checksum over
    all of it) into fragments carrying `sizes` bytes of IP payload each (multiples of 8 except
    the last). Returns the fragments in order: the first one holds the L4 header."""
    d = IP(bytes(datagram))
    payload = bytes(d.payload)
    assert sum(sizes) == len(payload), (sizes, len(payload))
    out, off = [], 0
    for i, n in enumerate(sizes):
        last = i == len(sizes) - 1
        assert last or n % 8 == 0
        out.append(IP(src=d.src, dst=d.dst, id=d.id, ttl=d.ttl, tos=d.tos, proto=d.proto,
                      flags=0 if last else "MF", frag=off // 8) / Raw(payload[off:off + n]))
        off += n
    return out


def l4_checksum(pkt):
    """The correct L4 checksum scapy computes for `pkt` (rebuilt from bytes)."""
    p = IP(bytes(pkt))
    return p.payload.chksum


def ones_add(a, b):
    s = a + b
    return (s & 0xFFFF) + (s >> 16)


def with_l4_checksum(pkt, value):
    """`pkt` with its L4 checksum field forced to `value` (other checksums left as scapy made them)."""
    p = IP(bytes(pkt))
    p.payload.chksum = value
    return IP(bytes(p))


def raw(pkt):
    return bytearray(bytes(pkt))


def set_ip_checksum(b):
    b[10:12] = b"\0\0"
    s = sum(struct.unpack("!%dH" % ((b[0] & 0xF) * 2), bytes(b[:(b[0] & 0xF) * 4])))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    b[10:12] = struct.pack("!H", ~s & 0xFFFF)
    return b


# --- vectors -------------------------------------------------------------------------------

class Vector:
    def __init__(self, name, rule, cfg):
        self.name, self.rule, self.config = name, rule, cfg
        self.inp, self.out = [], []
        self.drops, self.events, self.random_port = {}, {}, []

    def xlat(self, t, pkt_in, pkt_out):
        """`pkt_in` at time t must leave as `pkt_out`."""
        self.inp.append((t, pkt_in))
        self.out.append((t, pkt_out))

    def send(self, t, pkt_in):
        """An input packet whose output (if any) is listed separately with `expect`."""
        self.inp.append((t, pkt_in))

    def expect(self, t, pkt_out):
        self.out.append((t, pkt_out))

    def drop(self, t, pkt_in, reason):
        self.inp.append((t, pkt_in))
        self.drops[reason] = self.drops.get(reason, 0) + 1

    def port_random(self, lo=1024, hi=65535, not_=None):
        """The last expected packet's source port or echo identifier (and so its L4 checksum) is
        the engine's choice: the expected packet holds 0 there."""
        self.random_port.append({"packet": len(self.out) - 1, "range": [lo, hi], "not": not_})


VECTORS = []


def vector(rule, toml=None, **cfg):
    """Registers a vector; `toml` is its whole config, else config(**cfg) (NAT44)."""
    def register(fn):
        VECTORS.append((fn.__name__, rule, toml if toml is not None else config(**cfg), fn))
        return fn
    return register


@vector("RFC 4787 REQ-1 (4.1): endpoint-independent mapping -- one inside address:port keeps "
        "one outside address:port towards every remote; replies from both remotes reach it")
def rfc4787_req1_eim_same_port_two_remotes(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=101), udp(POOL, 5000, R1, 53, id=101))
    v.xlat(1, udp(A, 5000, R2, 53, id=102), udp(POOL, 5000, R2, 53, id=102))
    v.xlat(2, udp(R1, 53, POOL, 5000, id=201), udp(R1, 53, A, 5000, id=201))
    v.xlat(3, udp(R2, 53, POOL, 5000, id=202), udp(R2, 53, A, 5000, id=202))
    v.events.update(mappings_created=1, outbound=2, inbound=2)


@vector("RFC 5382 REQ-1: endpoint-independent mapping for TCP -- two connections from one "
        "inside address:port to two remotes share one outside port")
def rfc5382_req1_tcp_eim_same_port_two_remotes(v):
    v.xlat(0, tcp(A, 40000, R1, 80, id=1, flags="S"), tcp(POOL, 40000, R1, 80, id=1, flags="S"))
    v.xlat(0, tcp(A, 40000, R2, 443, id=2, flags="S"), tcp(POOL, 40000, R2, 443, id=2, flags="S"))
    v.xlat(1, tcp(R2, 443, POOL, 40000, id=3, flags="SA", seq=9000, ack=1001),
           tcp(R2, 443, A, 40000, id=3, flags="SA", seq=9000, ack=1001))
    v.xlat(1, tcp(R1, 80, POOL, 40000, id=4, flags="SA", seq=7000, ack=1001),
           tcp(R1, 80, A, 40000, id=4, flags="SA", seq=7000, ack=1001))
    v.events.update(mappings_created=1, sessions_created=2)


@vector("RFC 4787 4.1 (port preservation) and RFC 5508 3.1 (ICMP identifier is the port): a "
        "source port or echo identifier inside nat44.ports and free is kept")
def rfc4787_4_1_port_preservation_udp_icmp(v):
    v.xlat(0, udp(A, 40000, R1, 53, id=1), udp(POOL, 40000, R1, 53, id=1))
    v.xlat(0, echo(A, R1, id=2, ident=0x1234), echo(POOL, R1, id=2, ident=0x1234))
    v.xlat(1, echo(R1, POOL, id=3, ident=0x1234, reply=True), echo(R1, A, id=3, ident=0x1234, reply=True))
    v.events.update(ports_preserved=2)


@vector("RFC 4787 4.1 / RFC 6056: a source port outside nat44.ports is remapped to a port in the "
        "range (value chosen by the engine)")
def rfc4787_4_1_port_outside_range_remapped(v):
    v.xlat(0, udp(A, 80, R1, 53, id=1), udp(POOL, 0, R1, 53, id=1))
    v.port_random(1024, 65535, not_=80)
    v.events.update(mappings_created=1, ports_preserved=0)


@vector("RFC 4787 4.1: port preservation cannot hold when two inside hosts use the same port -- "
        "the second gets another port (value chosen by the engine)")
def rfc4787_4_1_port_collision_second_host_remapped(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(1, udp(C, 5000, R1, 53, id=2), udp(POOL, 0, R1, 53, id=2))
    v.port_random(1024, 65535, not_=5000)
    # A's mapping still owns pool:5000: R1's reply to it goes to A, not C.
    v.xlat(2, udp(R1, 53, POOL, 5000, id=3), udp(R1, 53, A, 5000, id=3))
    v.events.update(mappings_created=2, ports_preserved=1)


# With nat44.ports = "1024-1024" the one free port per protocol is 1024, so a source port or
# identifier outside the range is remapped to a known value: these vectors check every rewrite
# that a port change implies (L4 and ICMP checksums, embedded packets, fragments, hairpins).
ONE_PORT = "1024-1024"
P = 1024


@vector("RFC 3022 2.2 / RFC 1624: NAPT rewrites the TCP/UDP source port, updating the "
        "checksums, and reverts it on replies; a bad UDP checksum stays bad by the same offset",
        ports=ONE_PORT)
def rfc3022_napt_port_remapped_udp_tcp(v):
    v.xlat(0, udp(A, 80, R1, 53, id=1), udp(POOL, P, R1, 53, id=1))
    v.xlat(1, udp(R1, 53, POOL, P, id=2), udp(R1, 53, A, 80, id=2))
    v.xlat(2, tcp(A, 22, R1, 80, id=3, flags="S"), tcp(POOL, P, R1, 80, id=3, flags="S"))
    v.xlat(3, tcp(R1, 80, POOL, P, id=4, flags="SA", seq=7000, ack=1001),
           tcp(R1, 80, A, 22, id=4, flags="SA", seq=7000, ack=1001))
    k = 0x0100
    pin, pout = udp(A, 80, R1, 53, id=7, payload=b"bad"), udp(POOL, P, R1, 53, id=7, payload=b"bad")
    v.xlat(6, with_l4_checksum(pin, ones_add(l4_checksum(pin), k)),
           with_l4_checksum(pout, ones_add(l4_checksum(pout), k)))
    v.events.update(mappings_created=2, ports_preserved=0)


@vector("RFC 5508 3.1: ICMP query identifiers are not ports -- nat44.ports bounds TCP/UDP "
        "only, so an echo identifier outside the port range is kept when free, and the reply and "
        "an ICMP error quoting the echo map back", ports=ONE_PORT)
def rfc5508_icmp_identifier_not_bound_by_port_range(v):
    v.xlat(0, echo(A, R1, id=1, ident=7, ttl=1), echo(POOL, R1, id=1, ident=7, ttl=1))
    v.xlat(1, echo(R1, POOL, id=2, ident=7, reply=True), echo(R1, A, id=2, ident=7, reply=True))
    v.xlat(2, icmp_error(RTR, POOL, id=3, type=11, code=0, embedded=echo(POOL, R1, id=1, ident=7, ttl=1)),
           icmp_error(RTR, A, id=3, type=11, code=0, embedded=echo(A, R1, id=1, ident=7, ttl=1)))
    v.events.update(icmp_errors_translated=1, ports_preserved=1)


@vector("RFC 5508 3.1 / RFC 3022 2.2: two inside hosts using the same echo identifier -- the "
        "second gets another one (value chosen by the engine, ICMP checksum updated); replies to "
        "the first still reach the first")
def rfc5508_icmp_identifier_collision_remapped(v):
    v.xlat(0, echo(A, R1, id=1, ident=0x5555), echo(POOL, R1, id=1, ident=0x5555))
    v.xlat(1, echo(C, R1, id=2, ident=0x5555), echo(POOL, R1, id=2, ident=0))
    v.port_random(0, 65535, not_=0x5555)
    v.xlat(2, echo(R1, POOL, id=3, ident=0x5555, reply=True), echo(R1, A, id=3, ident=0x5555, reply=True))
    v.events.update(mappings_created=2, ports_preserved=1)


@vector("RFC 4787 4.1 / RFC 3022 2.2: when no port of the range is free on the pool address, a "
        "new mapping fails (the existing one keeps working)", ports=ONE_PORT)
def rfc4787_napt_port_range_exhausted(v):
    v.xlat(0, udp(A, 80, R1, 53, id=1), udp(POOL, P, R1, 53, id=1))
    v.drop(1, udp(C, 80, R1, 53, id=2), "pool_exhausted")
    v.xlat(2, udp(A, 80, R2, 53, id=3), udp(POOL, P, R2, 53, id=3))


@vector("RFC 5508 REQ-4/REQ-5 with a remapped port: the embedded port is reverted (inbound) or "
        "translated (outbound) together with the embedded UDP/TCP checksum",
        ports=ONE_PORT)
def rfc5508_icmp_error_port_remapped(v):
    v.xlat(0, udp(A, 80, R1, 53, id=1), udp(POOL, P, R1, 53, id=1))
    v.xlat(1, icmp_error(R1, POOL, id=2, embedded=udp(POOL, P, R1, 53, id=1)),
           icmp_error(R1, A, id=2, embedded=udp(A, 80, R1, 53, id=1)))
    v.xlat(2, tcp(A, 22, R1, 80, id=3, flags="S"), tcp(POOL, P, R1, 80, id=3, flags="S"))
    v.xlat(3, icmp_error(RTR, POOL, id=4, type=3, code=1, embedded=tcp(POOL, P, R1, 80, id=3, flags="S")),
           icmp_error(RTR, A, id=4, type=3, code=1, embedded=tcp(A, 22, R1, 80, id=3, flags="S")))
    v.xlat(4, udp(R1, 53, POOL, P, id=5), udp(R1, 53, A, 80, id=5))
    v.xlat(5, icmp_error(A, R1, id=6, embedded=udp(R1, 53, A, 80, id=5)),
           icmp_error(POOL, R1, id=6, embedded=udp(R1, 53, POOL, P, id=5)))
    v.events.update(icmp_errors_translated=3)


@vector("RFC 4787 REQ-9 with a remapped port: the hairpinned packet carries the sender's outside "
        "port, and the reply finds its way back to the inside port", ports=ONE_PORT)
def rfc4787_req9_hairpin_port_remapped(v):
    v.xlat(0, udp(A, 80, B_OUT, 53, id=1), udp(POOL, P, B_IN, 53, id=1))
    v.xlat(1, udp(B_IN, 53, POOL, P, id=2), udp(B_OUT, 53, A, 80, id=2))
    v.events.update(hairpinned=2)


@vector("RFC 4787 REQ-8 (5): address-dependent filtering admits any port of a remote address the "
        "inside endpoint has sent to, and nothing from other addresses")
def rfc4787_req8_filtering_address_dependent(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(1, udp(R1, 9999, POOL, 5000, id=2), udp(R1, 9999, A, 5000, id=2))
    v.drop(2, udp(R2, 53, POOL, 5000, id=3), "filtered")


@vector("RFC 4787 5: address-and-port-dependent filtering admits only the exact remote "
        "address:port the inside endpoint has sent to", filtering="address-and-port-dependent")
def rfc4787_5_filtering_address_and_port_dependent(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(1, udp(R1, 53, POOL, 5000, id=2), udp(R1, 53, A, 5000, id=2))
    v.drop(2, udp(R1, 54, POOL, 5000, id=3), "filtered")
    v.drop(3, udp(R2, 53, POOL, 5000, id=4), "filtered")


@vector("RFC 4787 5 / REQ-8: endpoint-independent filtering admits any remote to an existing "
        "mapping", filtering="endpoint-independent")
def rfc4787_5_filtering_endpoint_independent(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(1, udp(R2, 7777, POOL, 5000, id=2), udp(R2, 7777, A, 5000, id=2))


@vector("RFC 4787 5 / RFC 5382 REQ-4: unsolicited inbound traffic to a pool port with no mapping "
        "is dropped")
def rfc4787_5_unsolicited_inbound_no_mapping(v):
    v.drop(0, udp(R1, 53, POOL, 6000, id=1), "no_mapping")
    v.drop(1, tcp(R1, 80, POOL, 6001, id=2, flags="S"), "no_mapping")
    v.drop(2, echo(R1, POOL, id=3, ident=0x4321), "no_mapping")


@vector("RFC 4787 REQ-5 and REQ-6: a UDP mapping lives 300 s idle; outbound packets refresh it, "
        "and so do inbound ones (nat44 inbound_refresh default); after 300 s idle it is gone")
def rfc4787_req5_udp_timeout_300s_refreshed_inbound(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(0, udp(A, 5001, R1, 53, id=11), udp(POOL, 5001, R1, 53, id=11))
    v.xlat(250, udp(R1, 53, POOL, 5000, id=2), udp(R1, 53, A, 5000, id=2))      # inbound refresh
    v.xlat(250, udp(A, 5001, R1, 53, id=12), udp(POOL, 5001, R1, 53, id=12))    # outbound refresh
    # 250 s after the refreshes at t=250 (500 s after creation): both still alive.
    v.xlat(500, udp(R1, 53, POOL, 5000, id=3), udp(R1, 53, A, 5000, id=3))
    v.xlat(500, udp(R1, 53, POOL, 5001, id=13), udp(R1, 53, A, 5001, id=13))
    # 400 s idle: expired.
    v.drop(900, udp(R1, 53, POOL, 5000, id=4), "no_mapping")
    v.drop(900, udp(R1, 53, POOL, 5001, id=14), "no_mapping")


@vector("RFC 5382 REQ-1/REQ-4 and RFC 6146 3.5.2.2: only a SYN creates a TCP session; the "
        "handshake then crosses in both directions")
def rfc5382_tcp_syn_only_creates(v):
    v.drop(0, tcp(A, 6000, R1, 80, id=1, flags="A", seq=5, ack=9), "tcp_no_session")
    v.xlat(1, tcp(A, 6001, R1, 80, id=2, flags="S"), tcp(POOL, 6001, R1, 80, id=2, flags="S"))
    v.xlat(2, tcp(R1, 80, POOL, 6001, id=3, flags="SA", seq=7000, ack=1001),
           tcp(R1, 80, A, 6001, id=3, flags="SA", seq=7000, ack=1001))
    v.xlat(3, tcp(A, 6001, R1, 80, id=4, flags="A", seq=1001, ack=7001, payload=b"GET / HTTP/1.0\r\n\r\n"),
           tcp(POOL, 6001, R1, 80, id=4, flags="A", seq=1001, ack=7001, payload=b"GET / HTTP/1.0\r\n\r\n"))
    v.events.update(sessions_created=1)


@vector("RFC 5382 REQ-5: an established TCP session lives 7440 s (2 h 4 min) idle, refreshed by "
        "traffic; after that it is gone")
def rfc5382_req5_tcp_established_timeout_7440s(v):
    v.xlat(0, tcp(A, 6000, R1, 80, id=1, flags="S"), tcp(POOL, 6000, R1, 80, id=1, flags="S"))
    v.xlat(1, tcp(R1, 80, POOL, 6000, id=2, flags="SA", seq=7000, ack=1001),
           tcp(R1, 80, A, 6000, id=2, flags="SA", seq=7000, ack=1001))
    v.xlat(2, tcp(A, 6000, R1, 80, id=3, flags="A", seq=1001, ack=7001),
           tcp(POOL, 6000, R1, 80, id=3, flags="A", seq=1001, ack=7001))
    # 6998 s idle, well past the transitory 240 s: alive because established.
    v.xlat(7000, tcp(R1, 80, POOL, 6000, id=4, flags="PA", seq=7001, ack=1001, payload=b"late"),
           tcp(R1, 80, A, 6000, id=4, flags="PA", seq=7001, ack=1001, payload=b"late"))
    # 7500 s idle: expired.
    v.drop(14500, tcp(R1, 80, POOL, 6000, id=5, flags="PA", seq=7005, ack=1001, payload=b"gone"),
           "no_mapping")


@vector("RFC 5382 REQ-5: a half-open (SYN sent, no answer) TCP session lives the transitory "
        "240 s; an answer at 200 s passes, one at 300 s finds no mapping")
def rfc5382_req5_tcp_transitory_timeout_240s(v):
    v.xlat(0, tcp(A, 6000, R1, 80, id=1, flags="S"), tcp(POOL, 6000, R1, 80, id=1, flags="S"))
    v.xlat(0, tcp(A, 6001, R1, 80, id=2, flags="S"), tcp(POOL, 6001, R1, 80, id=2, flags="S"))
    v.xlat(200, tcp(R1, 80, POOL, 6001, id=3, flags="SA", seq=7000, ack=1001),
           tcp(R1, 80, A, 6001, id=3, flags="SA", seq=7000, ack=1001))
    v.drop(300, tcp(R1, 80, POOL, 6000, id=4, flags="SA", seq=7000, ack=1001), "no_mapping")


@vector("RFC 5382 REQ-5 and RFC 6146 3.5.2.2: after FIN from both sides, or after an RST, a TCP "
        "session gets the transitory 240 s lifetime; an untouched established one keeps 7440 s")
def rfc5382_req5_tcp_close_and_rst_transitory(v):
    for port in (6000, 6001, 6002):
        v.xlat(0, tcp(A, port, R1, 80, id=port, flags="S"), tcp(POOL, port, R1, 80, id=port, flags="S"))
        v.xlat(1, tcp(R1, 80, POOL, port, id=port + 100, flags="SA", seq=7000, ack=1001),
               tcp(R1, 80, A, port, id=port + 100, flags="SA", seq=7000, ack=1001))
    # 6000 closes with FIN from both sides, 6001 is reset by the remote, 6002 stays open.
    v.xlat(3, tcp(A, 6000, R1, 80, id=1, flags="FA", seq=1001, ack=7001),
           tcp(POOL, 6000, R1, 80, id=1, flags="FA", seq=1001, ack=7001))
    v.xlat(4, tcp(R1, 80, POOL, 6000, id=2, flags="FA", seq=7001, ack=1002),
           tcp(R1, 80, A, 6000, id=2, flags="FA", seq=7001, ack=1002))
    v.xlat(5, tcp(R1, 80, POOL, 6001, id=3, flags="R", seq=7001),
           tcp(R1, 80, A, 6001, id=3, flags="R", seq=7001))
    v.drop(300, tcp(R1, 80, POOL, 6000, id=4, flags="A", seq=7002, ack=1002), "no_mapping")
    v.drop(300, tcp(R1, 80, POOL, 6001, id=5, flags="A", seq=7002, ack=1002), "no_mapping")
    v.xlat(300, tcp(R1, 80, POOL, 6002, id=6, flags="A", seq=7001, ack=1001),
           tcp(R1, 80, A, 6002, id=6, flags="A", seq=7001, ack=1001))


@vector("RFC 5508 3.1 / REQ-1: an ICMP query mapping lives 60 s idle (refreshed by the reply at "
        "30 s); a reply 70 s later finds no mapping")
def rfc5508_req1_icmp_query_timeout_60s(v):
    v.xlat(0, echo(A, R1, id=1, ident=0x2222), echo(POOL, R1, id=1, ident=0x2222))
    v.xlat(30, echo(R1, POOL, id=2, ident=0x2222, reply=True), echo(R1, A, id=2, ident=0x2222, reply=True))
    v.drop(100, echo(R1, POOL, id=3, ident=0x2222, seq=2, reply=True), "no_mapping")


@vector("RFC 5508 REQ-4 / RFC 3022 4.3: an inbound ICMP port unreachable about an outbound UDP "
        "flow goes to the inside host; the embedded packet is reverted (source address and port, "
        "embedded IP and UDP checksums) and the ICMP checksum recomputed")
def rfc5508_icmp_error_inbound_port_unreach(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(1, icmp_error(R1, POOL, id=2, embedded=udp(POOL, 5000, R1, 53, id=1)),
           icmp_error(R1, A, id=2, embedded=udp(A, 5000, R1, 53, id=1)))
    v.events.update(icmp_errors_translated=1)


@vector("RFC 5508 REQ-4 and 7 (traceroute): a time exceeded from a router on the path, about an "
        "outbound echo request, reaches the inside host with the embedded echo reverted")
def rfc5508_icmp_error_inbound_time_exceeded_echo(v):
    v.xlat(0, echo(A, R1, id=1, ident=0x3333, ttl=1), echo(POOL, R1, id=1, ident=0x3333, ttl=1))
    v.xlat(1, icmp_error(RTR, POOL, id=2, type=11, code=0,
                         embedded=echo(POOL, R1, id=1, ident=0x3333, ttl=1)),
           icmp_error(RTR, A, id=2, type=11, code=0,
                      embedded=echo(A, R1, id=1, ident=0x3333, ttl=1)))
    v.events.update(icmp_errors_translated=1)


@vector("RFC 5508 REQ-4 with RFC 792 quoting (IP header + 64 bits): an ICMP error that carries "
        "only the first 8 bytes of the UDP/TCP header is still translated; the embedded UDP "
        "checksum is updated, the embedded TCP one (not quoted) left alone")
def rfc5508_icmp_error_inbound_truncated_embedded(v):
    q = b"x" * 40  # a datagram longer than what the error quotes
    v.xlat(0, udp(A, 5000, R1, 53, id=1, payload=q), udp(POOL, 5000, R1, 53, id=1, payload=q))
    v.xlat(0, tcp(A, 6000, R1, 80, id=2, flags="S"), tcp(POOL, 6000, R1, 80, id=2, flags="S"))
    # Both quotes are cut from the whole packet, so the quoted checksum is the real one.
    v.xlat(1, icmp_error(R1, POOL, id=3, embedded=bytes(udp(POOL, 5000, R1, 53, id=1, payload=q))[:28]),
           icmp_error(R1, A, id=3, embedded=bytes(udp(A, 5000, R1, 53, id=1, payload=q))[:28]))
    v.xlat(2, icmp_error(RTR, POOL, id=4, type=3, code=1,
                         embedded=bytes(tcp(POOL, 6000, R1, 80, id=2, flags="S"))[:28]),
           icmp_error(RTR, A, id=4, type=3, code=1,
                      embedded=bytes(tcp(A, 6000, R1, 80, id=2, flags="S"))[:28]))
    v.events.update(icmp_errors_translated=2)


@vector("RFC 5508 REQ-4 / RFC 792: an ICMP error whose embedded packet is too short to name a "
        "session (less than an IP header, or less than the 8 bytes of ports) is dropped")
def rfc5508_icmp_error_malformed_dropped(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    quote = bytes(udp(POOL, 5000, R1, 53, id=1))
    v.drop(1, icmp_error(R1, POOL, id=2, embedded=quote[:10]), "icmp_error_malformed")
    v.drop(2, icmp_error(R1, POOL, id=3, embedded=quote[:24]), "icmp_error_malformed")


@vector("RFC 5508 REQ-4: an ICMP error whose embedded packet matches no mapping is dropped")
def rfc5508_icmp_error_no_session_dropped(v):
    v.drop(0, icmp_error(R1, POOL, id=1, embedded=udp(POOL, 7000, R1, 53, id=9)), "icmp_error_no_session")


@vector("RFC 5508 REQ-5 / RFC 3022 4.3: an ICMP error sent by an inside host about an inbound "
        "packet leaves with its source and the embedded destination (address, port, checksums) "
        "translated")
def rfc5508_icmp_error_outbound_port_unreach(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(1, udp(R1, 53, POOL, 5000, id=2, ttl=50), udp(R1, 53, A, 5000, id=2, ttl=50))
    v.xlat(2, icmp_error(A, R1, id=3, embedded=udp(R1, 53, A, 5000, id=2, ttl=50)),
           icmp_error(POOL, R1, id=3, embedded=udp(R1, 53, POOL, 5000, id=2, ttl=50)))
    v.events.update(icmp_errors_translated=1)


@vector("RFC 4787 REQ-9 / RFC 5508 REQ-7: hairpinning -- an inside host sends to another's outside "
        "(static) address; source becomes its own outside address:port, destination the other's "
        "inside address; the reply hairpins back")
def rfc4787_req9_hairpin_udp(v):
    v.xlat(0, udp(A, 5000, B_OUT, 53, id=1), udp(POOL, 5000, B_IN, 53, id=1))
    v.xlat(1, udp(B_IN, 53, POOL, 5000, id=2), udp(B_OUT, 53, A, 5000, id=2))
    v.events.update(hairpinned=2)


@vector("RFC 4787 REQ-9: hairpinning between two NAPT mappings -- each side sees the other's "
        "outside address:port (endpoint-independent filtering admits it)",
        filtering="endpoint-independent")
def rfc4787_req9_hairpin_napt_to_napt(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.xlat(1, udp(C, 6000, POOL, 5000, id=2), udp(POOL, 6000, A, 5000, id=2))
    v.xlat(2, udp(A, 5000, POOL, 6000, id=3), udp(POOL, 5000, C, 6000, id=3))
    v.events.update(hairpinned=2)


@vector("RFC 4787 REQ-9 and 5: a hairpinned packet passes the target mapping's filter like any "
        "inbound one -- with address-dependent filtering it is dropped unless the target has sent "
        "to the sender's outside address")
def rfc4787_req9_hairpin_filtered(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.drop(1, udp(C, 6000, POOL, 5000, id=2), "filtered")


@vector("RFC 2663 4.1.1 / RFC 3022 2.1: a static 1:1 entry translates the address only, both "
        "directions, any protocol, with no filtering")
def rfc2663_static_1to1_both_directions_any_protocol(v):
    v.xlat(0, udp(B_IN, 1234, R1, 53, id=1), udp(B_OUT, 1234, R1, 53, id=1))
    v.xlat(1, tcp(R2, 40000, B_OUT, 22, id=2, flags="S"), tcp(R2, 40000, B_IN, 22, id=2, flags="S"))
    v.xlat(2, tcp(B_IN, 22, R2, 40000, id=3, flags="SA", seq=5, ack=1001),
           tcp(B_OUT, 22, R2, 40000, id=3, flags="SA", seq=5, ack=1001))
    v.xlat(3, echo(B_IN, R1, id=4, ident=77), echo(B_OUT, R1, id=4, ident=77))
    gre = b"\x00\x00\x08\x00" + b"\x45" + b"\x00" * 19  # GRE header + a stub inner header
    v.xlat(4, raw_proto(B_IN, R1, id=5, proto=47, payload=gre), raw_proto(B_OUT, R1, id=5, proto=47, payload=gre))
    v.xlat(5, raw_proto(R2, B_OUT, id=6, proto=47, payload=gre), raw_proto(R2, B_IN, id=6, proto=47, payload=gre))
    v.events.update(static_translated=6)


@vector("RFC 5508 REQ-5 / RFC 3022 4.3 for a static entry: an ICMP error from the static host "
        "about an inbound packet has the embedded destination translated too")
def rfc5508_icmp_error_outbound_static(v):
    v.xlat(0, udp(R1, 40000, B_OUT, 161, id=1), udp(R1, 40000, B_IN, 161, id=1))
    v.xlat(1, icmp_error(B_IN, R1, id=2, embedded=udp(R1, 40000, B_IN, 161, id=1)),
           icmp_error(B_OUT, R1, id=2, embedded=udp(R1, 40000, B_OUT, 161, id=1)))
    v.events.update(icmp_errors_translated=1)


@vector("RFC 3022 2.1 (Basic NAT): mode \"pool\" binds the inside host to a pool address and "
        "keeps ports, even one outside nat44.ports", mode="pool")
def rfc3022_basic_nat_pool_mode_ports_kept(v):
    v.xlat(0, udp(A, 80, R1, 53, id=1), udp(POOL, 80, R1, 53, id=1))
    v.xlat(1, udp(R1, 53, POOL, 80, id=2), udp(R1, 53, A, 80, id=2))
    v.xlat(2, tcp(A, 6000, R1, 80, id=3, flags="S"), tcp(POOL, 6000, R1, 80, id=3, flags="S"))


@vector("RFC 3022 2.1: Basic NAT with one pool address serves one inside host at a time; a "
        "second host finds the pool exhausted", mode="pool")
def rfc3022_basic_nat_pool_exhausted(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.drop(1, udp(C, 5000, R1, 53, id=2), "pool_exhausted")
    v.xlat(2, udp(A, 5001, R2, 53, id=3), udp(POOL, 5001, R2, 53, id=3))


@vector("RFC 3022 2.1: in Basic NAT the pool address is bound to an inside host only while it "
        "has sessions; once they time out (UDP 300 s) another host can have it", mode="pool")
def rfc3022_basic_nat_address_released_after_timeout(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    v.drop(100, udp(C, 5000, R1, 53, id=2), "pool_exhausted")
    v.xlat(400, udp(C, 5000, R1, 53, id=3), udp(POOL, 5000, R1, 53, id=3))
    v.xlat(401, udp(R1, 53, POOL, 5000, id=4), udp(R1, 53, C, 5000, id=4))


@vector("RFC 3022 2.2 / RFC 5508 3: NAPT translates only TCP, UDP and ICMP queries and errors; "
        "another protocol, or an ICMP message that is neither, is dropped")
def rfc3022_napt_untranslatable_dropped(v):
    v.drop(0, raw_proto(A, R1, id=1, proto=47, payload=b"\x00\x00\x08\x00" + b"\0" * 20),
           "unsupported_protocol")
    router_adv = ip(A, R1, id=2) / ICMP(type=9, code=0) / Raw(b"\0" * 8)
    v.drop(1, router_adv, "unsupported_icmp")


@vector("RFC 2663 4.1.1: mode \"static\" translates static entries only; other inside hosts are "
        "dropped", mode="static")
def rfc2663_static_mode_only_static_entries(v):
    v.xlat(0, udp(B_IN, 5000, R1, 53, id=1), udp(B_OUT, 5000, R1, 53, id=1))
    v.drop(1, udp(A, 5000, R1, 53, id=2), "no_static_mapping")


def _frag_datagram(src, sport, dst, dport, id):
    # 8 (UDP header) + 48 bytes of payload: fragments of 24 + 24 + 8 bytes of IP payload.
    return udp(src, sport, dst, dport, id=id, df=False, payload=bytes(range(65, 65 + 48)))


@vector("RFC 4787 REQ-14: a UDP datagram in 3 fragments crosses NAPT; every fragment gets the new "
        "address, the first also the port and the checksum of the whole datagram")
def rfc4787_req14_fragments_in_order(v):
    fin = fragments(_frag_datagram(A, 5000, R1, 53, id=0x7001), [24, 24, 8])
    fout = fragments(_frag_datagram(POOL, 5000, R1, 53, id=0x7001), [24, 24, 8])
    for t, (i, o) in enumerate(zip(fin, fout)):
        v.xlat(t * 0.001, i, o)
    v.events.update(fragments=3)


@vector("RFC 4787 REQ-14 with a remapped port: only the first fragment carries the UDP header, "
        "so only it gets the new port and checksum; all get the new address", ports=ONE_PORT)
def rfc4787_req14_fragments_port_remapped(v):
    fin = fragments(_frag_datagram(A, 80, R1, 53, id=0x7005), [24, 24, 8])
    fout = fragments(_frag_datagram(POOL, P, R1, 53, id=0x7005), [24, 24, 8])
    for t, (i, o) in enumerate(zip(fin, fout)):
        v.xlat(t * 0.001, i, o)
    # Out of order, second datagram of the same flow: held, then emitted after the first.
    f1, f2, f3 = fragments(_frag_datagram(A, 80, R1, 53, id=0x7006), [24, 24, 8])
    g1, g2, g3 = fragments(_frag_datagram(POOL, P, R1, 53, id=0x7006), [24, 24, 8])
    v.send(1.0, f2)
    v.send(1.001, f3)
    v.send(1.002, f1)
    for g in (g1, g2, g3):
        v.expect(1.002, g)
    v.events.update(fragments=6, fragments_held=2)


@vector("RFC 4787 REQ-14: fragments arriving before their first fragment are held and leave right "
        "after it, in arrival order")
def rfc4787_req14_fragments_out_of_order(v):
    f1, f2, f3 = fragments(_frag_datagram(A, 5000, R1, 53, id=0x7002), [24, 24, 8])
    g1, g2, g3 = fragments(_frag_datagram(POOL, 5000, R1, 53, id=0x7002), [24, 24, 8])
    v.send(0.0, f3)
    v.send(0.001, f2)
    v.send(0.002, f1)
    v.expect(0.002, g1)
    v.expect(0.002, g3)
    v.expect(0.002, g2)
    v.events.update(fragments_held=2, fragments=3)


@vector("RFC 4787 REQ-14: inbound fragments of a reply are translated back; the first fragment "
        "gets the inside port and the updated checksum")
def rfc4787_req14_fragments_inbound(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1))
    fin = fragments(_frag_datagram(R1, 53, POOL, 5000, id=0x7003), [24, 24, 8])
    fout = fragments(_frag_datagram(R1, 53, A, 5000, id=0x7003), [24, 24, 8])
    for t, (i, o) in enumerate(zip(fin, fout)):
        v.xlat(1 + t * 0.001, i, o)


@vector("RFC 4787 REQ-14: a non-first fragment whose first fragment never comes is held at most "
        "timeouts.fragment (2 s) and then dropped")
def rfc4787_req14_fragment_no_first_expires(v):
    _, f2, _ = fragments(_frag_datagram(A, 5000, R1, 53, id=0x7004), [24, 24, 8])
    v.drop(0, f2, "fragment_no_first")
    v.xlat(5, udp(A, 5001, R1, 53, id=2), udp(POOL, 5001, R1, 53, id=2))


@vector("RFC 1624 3: a bad UDP/TCP checksum is not repaired: the incremental update carries the "
        "same error through (expected = correct checksum of the translated packet + the same offset)")
def rfc1624_bad_l4_checksum_stays_bad(v):
    k = 0x0100  # the one's-complement error added to the correct checksum
    for i, (pin, pout) in enumerate([
        (udp(A, 5000, R1, 53, id=1), udp(POOL, 5000, R1, 53, id=1)),
        (tcp(A, 6000, R1, 80, id=2, flags="S"), tcp(POOL, 6000, R1, 80, id=2, flags="S")),
    ]):
        bad_in = ones_add(l4_checksum(pin), k)
        bad_out = ones_add(l4_checksum(pout), k)
        assert bad_in not in (0, 0xFFFF) and bad_out not in (0, 0xFFFF)
        v.xlat(i, with_l4_checksum(pin, bad_in), with_l4_checksum(pout, bad_out))


@vector("RFC 768 / RFC 1624: a UDP checksum of 0 (none computed) stays 0 across the NAT, both ways")
def rfc768_udp_zero_checksum_stays_zero(v):
    v.xlat(0, udp(A, 5000, R1, 53, id=1, chksum=0), udp(POOL, 5000, R1, 53, id=1, chksum=0))
    v.xlat(1, udp(R1, 53, POOL, 5000, id=2, chksum=0), udp(R1, 53, A, 5000, id=2, chksum=0))


@vector("RFC 1812 5.2.2: a packet whose IPv4 header checksum does not verify is dropped")
def rfc1812_bad_ip_checksum_dropped(v):
    b = raw(udp(A, 5000, R1, 53, id=1))
    b[10] ^= 0x5A
    v.drop(0, Raw(bytes(b)), "bad_ip_checksum")
    v.xlat(1, udp(A, 5000, R1, 53, id=2), udp(POOL, 5000, R1, 53, id=2))


@vector("RFC 791 3.1 / RFC 1812 5.2.2: malformed IPv4 headers (truncated, IHL < 5, total length "
        "beyond the bytes or below the header, version not 4) are dropped, each with its reason")
def rfc791_malformed_ipv4_dropped(v):
    good = raw(udp(A, 5000, R1, 53, id=1))
    v.drop(0, Raw(bytes(good[:12])), "truncated")
    ihl4 = bytearray(good)
    ihl4[0] = 0x44
    v.drop(1, Raw(bytes(set_ip_checksum(ihl4))), "bad_ihl")
    longer = bytearray(good)
    longer[2:4] = struct.pack("!H", len(good) + 100)
    v.drop(2, Raw(bytes(set_ip_checksum(longer))), "bad_total_length")
    shorter = bytearray(good)
    shorter[2:4] = struct.pack("!H", 12)
    v.drop(3, Raw(bytes(set_ip_checksum(shorter))), "bad_total_length")
    v6 = bytearray(good)
    v6[0] = 0x65
    v.drop(4, Raw(bytes(v6)), "not_ipv4")
    v.xlat(5, udp(A, 5000, R1, 53, id=2), udp(POOL, 5000, R1, 53, id=2))


@vector("RFC 1858 / RFC 768: an unfragmented UDP packet too short for its 8-byte header is dropped")
def rfc768_rfc793_truncated_l4_header_dropped(v):
    hdr = ip(A, R1, id=1, proto=17) / Raw(b"\x13\x88\x00\x35")  # 4 bytes: ports only
    v.drop(0, hdr, "truncated_l4")
    tcp_short = ip(A, R1, id=2, proto=6) / Raw(b"\x17\x70\x00\x50" + b"\x00" * 8)  # 12 of 20 bytes
    v.drop(1, tcp_short, "truncated_l4")


@vector("RFC 791 3.1: IPv4 options (IHL 6) are carried through; the L4 header is found after them")
def rfc791_ip_options_translated(v):
    opt = [IPOption_Router_Alert()]
    v.xlat(0, udp(A, 5000, R1, 53, id=1, options=opt), udp(POOL, 5000, R1, 53, id=1, options=opt))
    v.xlat(1, udp(R1, 53, POOL, 5000, id=2, options=opt), udp(R1, 53, A, 5000, id=2, options=opt))


@vector("RFC 2663 2 / RFC 3022: traffic neither from an inside address nor to a pool or static "
        "outside address is not ours and is dropped")
def rfc2663_not_ours_dropped(v):
    v.drop(0, udp("192.0.2.1", 5000, "203.0.113.1", 53, id=1), "not_ours")
    v.drop(1, udp(R1, 53, "198.19.0.99", 5000, id=2), "not_ours")
    v.drop(2, udp("198.18.1.5", 5000, R1, 53, id=3), "not_ours")  # next to, not in, the inside /24


# --- SIIT (RFC 7915, RFC 6052, RFC 7757) and NAT64 (RFC 6146) ---------------------------------
# The IPv6-only side is 2001:2:0:1::/64 (clients) and 2001:2:0:6::/124 (SIIT's EAM servers); the
# IPv4 side 198.19.0.0/24. IPv4 hosts appear to IPv6 in the pref64 2001:2:0:64::/96 (RFC 6052
# network-specific prefix: the well-known 64:ff9b::/96 may not carry these addresses, 3.1).
# Input packets carry TOS / traffic class, TTL / hop limit and flow labels that a translator
# must map (traffic class <-> TOS, hop limit = TTL - 1, flow label 0, identification 0 + DF for
# unfragmented IPv6 -> IPv4); expected packets are built with the translated fields.

PREF = "2001:2:0:64::"
C1 = "2001:2:0:1::10"       # IPv6-only clients (NAT64)
C2 = "2001:2:0:1::11"
POOL4 = "198.19.0.101"      # NAT64 pool4
S4 = "198.19.0.2"           # IPv4 server ...
S6 = PREF + S4              # ... and its pref64 form
RTR4 = "198.19.0.1"         # a router on the IPv4 side
RTR6 = "2001:2:0:1::1"      # a router on the IPv6 side (no IPv4 form: RFC 6791)
H6 = "2001:2:0:6::5"        # SIIT: an IPv6 server with an EAM entry ...
H4 = "198.19.1.5"           # ... and its IPv4 address
H6B = "2001:2:0:6::6"       # a second EAM server ...
H4B = "198.19.1.6"
OWN4 = "192.0.2.1"          # SIIT: rfc6791, also its own ICMPv4 errors' source
OWN6 = PREF + OWN4


# errors=False: `unreachable_errors = false`, for vectors of drops that RFC 7915 4.4 / 5.4 would
# otherwise answer (those answers are checked by crates/engine/tests/{siit,nat64}.rs).
def config64(filtering="address-dependent", ports="1024-65535", prefix="2001:2:0:64::/96", mtu=1500,
             errors=True):
    quiet = "" if errors else "unreachable_errors = false\n"
    return f"""[tun]
mtu = {mtu}

[nat64]
prefix = "{prefix}"
pool4 = ["{POOL4}/32"]
ports = "{ports}"
filtering = "{filtering}"
{quiet}
[engine]
seed = 1
"""


def config_siit(prefix="2001:2:0:64::/96", mtu=1500, udp_zero="compute", errors=True,
                eam=("198.19.1.0/28", "2001:2:0:6::/124"), hairpin=None):
    quiet = "" if errors else "unreachable_errors = false\n"
    if hairpin:
        quiet += f'eam_hairpin = "{hairpin}"\n'
    return f"""[tun]
mtu = {mtu}

[siit]
prefix = "{prefix}"
eam = [{{ ipv4 = "{eam[0]}", ipv6 = "{eam[1]}" }}]
rfc6791 = "{OWN4}"
udp_zero_checksum = "{udp_zero}"
{quiet}
[engine]
seed = 1
"""


def ip6(src, dst, hlim=61, tc=0xB8, fl=0x12345, **kw):
    return IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=fl, **kw)


def ip6_out(src, dst, hlim=60, tc=0x28, **kw):
    """An IPv6 header as the translator writes it from IPv4: flow label 0 (RFC 7915 4.1)."""
    return IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0, **kw)


def ip4_out(src, dst, ttl=60, tos=0xB8, id=0, df=True, **kw):
    """An IPv4 header as the translator writes it from IPv6 (RFC 7915 5.1)."""
    return IP(src=src, dst=dst, ttl=ttl, tos=tos, id=id, flags="DF" if df else 0, **kw)


def u6(src, sport, dst, dport, payload=b"xlat-udp", hlim=61, chksum=None, **kw):
    return ip6(src, dst, hlim=hlim, **kw) / UDP(sport=sport, dport=dport, chksum=chksum) / Raw(payload)


def t6(src, sport, dst, dport, flags, seq=1000, ack=0, payload=b"", hlim=61):
    p = ip6(src, dst, hlim=hlim) / TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, window=8192)
    return p / Raw(payload) if payload else p


def e6(src, dst, ident, seq=1, reply=False, payload=b"ping-xlat", hlim=61):
    m = ICMPv6EchoReply if reply else ICMPv6EchoRequest
    return ip6(src, dst, hlim=hlim) / m(id=ident, seq=seq, data=payload)


# Expected translations: 6 -> 4 (TTL = hop limit - 1, TOS = traffic class, ID 0, DF).
def u64(src, sport, dst, dport, payload=b"xlat-udp", ttl=60, chksum=None):
    return ip4_out(src, dst, ttl=ttl) / UDP(sport=sport, dport=dport, chksum=chksum) / Raw(payload)


def t64(src, sport, dst, dport, flags, seq=1000, ack=0, payload=b"", ttl=60):
    p = ip4_out(src, dst, ttl=ttl) / TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, window=8192)
    return p / Raw(payload) if payload else p


def e64(src, dst, ident, seq=1, reply=False, payload=b"ping-xlat", ttl=60):
    return ip4_out(src, dst, ttl=ttl) / ICMP(type=0 if reply else 8, id=ident, seq=seq) / Raw(payload)


# Expected translations: 4 -> 6 (hop limit = TTL - 1, traffic class = TOS, flow label 0).
def u46(src, sport, dst, dport, payload=b"xlat-udp", hlim=60, tc=0x28):
    return ip6_out(src, dst, hlim=hlim, tc=tc) / UDP(sport=sport, dport=dport) / Raw(payload)


def t46(src, sport, dst, dport, flags, seq=1000, ack=0, payload=b"", hlim=60):
    p = ip6_out(src, dst, hlim=hlim) / TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, window=8192)
    return p / Raw(payload) if payload else p


def e46(src, dst, ident, seq=1, reply=False, payload=b"ping-xlat", hlim=60):
    m = ICMPv6EchoReply if reply else ICMPv6EchoRequest
    return ip6_out(src, dst, hlim=hlim) / m(id=ident, seq=seq, data=payload)


def icmp6_error(src, dst, err, embedded, hlim=61, tc=0xB8, fl=0x12345):
    """An ICMPv6 error (scapy layer `err`) quoting `embedded` (bytes or a packet) whole."""
    return IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=fl) / err / Raw(bytes(embedded))


def v6_fragments(datagram, sizes, ident, hlim=None, tc=None, fl=None):
    """Splits an IPv6 datagram (built whole, so scapy computes the upper-layer checksum over all
    of it) into fragments with a Fragment header, `sizes` bytes of its payload each."""
    d = IPv6(bytes(datagram))
    payload = bytes(d.payload)
    assert sum(sizes) == len(payload), (sizes, len(payload))
    out, off = [], 0
    for i, n in enumerate(sizes):
        last = i == len(sizes) - 1
        assert last or n % 8 == 0
        out.append(IPv6(src=d.src, dst=d.dst, hlim=d.hlim if hlim is None else hlim,
                        tc=d.tc if tc is None else tc, fl=d.fl if fl is None else fl)
                   / IPv6ExtHdrFragment(nh=d.nh, offset=off // 8, m=0 if last else 1, id=ident)
                   / Raw(payload[off:off + n]))
        off += n
    return out


def v4_fragments_of(datagram, sizes, id, ttl, tos, df=False):
    """Like fragments(), with the header fields given (for expected IPv6 -> IPv4 fragments)."""
    d = IP(bytes(datagram))
    payload = bytes(d.payload)
    assert sum(sizes) == len(payload), (sizes, len(payload))
    out, off = [], 0
    for i, n in enumerate(sizes):
        last = i == len(sizes) - 1
        flags = ("DF" if df else 0) if last else ("MF" if not df else "DF+MF")
        out.append(IP(src=d.src, dst=d.dst, id=id, ttl=ttl, tos=tos, proto=d.proto, flags=flags,
                      frag=off // 8) / Raw(payload[off:off + n]))
        off += n
    return out


def own_icmp4(src, dst, type, code, orig, **kw):
    """The translator's own ICMPv4 error about `orig` (RFC 7915 4.4; RFC 1812 4.3.2.3: at most
    576 bytes): TOS 0, ID 0, no DF, TTL 64."""
    return IP(src=src, dst=dst, tos=0, id=0, flags=0, ttl=64) / ICMP(type=type, code=code, **kw) / Raw(bytes(orig)[:548])


def own_icmp6(src, dst, err, orig):
    """The translator's own ICMPv6 error about `orig` (RFC 4443 2.4 c: at most 1280 bytes)."""
    return IPv6(src=src, dst=dst, tc=0, fl=0, hlim=64) / err / Raw(bytes(orig)[:1232])


# --- SIIT vectors -------------------------------------------------------------------------------

@vector("RFC 7915 5.1 / RFC 7757 3.2 / RFC 6052 2.2: SIIT IPv6 -> IPv4 for UDP and TCP: "
        "EAM source, pref64 destination; TOS = traffic class, TTL = hop limit - 1, ID 0, DF set, "
        "ports and payload kept, checksums follow the pseudo-header", toml=config_siit())
def rfc7915_5_1_siit_udp_tcp_6to4(v):
    v.xlat(0, u6(H6, 5000, S6, 53), u64(H4, 5000, S4, 53))
    v.xlat(1, t6(H6, 40000, S6, 80, "S"), t64(H4, 40000, S4, 80, "S"))
    v.events.update(ipv6_to_ipv4=2)


@vector("RFC 7915 4.1 / RFC 7757 3.2: SIIT IPv4 -> IPv6, connections started on the IPv4 side "
        "(EAM destination, pref64 source); traffic class = TOS, flow label 0, hop limit = TTL - 1; "
        "IPv4 options are dropped", toml=config_siit())
def rfc7915_4_1_siit_udp_tcp_4to6_ipv4_initiated(v):
    v.xlat(0, tcp(S4, 40000, H4, 80, id=1, flags="S"), t46(S6, 40000, H6, 80, "S"))
    v.xlat(1, t6(H6, 80, S6, 40000, "SA", seq=7000, ack=1001), t64(H4, 80, S4, 40000, "SA", seq=7000, ack=1001))
    opt = [IPOption_Router_Alert()]
    v.xlat(2, udp(S4, 53, H4, 5000, id=3, options=opt), u46(S6, 53, H6, 5000))
    v.events.update(ipv4_to_ipv6=2, ipv6_to_ipv4=1)


@vector("RFC 7915 4.2 / 5.2: ICMPv4 echo <-> ICMPv6 echo (types 8/0 <-> 128/129, the ICMPv6 "
        "checksum gains / loses the pseudo-header)", toml=config_siit())
def rfc7915_4_2_5_2_siit_echo_both_ways(v):
    v.xlat(0, e6(H6, S6, 0x4242), e64(H4, S4, 0x4242))
    v.xlat(1, echo(S4, H4, id=2, ident=0x4242, reply=True), e46(S6, H6, 0x4242, reply=True))
    v.xlat(2, echo(S4, H4, id=3, ident=0x99), e46(S6, H6, 0x99))
    v.xlat(3, e6(H6, S6, 0x99, reply=True), e64(H4, S4, 0x99, reply=True))


@vector("RFC 7915 4.2 / 5.2: messages without a translation are dropped silently: ICMPv4 "
        "timestamp, information and router messages, ICMPv6 neighbor discovery and MLD",
        toml=config_siit())
def rfc7915_4_2_5_2_untranslatable_icmp_dropped(v):
    # (timestamps set: scapy fills an unset ts_ori with the time of day)
    v.drop(0, ip(S4, H4, id=1) / ICMP(type=13, ts_ori=0, ts_rx=0, ts_tx=0), "icmp_not_translated")
    v.drop(1, ip(S4, H4, id=2) / ICMP(type=9) / Raw(b"\0" * 8), "icmp_not_translated")
    v.drop(2, ip6(H6, S6, hlim=255) / ICMPv6ND_NS(tgt=S6), "icmp_not_translated")


@vector("RFC 7915 4.3 / 4.2: ICMPv4 errors become ICMPv6 errors with the quoted packet "
        "translated (its TTL kept): port unreachable -> 1/4, time exceeded -> 3/0, protocol "
        "unreachable -> parameter problem 4/1 pointing at Next Header (6), fragmentation needed "
        "-> packet too big with MTU + 20", toml=config_siit())
def rfc7915_4_3_siit_icmp_errors_4to6(v):
    out = udp(H4, 5000, S4, 53, id=0, ttl=60, tos=0xB8)   # what SIIT sent out for H6
    out6 = u6(H6, 5000, S6, 53, hlim=60, tc=0xB8, fl=0)   # ... and its IPv6 original
    v.xlat(0, icmp_error(S4, H4, id=1, embedded=out, type=3, code=3),
           icmp6_error(S6, H6, ICMPv6DestUnreach(code=4), out6, hlim=60, tc=0x28, fl=0))
    v.xlat(1, icmp_error(RTR4, H4, id=2, embedded=out, type=11, code=0),
           icmp6_error(PREF + RTR4, H6, ICMPv6TimeExceeded(code=0), out6, hlim=60, tc=0x28, fl=0))
    v.xlat(2, icmp_error(S4, H4, id=3, embedded=out, type=3, code=2),
           icmp6_error(S6, H6, ICMPv6ParamProblem(code=1, ptr=6), out6, hlim=60, tc=0x28, fl=0))
    big = udp(H4, 5000, S4, 53, id=0, ttl=60, tos=0xB8, payload=b"b" * 1400)
    big6 = u6(H6, 5000, S6, 53, hlim=60, tc=0xB8, fl=0, payload=b"b" * 1400)
    fn = ip(RTR4, H4, id=4, df=False) / ICMP(type=3, code=4, nexthopmtu=1400) / Raw(bytes(big)[:576 - 28])
    v.xlat(3, fn, IPv6(src=PREF + RTR4, dst=H6, hlim=60, tc=0x28, fl=0)
           / ICMPv6PacketTooBig(mtu=1420) / Raw(bytes(big6)[:576 - 28 + 20]))
    v.events.update(icmp_errors_translated=4)


@vector("RFC 7915 4.3 / RFC 4443 2.4 c: a translated ICMPv6 error is cut to 1280 bytes "
        "(payload length updated, checksum over what is left)", toml=config_siit())
def rfc7915_4_3_icmp_error_truncated_to_1280(v):
    big = udp(H4, 5000, S4, 53, id=0, ttl=60, tos=0xB8, payload=b"q" * 1400)
    big6 = u6(H6, 5000, S6, 53, hlim=60, tc=0xB8, fl=0, payload=b"q" * 1400)
    v.xlat(0, icmp_error(S4, H4, id=1, embedded=big, type=3, code=3),
           IPv6(src=S6, dst=H6, hlim=60, tc=0x28, fl=0) / ICMPv6DestUnreach(code=4) / Raw(bytes(big6)[:1280 - 48]))


@vector("RFC 7915 5.3 / 5.2: ICMPv6 errors become ICMPv4 errors with the quoted packet "
        "translated: port unreachable -> 3/3, packet too big 1400 -> fragmentation needed 1380, "
        "hop limit exceeded -> 11/0, parameter problem pointing at the hop limit (7) -> pointer 8",
        toml=config_siit())
def rfc7915_5_3_siit_icmpv6_errors_6to4(v):
    # H6 reports errors about what SIIT delivered to it from S4.
    got6 = u46(S6, 53, H6, 5000)
    got4 = udp(S4, 53, H4, 5000, id=0, ttl=60, tos=0x28)
    v.xlat(0, icmp6_error(H6, S6, ICMPv6DestUnreach(code=4), got6),
           ip4_out(H4, S4) / ICMP(type=3, code=3) / Raw(bytes(got4)))
    v.xlat(1, icmp6_error(H6, S6, ICMPv6PacketTooBig(mtu=1400), got6),
           ip4_out(H4, S4) / ICMP(type=3, code=4, nexthopmtu=1380) / Raw(bytes(got4)))
    v.xlat(2, icmp6_error(H6, S6, ICMPv6TimeExceeded(code=0), got6),
           ip4_out(H4, S4) / ICMP(type=11, code=0) / Raw(bytes(got4)))
    v.xlat(3, icmp6_error(H6, S6, ICMPv6ParamProblem(code=0, ptr=7), got6),
           ip4_out(H4, S4) / ICMP(type=12, code=0, ptr=8) / Raw(bytes(got4)))
    v.events.update(icmp_errors_translated=4)


@vector("RFC 6791: an ICMPv6 error from an IPv6 router whose address has no IPv4 form gets the "
        "configured rfc6791 address as its IPv4 source; other packets from it are dropped",
        toml=config_siit(errors=False))
def rfc6791_icmpv6_error_from_untranslatable_router(v):
    got6 = u46(S6, 53, H6, 5000, hlim=1)
    got4 = udp(S4, 53, H4, 5000, id=0, ttl=1, tos=0x28)
    v.xlat(0, icmp6_error(RTR6, S6, ICMPv6TimeExceeded(code=0), got6),
           ip4_out(OWN4, S4) / ICMP(type=11, code=0) / Raw(bytes(got4)))
    v.drop(1, u6(RTR6, 5000, S6, 53), "untranslatable_address")


@vector("RFC 7915 4.5: an unfragmented IPv4 UDP datagram without checksum gets one on its way "
        "to IPv6 (udp_zero_checksum = \"compute\"); a fragment without one is dropped",
        toml=config_siit())
def rfc7915_4_5_udp_zero_checksum_computed(v):
    v.xlat(0, udp(S4, 53, H4, 5000, id=1, chksum=0), u46(S6, 53, H6, 5000))
    first, _ = fragments(udp(S4, 53, H4, 5000, id=2, df=False, chksum=0, payload=b"z" * 24), [16, 16])
    v.drop(1, first, "udp_zero_checksum")
    v.events.update(udp_checksums_computed=1)


@vector("RFC 7915 4.5: with udp_zero_checksum = \"drop\", an IPv4 UDP datagram without "
        "checksum is dropped", toml=config_siit(udp_zero="drop"))
def rfc7915_4_5_udp_zero_checksum_dropped(v):
    v.drop(0, udp(S4, 53, H4, 5000, id=1, chksum=0), "udp_zero_checksum")


@vector("RFC 7915 5.1: Hop-by-Hop Options, Destination Options and a Routing header with "
        "Segments Left 0 are skipped; the protocol is the last header's Next Header",
        toml=config_siit())
def rfc7915_5_1_extension_headers_skipped(v):
    p = (ip6(H6, S6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrRouting(type=0, segleft=0, addresses=[S6])
         / IPv6ExtHdrDestOpt() / UDP(sport=5000, dport=53) / Raw(b"xlat-udp"))
    v.xlat(0, p, u64(H4, 5000, S4, 53))


@vector("RFC 7915 5.1: a Routing header with Segments Left > 0 is not translated; the translator "
        "sends ICMPv6 parameter problem 4/0 pointing at Segments Left", toml=config_siit())
def rfc7915_5_1_routing_header_parameter_problem(v):
    p = ip6(H6, S6) / IPv6ExtHdrRouting(type=0, segleft=1, addresses=[S6]) / UDP(sport=5000, dport=53) / Raw(b"x")
    v.xlat(0, p, own_icmp6(OWN6, H6, ICMPv6ParamProblem(code=0, ptr=43), p))
    v.events.update(icmp_errors_sent=1)
    v.drops["routing_header"] = 1


@vector("RFC 7915 4.1 (the translator is a router): an IPv4 packet with TTL 1 is answered with "
        "ICMPv4 time exceeded (from the rfc6791 address), not translated; an ICMP error with TTL 1 "
        "is dropped without an answer", toml=config_siit())
def rfc7915_4_1_ttl_exceeded_own_error(v):
    p = udp(S4, 53, H4, 5000, id=1, ttl=1)
    v.xlat(0, p, own_icmp4(OWN4, S4, 11, 0, p))
    err = icmp_error(S4, H4, id=2, ttl=1, embedded=udp(H4, 5000, S4, 53, id=0, ttl=60))
    v.drop(1, err, "hop_limit_exceeded")
    v.drops["hop_limit_exceeded"] = 2
    v.events.update(icmp_errors_sent=1)


@vector("RFC 7915 5.1 (the translator is a router): an IPv6 packet with hop limit 1 is answered "
        "with ICMPv6 time exceeded (from the pref64 form of the rfc6791 address)",
        toml=config_siit())
def rfc7915_5_1_hop_limit_exceeded_own_error(v):
    p = u6(H6, 5000, S6, 53, hlim=1)
    v.xlat(0, p, own_icmp6(OWN6, H6, ICMPv6TimeExceeded(code=0), p))
    v.drops["hop_limit_exceeded"] = 1
    v.events.update(icmp_errors_sent=1)


@vector("RFC 7915 4.1: an IPv4 packet with DF whose IPv6 form exceeds the next hop MTU (tun.mtu "
        "1400) is answered with fragmentation needed, MTU 1380 (1400 - 20)",
        toml=config_siit(mtu=1400))
def rfc7915_4_1_df_too_big_fragmentation_needed(v):
    p = udp(S4, 53, H4, 5000, id=1, payload=b"d" * 1353)   # 1381 bytes: 1401 as IPv6
    assert len(bytes(p)) == 1381
    v.xlat(0, p, own_icmp4(OWN4, S4, 3, 4, p, nexthopmtu=1380))
    ok = udp(S4, 53, H4, 5000, id=2, payload=b"d" * 1352)  # 1380: fits exactly
    v.xlat(1, ok, u46(S6, 53, H6, 5000, payload=b"d" * 1352))
    v.drops["too_big"] = 1


@vector("RFC 7915 5.1: an IPv6 packet whose IPv4 form exceeds the next hop MTU (tun.mtu 1400) "
        "is answered with packet too big, MTU 1420 (1400 + 20)", toml=config_siit(mtu=1400))
def rfc7915_5_1_too_big_packet_too_big(v):
    p = u6(H6, 5000, S6, 53, payload=b"p" * 1380)   # IPv4: 20 + 8 + 1380 = 1408
    v.xlat(0, p, own_icmp6(OWN6, H6, ICMPv6PacketTooBig(mtu=1420), p))
    v.drops["too_big"] = 1


def _frag_udp6(src, sport, dst, dport):
    return u6(src, sport, dst, dport, payload=bytes(range(65, 65 + 48)))


@vector("RFC 7915 5.1.1: IPv6 fragments become IPv4 fragments: identification = the low 16 bits "
        "of the Fragment header's, offset and MF copied, DF clear; the first keeps the UDP "
        "checksum of the whole datagram", toml=config_siit())
def rfc7915_5_1_1_fragments_6to4(v):
    fin = v6_fragments(_frag_udp6(H6, 5000, S6, 53), [24, 24, 8], ident=0xABCD7001)
    want = udp(H4, 5000, S4, 53, id=0x7001, ttl=60, tos=0xB8, df=False, payload=bytes(range(65, 65 + 48)))
    fout = v4_fragments_of(want, [24, 24, 8], id=0x7001, ttl=60, tos=0xB8)
    for t, (i, o) in enumerate(zip(fin, fout)):
        v.xlat(t * 0.001, i, o)
    v.events.update(fragments=3)


@vector("RFC 7915 4.1: IPv4 fragments become IPv6 fragments with a Fragment header "
        "(identification zero-extended, offset and M copied)", toml=config_siit())
def rfc7915_4_1_fragments_4to6(v):
    fin = fragments(_frag_datagram(S4, 53, H4, 5000, id=0x7002), [24, 24, 8])
    fout = v6_fragments(u46(S6, 53, H6, 5000, payload=bytes(range(65, 65 + 48))), [24, 24, 8],
                        ident=0x7002)
    for t, (i, o) in enumerate(zip(fin, fout)):
        v.xlat(t * 0.001, i, o)
    v.events.update(fragments=3)


@vector("RFC 7915 4.1: an IPv4 packet without DF that would exceed the lowest IPv6 MTU (1280) "
        "is fragmented into IPv6 fragments of at most 1280 bytes (a DF one is not)",
        toml=config_siit())
def rfc7915_4_1_no_df_fragmented_to_1280(v):
    payload = bytes(i % 251 for i in range(1392))
    v.send(0, udp(S4, 53, H4, 5000, id=0x0B0B, df=False, payload=payload))
    for f in v6_fragments(u46(S6, 53, H6, 5000, payload=payload), [1232, 168], ident=0x0B0B):
        v.expect(0, f)
    v.xlat(1, udp(S4, 53, H4, 5000, id=0x0B0C, payload=payload), u46(S6, 53, H6, 5000, payload=payload))
    v.events.update(fragments_created=2)


@vector("RFC 7915 4.2 / 5.2 with fragments (ping -s 3000): the ICMPv6 checksum covers the message "
        "length, which only the last fragment tells; the translated first fragment is held until "
        "then (checksum completed, RFC 1624) and the later ones pass at once", toml=config_siit())
def rfc7915_fragmented_echo_6to4(v):
    data = bytes(i % 256 for i in range(3000))
    fin = v6_fragments(e6(H6, S6, 0x77, payload=data), [1448, 1448, 112], ident=0x1234)
    want = ip4_out(H4, S4, df=False, id=0x1234) / ICMP(type=8, id=0x77, seq=1) / Raw(data)
    f1, f2, f3 = v4_fragments_of(want, [1448, 1448, 112], id=0x1234, ttl=60, tos=0xB8)
    v.send(0, fin[0])
    v.xlat(0.001, fin[1], f2)
    v.xlat(0.002, fin[2], f3)
    v.expect(0.002, f1)
    v.events.update(fragments=3, fragments_held=1)


@vector("RFC 7757 4 / RFC 7915 1.3: hairpinning -- an EAM server addressing another by the "
        "pref64 form of its IPv4 address gets its packet translated out and straight back in; "
        "the source takes its pref64 form so that the answer returns the same way",
        toml=config_siit())
def rfc7757_eam_hairpinning(v):
    v.xlat(0, u6(H6, 5000, PREF + H4B, 53), u46(PREF + H4, 5000, H6B, 53, hlim=60, tc=0xB8))
    v.xlat(1, u6(H6B, 53, PREF + H4, 5000), u46(PREF + H4B, 53, H6, 5000, hlim=60, tc=0xB8))


@vector("RFC 6052 3.1: with the well-known prefix 64:ff9b::/96, non-global IPv4 addresses "
        "(here 198.19.0.2, benchmarking) have no IPv6 form: both directions are dropped",
        toml=config_siit(prefix="64:ff9b::/96", errors=False))
def rfc6052_3_1_well_known_prefix_non_global_dropped(v):
    v.drop(0, u6(H6, 5000, "64:ff9b::" + S4, 53), "well_known_prefix_non_global")
    v.drop(1, udp(S4, 53, H4, 5000, id=1), "well_known_prefix_non_global")


@vector("RFC 7915 / issue 3 dispatch: IPv6 outside the pref64 and EAM prefixes, and IPv4 to no "
        "EAM or pool4 address, is not SIIT's", toml=config_siit())
def rfc7915_siit_not_ours_dropped(v):
    v.drop(0, u6(H6, 5000, "2001:2:0:65::1", 53), "not_ours")
    v.drop(1, udp(S4, 53, "198.19.1.99", 5000, id=1), "not_ours")


UNTRANS6 = "2001:2:0:7::9"   # SIIT: an IPv6 address in no EAM entry and outside the pref64


@vector("RFC 7915 4.4: an IPv4 packet SIIT discards because an address has no IPv6 form (the "
        "well-known prefix may not carry the benchmarking source, RFC 6052 3.1) is answered with "
        "ICMPv4 destination unreachable, code 1 (host unreachable), from the rfc6791 address, "
        "quoting it; a non-first fragment and an ICMPv4 error are dropped without an answer",
        toml=config_siit(prefix="64:ff9b::/96"))
def rfc7915_4_4_untranslatable_ipv4_answered_host_unreachable(v):
    p = udp(S4, 53, H4, 5000, id=1)
    v.xlat(0, p, own_icmp4(OWN4, S4, 3, 1, p))
    v.drop(1, ip(S4, H4, id=2, df=False, proto=17, frag=1) / Raw(b"12345678"),
           "well_known_prefix_non_global")
    err = icmp_error(S4, H4, id=3, embedded=udp(H4, 5000, S4, 53, id=4, ttl=60))
    v.drop(2, err, "well_known_prefix_non_global")
    v.drops["well_known_prefix_non_global"] = 3
    v.events.update(icmp_errors_sent=1)


@vector("RFC 7915 5.4: an IPv6 packet SIIT discards because its source has no IPv4 form is "
        "answered with ICMPv6 destination unreachable, code 3 (address unreachable), from the "
        "pref64 form of the rfc6791 address, quoting it (an echo request too); an ICMPv6 error "
        "is dropped without an answer", toml=config_siit())
def rfc7915_5_4_untranslatable_ipv6_answered_address_unreachable(v):
    p = u6(UNTRANS6, 5000, S6, 53)
    v.xlat(0, p, own_icmp6(OWN6, UNTRANS6, ICMPv6DestUnreach(code=3), p))
    q = e6(UNTRANS6, S6, 7)
    v.xlat(1, q, own_icmp6(OWN6, UNTRANS6, ICMPv6DestUnreach(code=3), q))
    err = icmp6_error(UNTRANS6, S6, ICMPv6DestUnreach(code=4), u46(S6, 53, UNTRANS6, 5000))
    v.drop(2, err, "untranslatable_address")
    v.drops["untranslatable_address"] = 3
    v.events.update(icmp_errors_sent=2)


@vector("RFC 7915 4.1 / 5.1 (the translator is a router) and RFC 1812 5.3.7: martian sources "
        "-- IPv4 loopback, this network, link-local, multicast; IPv6 loopback and link-local -- "
        "and the pref64 form of 127.0.0.1 are not translated, and not answered",
        toml=config_siit())
def rfc1812_5_3_7_martians_not_translated(v):
    for i, src in enumerate(["127.0.0.1", "0.0.0.7", "169.254.9.9", "224.0.0.5"]):
        v.drop(i, udp(src, 53, H4, 5000, id=i + 1), "martian_address")
    v.drop(4, echo("127.0.0.1", H4, id=5, ident=1), "martian_address")
    v.drop(5, u6("::1", 5000, S6, 53), "martian_address")
    v.drop(6, u6("fe80::1", 5000, S6, 53), "martian_address")
    v.drop(7, u6(H6, 5000, PREF + "127.0.0.1", 53), "martian_address")


@vector("RFC 6946 4 / RFC 7915 5.1: atomic fragments (a Fragment header with offset 0 and M "
        "clear) are whole packets: an echo request, a UDP datagram and an ICMPv6 error in one "
        "are translated as if unfragmented (DF and identification by 5.1; the echo's checksum "
        "loses the pseudo-header at once)", toml=config_siit())
def rfc6946_4_atomic_fragments_are_whole_packets(v):
    def atomic(src, dst, nh, upper):
        return ip6(src, dst) / IPv6ExtHdrFragment(nh=nh, offset=0, m=0, id=0x1234) / upper
    v.xlat(0, atomic(H6, S6, 58, ICMPv6EchoRequest(id=7, seq=1, data=b"ping-xlat")),
           e64(H4, S4, 7))
    v.xlat(1, atomic(H6, S6, 17, UDP(sport=5000, dport=53) / Raw(b"xlat-udp")),
           u64(H4, 5000, S4, 53))
    got6 = u46(S6, 53, H6, 5000)
    got4 = udp(S4, 53, H4, 5000, id=0, ttl=60, tos=0x28)
    v.xlat(2, atomic(H6, S6, 58, ICMPv6DestUnreach(code=4) / Raw(bytes(got6))),
           ip4_out(H4, S4) / ICMP(type=3, code=3) / Raw(bytes(got4)))
    v.events.update(icmp_errors_translated=1)


@vector("RFC 7915 4.2: the MTU of a translated fragmentation needed is never below 1280 -- an "
        "advertised 1000 and a zero MTU (RFC 1191 plateaus, none at or above 1280 below the "
        "quoted 1428 bytes) both become packet too big with MTU 1280", toml=config_siit())
def rfc7915_4_2_packet_too_big_never_below_1280(v):
    big = udp(H4, 5000, S4, 53, id=0, ttl=60, tos=0xB8, payload=b"b" * 1400)
    big6 = u6(H6, 5000, S6, 53, hlim=60, tc=0xB8, fl=0, payload=b"b" * 1400)
    for i, mtu in enumerate([1000, 0]):
        fn = ip(RTR4, H4, id=i + 1, df=False) / ICMP(type=3, code=4, nexthopmtu=mtu) / Raw(bytes(big)[:576 - 28])
        v.xlat(i, fn, IPv6(src=PREF + RTR4, dst=H6, hlim=60, tc=0x28, fl=0)
               / ICMPv6PacketTooBig(mtu=1280) / Raw(bytes(big6)[:576 - 28 + 20]))
    v.events.update(icmp_errors_translated=2)


@vector("RFC 1624 3: an incremental checksum update never yields 0x0000 where the full sum is "
        "0xffff -- an all-zero ICMPv6 echo reply becomes an ICMPv4 echo reply with checksum "
        "0xffff", toml=config_siit())
def rfc1624_all_zero_echo_reply_6to4_gets_0xffff(v):
    v.xlat(0, ip6(H6, S6) / ICMPv6EchoReply(id=0, seq=0),
           ip4_out(H4, S4) / ICMP(type=0, id=0, seq=0))


@vector("RFC 7757 3.2: an EAM entry whose IPv6 suffix (/120: 8 bits) is longer than its IPv4 "
        "suffix (/28: 4 bits) -- the IPv4 suffix fills the first bits after the IPv6 prefix, the "
        "rest zero; back, the bits beyond the IPv4 suffix are ignored",
        toml=config_siit(eam=("198.19.1.0/28", "2001:2:0:6::/120")))
def rfc7757_3_2_eam_suffixes_of_different_lengths(v):
    v.xlat(0, udp(S4, 53, H4, 5000, id=1), u46(S6, 53, "2001:2:0:6::50", 5000))
    v.xlat(1, u6("2001:2:0:6::5a", 5000, S6, 53), u64(H4, 5000, S4, 53))


@vector("RFC 7757 4.2 (simple EAM hairpinning, eam_hairpin = \"simple\"): an IPv6 node sending to "
        "the pref64 form of an EAM address leaves as IPv4; coming back, its IPv4 source -- EAM or "
        "not -- takes the pref64 form", toml=config_siit(hairpin="simple"))
def rfc7757_4_2_simple_eam_hairpinning(v):
    v.xlat(0, u6(H6, 5000, PREF + H4B, 53), u64(H4, 5000, H4B, 53))
    v.xlat(1, udp(H4, 5000, H4B, 53, id=1, ttl=59, tos=0xB8), u46(PREF + H4, 5000, H6B, 53, hlim=58, tc=0xB8))


@vector("RFC 7757 4 with eam_hairpin = \"off\": the packet leaves as IPv4 and comes back with the "
        "EAM form of its source, which the receiver never addressed (the problem 4.1 describes)",
        toml=config_siit(hairpin="off"))
def rfc7757_4_1_eam_hairpinning_off(v):
    v.xlat(0, u6(H6, 5000, PREF + H4B, 53), u64(H4, 5000, H4B, 53))
    v.xlat(1, udp(H4, 5000, H4B, 53, id=1, ttl=59, tos=0xB8), u46(H6, 5000, H6B, 53, hlim=58, tc=0xB8))


# --- NAT64 vectors ------------------------------------------------------------------------------

@vector("RFC 6146 3.5.1 / 3.6 / 3.7: NAT64 UDP -- the IPv6 client's source becomes pool4 (port "
        "kept, endpoint-independent mapping), the destination comes out of the pref64; the reply "
        "goes back with the server's pref64 form as source", toml=config64())
def rfc6146_3_5_1_udp_both_directions(v):
    v.xlat(0, u6(C1, 40000, S6, 53), u64(POOL4, 40000, S4, 53))
    v.xlat(1, udp(S4, 53, POOL4, 40000, id=2), u46(S6, 53, C1, 40000))
    v.events.update(outbound=1, inbound=1, mappings_created=1, sessions_created=1, ports_preserved=1)


@vector("RFC 6146 3.5.2: NAT64 TCP -- a SYN from IPv6 opens the session, the handshake and data "
        "cross both ways; only a SYN creates a session", toml=config64())
def rfc6146_3_5_2_tcp_handshake(v):
    v.drop(0, t6(C1, 40001, S6, 80, "A", seq=5, ack=9), "tcp_no_session")
    v.xlat(1, t6(C1, 40002, S6, 80, "S"), t64(POOL4, 40002, S4, 80, "S"))
    v.xlat(2, tcp(S4, 80, POOL4, 40002, id=3, flags="SA", seq=7000, ack=1001),
           t46(S6, 80, C1, 40002, "SA", seq=7000, ack=1001))
    req = b"GET / HTTP/1.0\r\n\r\n"
    v.xlat(3, t6(C1, 40002, S6, 80, "PA", seq=1001, ack=7001, payload=req),
           t64(POOL4, 40002, S4, 80, "PA", seq=1001, ack=7001, payload=req))
    v.events.update(sessions_created=1)


@vector("RFC 6146 3.5.2.2 (simplified, docs/RFC-COMPLIANCE.md): an unsolicited inbound SYN "
        "without a BIB entry is dropped at once instead of being held 6 s", toml=config64(errors=False))
def rfc6146_3_5_2_2_unsolicited_syn_dropped(v):
    v.drop(0, tcp(S4, 80, POOL4, 5555, id=1, flags="S"), "no_mapping")


@vector("RFC 6146 3.5.3: ICMP echo -- the identifier is the BIB's port; request out, reply back",
        toml=config64())
def rfc6146_3_5_3_icmp_echo(v):
    v.xlat(0, e6(C1, S6, 0x1357), e64(POOL4, S4, 0x1357))
    v.xlat(1, echo(S4, POOL4, id=2, ident=0x1357, reply=True), e46(S6, C1, 0x1357, reply=True))


@vector("RFC 6146 3.5 with nat64.ports = 1024-1024: a source port outside the range is remapped "
        "(checksum updated), and an ICMP error quoting the remapped packet maps back to the "
        "client's port", toml=config64(ports="1024-1024"))
def rfc6146_port_remapped_and_icmp_error(v):
    v.xlat(0, u6(C1, 80, S6, 53), u64(POOL4, 1024, S4, 53))
    quoted = udp(POOL4, 1024, S4, 53, id=0, ttl=60, tos=0xB8)
    v.xlat(1, icmp_error(S4, POOL4, id=2, embedded=quoted, type=3, code=3),
           icmp6_error(S6, C1, ICMPv6DestUnreach(code=4), u6(C1, 80, S6, 53, hlim=60, tc=0xB8, fl=0),
                       hlim=60, tc=0x28, fl=0))
    v.events.update(icmp_errors_translated=1)


@vector("RFC 6146 3.4 / RFC 7915 4.3: an ICMPv4 time exceeded from a router on the IPv4 path "
        "reaches the IPv6 client as ICMPv6 3/0 from the router's pref64 form, the quoted packet "
        "translated back to what the client sent", toml=config64())
def rfc6146_icmp_error_inbound_time_exceeded(v):
    v.xlat(0, u6(C1, 40000, S6, 53, hlim=2), u64(POOL4, 40000, S4, 53, ttl=1))
    quoted = udp(POOL4, 40000, S4, 53, id=0, ttl=1, tos=0xB8)
    v.xlat(1, icmp_error(RTR4, POOL4, id=2, type=11, code=0, embedded=quoted),
           icmp6_error(PREF + RTR4, C1, ICMPv6TimeExceeded(code=0),
                       u6(C1, 40000, S6, 53, hlim=1, tc=0xB8, fl=0), hlim=60, tc=0x28, fl=0))
    v.events.update(icmp_errors_translated=1)


@vector("RFC 6146 / RFC 7915 4.2: fragmentation needed (MTU 1400) from the IPv4 side becomes "
        "packet too big with MTU 1420 for the IPv6 client", toml=config64())
def rfc6146_fragmentation_needed_to_packet_too_big(v):
    v.xlat(0, t6(C1, 40003, S6, 80, "S"), t64(POOL4, 40003, S4, 80, "S"))
    quoted = t64(POOL4, 40003, S4, 80, "S")
    v.xlat(1, ip(RTR4, POOL4, id=2, df=False) / ICMP(type=3, code=4, nexthopmtu=1400) / Raw(bytes(quoted)),
           icmp6_error(PREF + RTR4, C1, ICMPv6PacketTooBig(mtu=1420),
                       ip6(C1, S6, hlim=60, fl=0) / TCP(sport=40003, dport=80, flags="S", seq=1000, window=8192),
                       hlim=60, tc=0x28, fl=0))


@vector("RFC 6146 3.4 / RFC 7915 5.3: an ICMPv6 port unreachable from the client about a "
        "packet from IPv4 becomes ICMPv4 3/3 from its pool4 address, quoting the packet as the "
        "server sent it", toml=config64())
def rfc6146_icmp_error_outbound_port_unreachable(v):
    v.xlat(0, u6(C1, 40000, S6, 53), u64(POOL4, 40000, S4, 53))
    v.xlat(1, udp(S4, 53, POOL4, 40000, id=2), u46(S6, 53, C1, 40000))
    v.xlat(2, icmp6_error(C1, S6, ICMPv6DestUnreach(code=4), u46(S6, 53, C1, 40000)),
           ip4_out(POOL4, S4) / ICMP(type=3, code=3) / Raw(bytes(udp(S4, 53, POOL4, 40000, id=0, ttl=60, tos=0x28))))
    v.drop(3, icmp6_error(C1, S6, ICMPv6DestUnreach(code=4), u46(S6, 54, C1, 40000)), "icmp_error_no_session")
    v.events.update(icmp_errors_translated=1)


@vector("RFC 6146 3.8: hairpinning -- an IPv6 client sends to the pref64 form of another client's "
        "pool4 transport address; the packet goes out and straight back in, with its own pool4 "
        "mapping as source", toml=config64(filtering="endpoint-independent"))
def rfc6146_3_8_hairpinning(v):
    v.xlat(0, u6(C2, 41000, S6, 53), u64(POOL4, 41000, S4, 53))
    v.xlat(1, u6(C1, 40000, PREF + POOL4, 41000), u46(PREF + POOL4, 40000, C2, 41000, tc=0xB8))
    v.xlat(2, u6(C2, 41000, PREF + POOL4, 40000), u46(PREF + POOL4, 41000, C1, 40000, tc=0xB8))
    v.events.update(hairpinned=2)


@vector("RFC 6146 3.5.1 / RFC 4787 5: address-dependent filtering -- the mapping admits replies "
        "from the address the client sent to, not from others", toml=config64(errors=False))
def rfc6146_filtering_address_dependent(v):
    v.xlat(0, u6(C1, 40000, S6, 53), u64(POOL4, 40000, S4, 53))
    v.xlat(1, udp(S4, 5353, POOL4, 40000, id=2), u46(S6, 5353, C1, 40000))
    v.drop(2, udp("198.19.0.3", 53, POOL4, 40000, id=3), "filtered")


@vector("RFC 6146 4 (UDP timeout 5 min): a mapping idle for 400 s is gone",
        toml=config64(errors=False))
def rfc6146_4_udp_timeout(v):
    v.xlat(0, u6(C1, 40000, S6, 53), u64(POOL4, 40000, S4, 53))
    v.xlat(200, udp(S4, 53, POOL4, 40000, id=2), u46(S6, 53, C1, 40000))
    v.drop(600, udp(S4, 53, POOL4, 40000, id=3), "no_mapping")


@vector("RFC 6146 3.4: fragments both ways -- later fragments take the first fragment's "
        "session; one that comes before its first is held until it does", toml=config64())
def rfc6146_3_4_fragments_both_ways(v):
    fin = v6_fragments(_frag_udp6(C1, 40000, S6, 53), [24, 24, 8], ident=0x00017001)
    want = udp(POOL4, 40000, S4, 53, id=0x7001, ttl=60, tos=0xB8, df=False, payload=bytes(range(65, 65 + 48)))
    f1, f2, f3 = v4_fragments_of(want, [24, 24, 8], id=0x7001, ttl=60, tos=0xB8)
    v.send(0, fin[2])
    v.xlat(0.001, fin[0], f1)
    v.expect(0.001, f3)
    v.xlat(0.002, fin[1], f2)
    rin = fragments(_frag_datagram(S4, 53, POOL4, 40000, id=0x7002), [24, 24, 8])
    rout = v6_fragments(u46(S6, 53, C1, 40000, payload=bytes(range(65, 65 + 48))), [24, 24, 8], ident=0x7002)
    for t, (i, o) in enumerate(zip(rin, rout)):
        v.xlat(1 + t * 0.001, i, o)
    v.events.update(fragments_held=1)


@vector("RFC 6146 / RFC 7915 (ping -s 4000 through NAT64): the IPv6 echo in 3 fragments leaves "
        "as 3 IPv4 fragments (the first held for the message length); the IPv4 reply in 3 "
        "fragments without DF becomes IPv6 fragments of at most 1280 bytes", toml=config64())
def rfc6146_ping_s_4000(v):
    data = bytes(i % 256 for i in range(4000))
    fin = v6_fragments(e6(C1, S6, 0x2468, payload=data), [1448, 1448, 1112], ident=0x5151)
    want = ip4_out(POOL4, S4, df=False, id=0x5151) / ICMP(type=8, id=0x2468, seq=1) / Raw(data)
    o1, o2, o3 = v4_fragments_of(want, [1448, 1448, 1112], id=0x5151, ttl=60, tos=0xB8)
    v.send(0, fin[0])
    v.xlat(0.001, fin[1], o2)
    v.xlat(0.002, fin[2], o3)
    v.expect(0.002, o1)
    reply = ip(S4, POOL4, id=0x6161, df=False) / ICMP(type=0, id=0x2468, seq=1) / Raw(data)
    r1, r2, r3 = fragments(reply, [1480, 1480, 1048])
    # Each 1480-byte IPv4 fragment becomes 1232 + 248 bytes of IPv6 fragment payload.
    back = v6_fragments(e46(S6, C1, 0x2468, reply=True, payload=data),
                        [1232, 248, 1232, 248, 1048], ident=0x6161)
    v.send(1, r1)            # first piece held (length unknown), second piece out
    v.expect(1, back[1])
    v.send(1.001, r2)
    v.expect(1.001, back[2])
    v.expect(1.001, back[3])
    v.send(1.002, r3)        # the last: out, then the held first piece, completed
    v.expect(1.002, back[4])
    v.expect(1.002, back[0])
    v.events.update(fragments_created=4)


@vector("RFC 7915 4.1 / 5.1 in NAT64: its own errors come from the pool4 address (ICMPv4) and "
        "its pref64 form (ICMPv6): hop limit 1 from IPv6, TTL 1 and DF too big (tun.mtu 1400) "
        "from IPv4", toml=config64(mtu=1400))
def rfc6146_own_icmp_errors(v):
    p = u6(C1, 40000, S6, 53, hlim=1)
    v.xlat(0, p, own_icmp6(PREF + POOL4, C1, ICMPv6TimeExceeded(code=0), p))
    v.xlat(1, u6(C1, 40000, S6, 53), u64(POOL4, 40000, S4, 53))
    q = udp(S4, 53, POOL4, 40000, id=2, ttl=1)
    v.xlat(2, q, own_icmp4(POOL4, S4, 11, 0, q))
    big = udp(S4, 53, POOL4, 40000, id=3, payload=b"d" * 1353)
    v.xlat(3, big, own_icmp4(POOL4, S4, 3, 4, big, nexthopmtu=1380))
    v.drops.update(hop_limit_exceeded=2, too_big=1)
    v.events.update(icmp_errors_sent=3)


@vector("RFC 7915 4.4 with RFC 6146's codes: IPv4 packets to pool4 that NAT64 discards are "
        "answered from the pool4 address -- no BIB entry for a UDP datagram or an echo request: "
        "3/1 (3.5.1, 3.5.3); a SYN without one: 3/3 (3.5.2.2); another protocol: 3/2 (3.5); "
        "refused by address-dependent filtering: 3/13; a TCP segment other than a SYN: silent",
        toml=config64())
def rfc7915_4_4_nat64_ipv4_discards_answered(v):
    for i, (p, code) in enumerate([(udp(S4, 53, POOL4, 6000, id=1), 1),
                                   (echo(S4, POOL4, id=2, ident=0x4242), 1),
                                   (tcp(S4, 80, POOL4, 6001, id=3, flags="S"), 3),
                                   (raw_proto(S4, POOL4, id=4, proto=47, payload=b"\0" * 8), 2)]):
        v.xlat(i, p, own_icmp4(POOL4, S4, 3, code, p))
    v.drop(4, tcp(S4, 80, POOL4, 6001, id=5, flags="A"), "no_mapping")
    v.xlat(5, u6(C1, 40000, S6, 53), u64(POOL4, 40000, S4, 53))
    other = udp(RTR4, 53, POOL4, 40000, id=6)
    v.xlat(6, other, own_icmp4(POOL4, RTR4, 3, 13, other))
    v.drops.update(no_mapping=4, unsupported_protocol=1, filtered=1)
    v.events.update(icmp_errors_sent=5)


@vector("RFC 7915 5.4 with RFC 6146's codes: IPv6 packets NAT64 discards are answered from the "
        "pref64 form of the pool4 address -- no BIB entry can be made (the one port taken): 1/3 "
        "(3.5.1); a protocol other than TCP, UDP, ICMPv6: 1/4 (3.5)",
        toml=config64(ports="1024-1024"))
def rfc7915_5_4_nat64_ipv6_discards_answered(v):
    v.xlat(0, u6(C1, 5000, S6, 53), u64(POOL4, 1024, S4, 53))
    p = u6(C2, 5000, S6, 53)
    v.xlat(1, p, own_icmp6(PREF + POOL4, C2, ICMPv6DestUnreach(code=3), p))
    q = ip6(C1, S6, nh=47) / Raw(b"\0" * 8)
    v.xlat(2, q, own_icmp6(PREF + POOL4, C1, ICMPv6DestUnreach(code=4), q))
    v.drops.update(pool_exhausted=1, unsupported_protocol=1)
    v.events.update(icmp_errors_sent=2)


@vector("RFC 6052 3.1 in NAT64: with the well-known prefix 64:ff9b::/96 a non-global IPv4 "
        "destination (198.19.0.2) is refused; a global one (8.8.8.8) is translated",
        toml=config64(prefix="64:ff9b::/96"))
def rfc6052_3_1_nat64_well_known_prefix(v):
    v.drop(0, u6(C1, 40000, "64:ff9b::" + S4, 53), "well_known_prefix_non_global")
    v.xlat(1, u6(C1, 40000, "64:ff9b::8.8.8.8", 53), u64(POOL4, 40000, "8.8.8.8", 53))



# --- output --------------------------------------------------------------------------------

def write_pcap(path, timed):
    """A classic pcap (microsecond timestamps), LINKTYPE_RAW (101): the bytes of each packet as
    scapy built them. Written by hand so that malformed packets need no link-type guessing and
    an empty capture still gets its file header."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        for t, p in timed:
            b = bytes(p)
            usec = round(t * 1_000_000)
            f.write(struct.pack("<IIII", T0 + usec // 1_000_000, usec % 1_000_000, len(b), len(b)))
            f.write(b)


def checksum_sanity(name, timed):
    """Warns when an expected checksum is 0x0000 or 0xFFFF (other than a UDP checksum of 0, which
    means none): those have two one's-complement forms, and an incremental update may
    legitimately produce the other one. Change the payload or the IP ID then."""
    if name.startswith("rfc1624_all_zero"):
        return  # 0xffff is what it checks (RFC 1624 3: never 0x0000 for a sum of 0xffff)
    for i, (_, p) in enumerate(timed):
        b = bytes(p)
        if len(b) >= 40 and b[0] >> 4 == 6:
            q6 = IPv6(b)
            l4 = q6.payload
            if isinstance(l4, (UDP, TCP)) or hasattr(l4, "cksum"):
                c = l4.chksum if isinstance(l4, (UDP, TCP)) else l4.cksum
                if c in (0, 0xFFFF):
                    print(f"warning: {name} packet {i}: {l4.name} checksum {c:#06x} is ambiguous", file=sys.stderr)
            continue
        if len(b) < 20 or b[0] >> 4 != 4:
            continue
        q = IP(b)
        sums = [("ip", q.chksum)]
        if isinstance(q.payload, (UDP, TCP, ICMP)):
            sums.append((q.payload.name, q.payload.chksum))
        for what, c in sums:
            if c == 0xFFFF or (c == 0 and not (what == "UDP")):
                print(f"warning: {name} packet {i}: {what} checksum {c:#06x} is ambiguous", file=sys.stderr)


def inet_checksum(b):
    """RFC 1071 over `b` (checksum field zeroed by the caller)."""
    if len(b) % 2:
        b = bytes(b) + b"\0"
    acc = sum(struct.unpack(f"!{len(b) // 2}H", bytes(b)))
    while acc >> 16:
        acc = (acc & 0xFFFF) + (acc >> 16)
    return ~acc & 0xFFFF


def rfc7915_df(b):
    """RFC 7915 5.1 on an expected IPv4 packet a translator made from IPv6: the helpers above
    write identification 0 and DF; a packet of at most 1260 bytes leaves with DF clear (its
    identification is the translator's choice, which the runner takes from the engine's
    output: `engine_ident`). The same for the packet an ICMPv4 error quotes (5.3), with the
    quoted header's and the ICMP checksum recomputed."""
    if len(b) < 20 or b[0] >> 4 != 4:
        return b
    b = bytearray(b)

    def clear_df(at):
        if len(b) < at + 20 or b[at + 4:at + 6] != b"\0\0" or b[at + 6:at + 8] != b"\x40\0":
            return False
        if struct.unpack("!H", b[at + 2:at + 4])[0] > 1260:
            return False
        b[at + 6] = 0
        ihl = (b[at] & 0xF) * 4
        b[at + 10:at + 12] = b"\0\0"
        b[at + 10:at + 12] = struct.pack("!H", inet_checksum(b[at:at + ihl]))
        return True

    clear_df(0)
    ihl = (b[0] & 0xF) * 4
    if b[9] == 1 and len(b) >= ihl + 28 and b[ihl] in (3, 11, 12) and clear_df(ihl + 8):
        b[ihl + 2:ihl + 4] = b"\0\0"
        b[ihl + 2:ihl + 4] = struct.pack("!H", inet_checksum(b[ihl:]))
    return bytes(b)


def main():
    manifest = []
    names = set()
    for name, rule, cfg, fn in VECTORS:
        assert name not in names, name
        names.add(name)
        v = Vector(name, rule, cfg)
        fn(v)
        engine_ident = "[siit]" in cfg or "[nat64]" in cfg
        if engine_ident:
            v.out = [(t, rfc7915_df(bytes(p))) for t, p in v.out]
        checksum_sanity(name, v.out)
        write_pcap(os.path.join(HERE, f"{name}.in.pcap"), v.inp)
        write_pcap(os.path.join(HERE, f"{name}.out.pcap"), v.out)
        manifest.append({
            "name": name,
            "rule": rule,
            "config": cfg,
            "drops": v.drops,
            "events": v.events,
            "random_port": v.random_port,
            "engine_ident": engine_ident,
        })
    # Remove pcaps of vectors that no longer exist.
    for f in os.listdir(HERE):
        if f.endswith(".pcap") and f.split(".")[0] not in names:
            os.remove(os.path.join(HERE, f))
    with open(os.path.join(HERE, "vectors.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"{len(manifest)} vectors written to {HERE}")


if __name__ == "__main__":
    main()
