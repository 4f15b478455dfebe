#!/usr/bin/env python3
"""Writes the fuzz seed corpus (fuzz/corpus/TARGET/seed-NAME) from the golden vectors.

Each vector's input capture (tests/vectors/NAME.in.pcap, tests/vectors/tunnel/...) becomes one
seed in the format of fuzz/src/lib.rs: a configuration variant byte matching the vector's
config, then one record per packet, with the time between packets as time-step records
(empty packets carry extra time). Deterministic; rerun after the vectors change:

    python3 fuzz/seeds.py
"""

import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_MS = [0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000]


def packets(path):
    """(time in ns, bytes) of every record of a classic pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",
              b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}[magic]
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    off, out = 24, []
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        out.append((sec * 10**9 + frac * (1 if nano else 1000), data[off:off + incl]))
        off += incl
    return out


def encode(variant, pkts):
    out = bytearray([variant])
    last = pkts[0][0] if pkts else 0
    for t, p in pkts:
        left_ms = max(0, (t - last) // 10**6)
        last = t
        # Empty records carry what one step cannot (each is a counted drop, nothing more).
        while left_ms >= STEP_MS[-1] * 2:
            out += bytes([7, 0, 0])
            left_ms -= STEP_MS[-1]
        step = max(i for i, ms in enumerate(STEP_MS) if ms <= left_ms)
        while left_ms - STEP_MS[step] >= 1_000 and step > 0:
            big = max(i for i, ms in enumerate(STEP_MS) if ms <= left_ms - STEP_MS[step])
            out += bytes([big, 0, 0])
            left_ms -= STEP_MS[big]
        out += bytes([step]) + struct.pack(">H", len(p)) + p
    return bytes(out)


def variant(cfg):
    """The fuzz configuration variant closest to a vector's TOML config (fuzz/src/lib.rs)."""
    if "[nat44]" in cfg:
        v = 0x20  # verify_ip_checksum, the default
        v |= {"napt": 0, "pool": 2, "static": 3}[cfg.split('mode = "')[1].split('"')[0]]
        v |= {"address-dependent": 0, "endpoint-independent": 1,
              "address-and-port-dependent": 2}[cfg.split('filtering = "')[1].split('"')[0]] << 2
        if 'ports = "1024-1024"' in cfg:
            v |= 0x10
        return "nat44", v
    if "[nat64]" in cfg:
        v = 0x20
        v |= 0x40 if "64:ff9b::/96" in cfg else 0
        v |= 0x10 if 'ports = "1024-1024"' in cfg else 0
        v |= 1 if "mtu = 1400" in cfg else 0
        return "nat64", v
    if "[siit]" in cfg:
        v = 1 if "mtu = 1400" in cfg else 0
        v |= 4 if 'udp_zero_checksum = "drop"' in cfg else 0
        return "siit", v
    if "[tunnel.6to4]" in cfg:
        v = 0 if "relay =" in cfg else 4
        v |= 8 if "relay_router = true" in cfg else 0
        return "tunnel", v
    if 'role = "router"' in cfg:
        return "tunnel", 1
    return "tunnel", 2


def main():
    corpus = os.path.join(ROOT, "fuzz", "corpus")
    for t in ["nat44", "nat64", "siit", "tunnel", "all"]:
        d = os.path.join(corpus, t)
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f.startswith("seed-"):
                    os.remove(os.path.join(d, f))
        os.makedirs(d, exist_ok=True)
    n = 0
    for sub in ["", "tunnel"]:
        vdir = os.path.join(ROOT, "tests", "vectors", sub)
        with open(os.path.join(vdir, "vectors.json")) as f:
            vectors = json.load(f)
        for vec in vectors:
            target, v = variant(vec["config"])
            pkts = packets(os.path.join(vdir, vec["name"] + ".in.pcap"))
            with open(os.path.join(corpus, target, "seed-" + vec["name"]), "wb") as f:
                f.write(encode(v, pkts))
            # The all-translators target gets every vector too, in its one address plan.
            with open(os.path.join(corpus, "all", "seed-" + vec["name"]), "wb") as f:
                f.write(encode(0, pkts))
            n += 1
    print(f"wrote seeds of {n} vectors under {os.path.relpath(corpus, ROOT)}")


if __name__ == "__main__":
    main()
