"""The NRI plugin's protobuf messages (``ballast/agent/nri/nri.proto``), generated like the CRI stubs
(see ``ballast.agent.cri._stubs``): shipped by the wheel's build, else generated at first import."""

from __future__ import annotations

from ballast.agent.cri import _stubs

__all__ = ["pb"]

pb = _stubs.load_messages(_stubs.NRI_PROTO, "ballast.agent.nri")
