"""Where the tests' Helm comes from, and how to run it without touching the user's Helm set-up.

Standard library only, like :mod:`ballast.testing.controlplane`, so ``.ci/run`` can check it with the system
Python: ``python3 -m ballast.testing.controlplane check`` unpacks and checks Helm too.

First match wins:
- ``$BALLAST_HELM_BIN``: a folder with a plain ``helm`` (used in place), or with ``helm.xz`` and a
  ``SHA256SUMS`` of the uncompressed binary (unpacked and verified like the next one);
- ``../shared/helm`` beside the clone: ``helm.xz`` and ``SHA256SUMS``.
Unpacked, it goes to ``$BALLAST_HELM_CACHE``, else ``$XDG_CACHE_HOME/ballast/helm-v4.1.4`` (default
``~/.cache``), never into the repository. Without either source, a binary already unpacked there serves.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ballast.testing.binaries import (
    MissingPiece,
    _read_sums,
    _sha256,
    _unpack_one,
    cache_folder,
    source_folder,
)

HELM_VERSION = "v4.1.4"
ROOT = Path(__file__).resolve().parents[2]
SHARED_HELM = ROOT.parent / "shared" / "helm"
HOW_TO_GET = (
    f"Helm {HELM_VERSION} (linux/amd64): set BALLAST_HELM_BIN to a folder holding `helm` (from "
    f"https://github.com/helm/helm/releases, checked against its published checksum), or to one holding "
    f"helm.xz and a SHA256SUMS of the uncompressed binary, as ../shared/helm beside the clone does"
)


def cache_dir() -> Path:
    return cache_folder("BALLAST_HELM_CACHE", f"helm-{HELM_VERSION}")


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def source_dir() -> Path:
    """The folder Helm comes from: ``$BALLAST_HELM_BIN`` if set, else ``../shared/helm``."""
    return source_folder(
        "BALLAST_HELM_BIN",
        SHARED_HELM,
        f"no helm: {HOW_TO_GET} (nor is it unpacked already in {cache_dir()})",
    )


def helm_path() -> Path:
    """The helm binary, unpacked and verified into the cache when needed."""
    try:
        src = source_dir()
    except MissingPiece:
        cached = cache_dir() / "helm"
        if not os.environ.get("BALLAST_HELM_BIN") and _runnable(cached):
            return cached
        raise
    if _runnable(src / "helm"):
        return src / "helm"
    sums_file, xz = src / "SHA256SUMS", src / "helm.xz"
    sums = _read_sums(sums_file) if sums_file.is_file() else {}
    if "helm" not in sums or not xz.is_file():
        raise MissingPiece(
            f"{src}: neither a plain helm nor helm.xz with its line in SHA256SUMS; {HOW_TO_GET}"
        )
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / "helm"
    if not (target.is_file() and _sha256(target) == sums["helm"]):
        _unpack_one(xz, sums["helm"], target)
    return target


def helm_env(home: Path) -> dict[str, str]:
    """The environment for running helm with its cache, configuration and data under ``home`` (a test's
    temporary folder), so no test reads or writes the user's repositories, plugins or registry logins."""
    env = dict(os.environ)
    for name in ("CACHE", "CONFIG", "DATA"):
        folder = home / name.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[f"HELM_{name}_HOME"] = str(folder)
    env.pop("KUBECONFIG", None)
    env.pop("HELM_NAMESPACE", None)
    return env


def run_helm(
    home: Path, *args: str, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` with :func:`helm_env`; raises with helm's output when it fails and ``check`` is set."""
    done = subprocess.run(
        [str(helm_path()), *args],
        env=helm_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done
