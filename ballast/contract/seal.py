"""A keyed seal on the topology result, so the agent can tell a result the extender wrote at bind.

``spec.schedulerName``, ``spec.nodeName`` and annotations are all set by whoever creates the pod: a user
who may create pods can name Ballast's scheduler, place the pod on a node directly and write any
``topology-result``. What that user cannot do is compute an HMAC without the key, nor reuse another pod's
seal: it covers the pod's UID (assigned by the API server) and its node. With a key configured, the
extender seals every result it writes at bind and the agent (and the extender's zone accounting) honour
only results whose seal verifies. Anyone who can read the key can forge results: keep it in a Secret
mounted only into the extender and the agent.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

__all__ = ["MIN_KEY_BYTES", "SEAL_ANNOTATION", "SealKeyError", "load_key", "seal", "verify"]

SEAL_ANNOTATION = "ballast.io/topology-result-seal"
MIN_KEY_BYTES = 32
_PREFIX = "v1:"
_CONTEXT = b"ballast topology-result v1"


class SealKeyError(ValueError):
    """A key file that cannot be used; the message says why."""


def load_key(path: str | Path) -> bytes:
    """The key from a file (surrounding whitespace ignored); at least ``MIN_KEY_BYTES`` bytes."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SealKeyError(f"cannot read the result key file {path}: {exc.strerror or exc}") from None
    if len(key) < MIN_KEY_BYTES:
        raise SealKeyError(
            f"the result key in {path} has {len(key)} bytes; it needs at least {MIN_KEY_BYTES}"
        )
    return key


def seal(key: bytes, uid: str, node: str, result: str) -> str:
    """The seal of ``result`` for the pod ``uid`` on ``node``."""
    msg = b"\0".join((_CONTEXT, uid.encode(), node.encode(), result.encode()))
    return _PREFIX + hmac.new(key, msg, hashlib.sha256).hexdigest()


def verify(key: bytes, uid: str, node: str, result: object, value: object) -> bool:
    """Whether ``value`` is the seal of ``result`` for this pod and node (constant-time comparison)."""
    if not (isinstance(result, str) and isinstance(value, str) and uid and node):
        return False
    return hmac.compare_digest(seal(key, uid, node, result), value)
