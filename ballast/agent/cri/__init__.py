"""CRI ``runtime.v1`` access for the agent: a small gRPC client over the runtime's unix socket.

Public surface: ``CRIClient`` (``update_cpuset``, ``list_containers``, ``version``), ``CRIError`` and
``normalize_endpoint``. The messages come from ``ballast/agent/cri/api.proto``, a subset of the upstream CRI
``api.proto`` with its real field numbers; how the generated stubs are produced (build time, or at first
import for editable installs) is described in ``ballast.agent.cri._stubs``.

Importing this package does not import grpc or the stubs; ``ballast.agent.cri.client`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["DEFAULT_ENDPOINT", "CRIClient", "CRIError", "normalize_endpoint"]

if TYPE_CHECKING:
    from ballast.agent.cri.client import DEFAULT_ENDPOINT, CRIClient, CRIError, normalize_endpoint


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ballast.agent.cri import client

        return getattr(client, name)
    raise AttributeError(f"module 'ballast.agent.cri' has no attribute {name!r}")
