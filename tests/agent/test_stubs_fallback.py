"""Generated CRI stubs are never imported from a predictable path under the temporary directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ballast.agent.cri import _stubs


def test_unwritable_cache_falls_back_to_a_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("BALLAST_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(_stubs.tempfile, "tempdir", str(shared_tmp))
    # another user plants code at the old predictable place
    key = _stubs._versions_key((_stubs.SOURCE_ROOT / _stubs.PROTO).read_bytes())
    planted = shared_tmp / f"ballast-{os.getuid()}" / "cri-stubs" / key / Path(_stubs.PROTO).parent
    planted.mkdir(parents=True)
    (planted / f"{Path(_stubs.PROTO).stem}_pb2_grpc.py").write_text("raise SystemExit('planted')\n")
    out = _stubs._generate_cached(_stubs.PROTO, _stubs.SOURCE_ROOT)
    assert planted != out and planted not in out.parents
    private = next(p for p in out.parents if p.parent == shared_tmp)
    assert private.name.startswith("ballast-cri-")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
