"""The pods fingerprint NodeResourceTopology exporters publish (``nodeTopologyPodsFingerprint``).

nfd-topology-updater and the resource-topology-exporter sign the set of pods they accounted for when they
computed ``available`` (k8stopologyawareschedwg/podfingerprint, version ``v001``): the xxHash64 of each
pod's name seeded with the xxHash64 of its namespace, the 64-bit values sorted, each written as 8 bytes
little-endian and the whole hashed again, hex-encoded behind ``pfp0v001``. A consumer that computes the
same signature over the pods it knows on a node learns whether the published ``available`` already
counts them, which is when the extender drops what it assumed at bind; the agent signs its own objects
the same way so any consumer can do the same.

xxHash64 comes from the ``xxhash`` package (the reference C implementation): a signature is computed per
topology event and per bound pod, never per scheduling request.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

__all__ = ["ATTRIBUTE", "METHOD_ATTRIBUTE", "fingerprint", "xxh64"]

ATTRIBUTE = "nodeTopologyPodsFingerprint"
METHOD_ATTRIBUTE = "nodeTopologyPodsFingerprintMethod"
PREFIX = "pfp0v001"


def xxh64(data: bytes, seed: int = 0) -> int:
    """xxHash64 of ``data`` as an unsigned 64-bit integer."""
    return xxhash.xxh64_intdigest(data, seed)


def fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The signature of a set of ``(namespace, name)`` pods; the order they come in does not matter."""
    hashes = sorted(xxh64(name.encode(), xxh64(ns.encode())) for ns, name in pods)
    total = xxh64(b"".join(struct.pack("<Q", h) for h in hashes))
    return PREFIX + total.to_bytes(8, "big").hex()
