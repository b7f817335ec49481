"""The pods fingerprint NodeResourceTopology exporters publish (``nodeTopologyPodsFingerprint``).

nfd-topology-updater and the resource-topology-exporter sign the set of pods they accounted for when they
computed ``available`` (k8stopologyawareschedwg/podfingerprint, version ``v001``): the xxHash64 of each
pod's name seeded with the xxHash64 of its namespace, the 64-bit values sorted, each written as 8 bytes
little-endian and the whole hashed again, hex-encoded behind ``pfp0v001``. A consumer that computes the
same signature over the pods it knows on a node learns whether the published ``available`` already
counts them, which is when the extender drops what it assumed at bind; the agent signs its own objects
the same way so any consumer can do the same.

xxHash64 is written out here (a few dozen lines) rather than adding a compiled dependency: a signature is
computed per topology event, never per scheduling request.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["ATTRIBUTE", "METHOD_ATTRIBUTE", "fingerprint", "xxh64"]

ATTRIBUTE = "nodeTopologyPodsFingerprint"
METHOD_ATTRIBUTE = "nodeTopologyPodsFingerprintMethod"
PREFIX = "pfp0v001"

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """xxHash64 of ``data`` (the reference algorithm, little-endian lanes)."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed & _MASK
        v4 = (seed - _P1) & _MASK
        while i + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h ^= _round(0, k)
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h ^= (k * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    h ^= h >> 32
    return h


def fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The signature of a set of ``(namespace, name)`` pods; the order they come in does not matter."""
    hashes = sorted(xxh64(name.encode(), xxh64(ns.encode())) for ns, name in pods)
    total = xxh64(b"".join(struct.pack("<Q", h) for h in hashes))
    return PREFIX + total.to_bytes(8, "big").hex()
