#!/usr/bin/env python3
"""Independent computation of the configuration digest test vectors in
docs/config-test-vectors.md, written from schemas.md alone (u32be framing,
sorted lists, Postcard with one-byte varints). Run: python3 scripts/config-vectors.py"""
import hashlib
import struct


def b(x: bytes) -> bytes:
    return struct.pack(">I", len(x)) + x


def lst(items, sort=True):
    items = sorted(items) if sort else list(items)
    return struct.pack(">I", len(items)) + b"".join(b(i) for i in items)


def pfx(a, n):
    return bytes(a) + bytes([n])


RFC1918 = [pfx([10, 0, 0, 0], 8), pfx([172, 16, 0, 0], 12), pfx([192, 168, 0, 0], 16)]
STORAGE = b"/home/user/.local/share/lazaret"
RUNTIME = b"/run/user/1000/lazaret"

out = {}
out["domain-id-v1/dev"] = hashlib.sha256(
    b"lazaret-domain-id-v1\0" + b(b"dev") + b(b"/home/user/project")).hexdigest()

pre = b"lazaret-configuration-fingerprint-v1\0" + b(b"dev") + b(STORAGE) + b(RUNTIME)
pre += b(b"registry.example/dev:1") + b"\x01"
# "A persistent-path item is bytes(path)"; lst() frames each item again.
pre += lst([b(p) for p in [b"/root", b"/usr", b"/var", b"/etc", b"/opt"]])
pre += lst([]) + lst([]) + lst([]) + lst(RFC1918) + b"\x00" + lst([])
pre += struct.pack(">I", 50000)
out["configuration-fingerprint-v1/minimal"] = hashlib.sha256(pre).hexdigest()

pre = b"lazaret-configuration-fingerprint-v1\0" + b(b"full") + b(STORAGE) + b(RUNTIME)
pre += b(b"registry.example/full@sha256:00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff") + b"\x00"
pre += lst([b(b"/usr"), b(b"/root")])
pre += lst([b(b"TOKEN") + b(b"HOST_TOKEN"), b(b"A_NAME") + b(b"HOST_A")])
pre += lst([
    b(b"/home/user/.local/share/lazaret/profiles/full/cache") + b(b"/root/.cache") + b"\x01\x01\x01",
    b(b"/home/user/.gitconfig") + b(b"/root/.gitconfig") + b"\x00\x00\x00",
])
pre += lst([pfx([1, 1, 1, 0], 24), pfx([172, 16, 5, 0], 24)])
pre += lst(RFC1918 + [pfx([9, 9, 9, 9], 32), pfx([8, 8, 4, 0], 24)])
pre += b"\x01"
pre += lst([
    b(b"/usr/bin/git") + lst([b(b"fetch"), b(b"--all")], sort=False) + b"\x01",
    b(b"/usr/bin/make") + lst([], sort=False) + b"\x00",
])
pre += struct.pack(">I", 1234)
out["configuration-fingerprint-v1/full"] = hashlib.sha256(pre).hexdigest()

FIXED = [([10, 137, 54, 2], 32, 0), ([10, 137, 54, 3], 32, 0), ([10, 137, 55, 0], 29, 1), ([10, 137, 55, 2], 32, 0)]
DENY = 1
ALLOW = 0


def policy(rules):
    sid = b"lazaret-derived-network-policy-v1"
    v = bytes([len(sid)]) + sid
    v += bytes([2, 0, 0, 1, 1]) + bytes([1, 0, 0])
    rules = sorted(rules, key=lambda r: (bytes(r[0]), r[1], r[2]))
    v += bytes([len(rules)])
    for a, n, act in rules:
        v += bytes([0, 4] + a + [n, act])
    v += bytes([1, 0, 4, 10, 137, 54, 3])
    return hashlib.sha256(sid + b"\0" + v).hexdigest()


base = [([10, 0, 0, 0], 8, DENY), ([172, 16, 0, 0], 12, DENY), ([192, 168, 0, 0], 16, DENY)] + FIXED
out["derived-network-policy-v1/minimal"] = policy(base)
out["derived-network-policy-v1/full"] = policy(base + [
    ([1, 1, 1, 0], 24, ALLOW), ([172, 16, 5, 0], 24, ALLOW), ([9, 9, 9, 9], 32, DENY), ([8, 8, 4, 0], 24, DENY)])

for k, v in out.items():
    print(f"{k}: {v}")
