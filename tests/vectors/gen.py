#!/usr/bin/env python3
"""Golden NAT44 vectors: pcap in -> expected pcap out, built by an independent oracle.

Every expected output packet is built here from scratch with the translated fields, and scapy
computes its checksums; nothing is copied from the engine's output. Run from anywhere:

    python3 tests/vectors/gen.py

It rewrites tests/vectors/NAME.in.pcap, NAME.out.pcap and vectors.json. crates/xlat/tests/vectors.rs
feeds each NAME.in.pcap through `xlat translate` and compares the result with NAME.out.pcap.

Pcaps are LINKTYPE_RAW (101): each record is one IPv4 packet. Timestamps carry the time the engine
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
    from scapy.all import ICMP, IP, TCP, UDP, Raw, IPOption_Router_Alert
except ImportError:  # a python3 other than Debian's (pyenv, venv): use Debian's python3-scapy
    sys.path.append("/usr/lib/python3/dist-packages")
    from scapy.all import ICMP, IP, TCP, UDP, Raw, IPOption_Router_Alert

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


def vector(rule, **cfg):
    def register(fn):
        VECTORS.append((fn.__name__, rule, config(**cfg), fn))
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
    for i, (_, p) in enumerate(timed):
        b = bytes(p)
        if len(b) < 20 or b[0] >> 4 != 4:
            continue
        q = IP(b)
        sums = [("ip", q.chksum)]
        if isinstance(q.payload, (UDP, TCP, ICMP)):
            sums.append((q.payload.name, q.payload.chksum))
        for what, c in sums:
            if c == 0xFFFF or (c == 0 and not (what == "UDP")):
                print(f"warning: {name} packet {i}: {what} checksum {c:#06x} is ambiguous", file=sys.stderr)


def main():
    manifest = []
    names = set()
    for name, rule, cfg, fn in VECTORS:
        assert name not in names, name
        names.add(name)
        v = Vector(name, rule, cfg)
        fn(v)
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
