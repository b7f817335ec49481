"""Where the generated CRI stubs come from (``api_pb2`` / ``api_pb2_grpc`` for
``ballast/agent/cri/api.proto``).

The ``.proto`` is the source of truth; generated Python is never committed (it is tied to the protobuf
release that generated it). Three cases, tried in this order by ``load()``:

1. **Built packages** (wheel, sdist, ``pip install .``): ``setup.py``'s ``build_py`` hook runs
   ``grpc_tools.protoc`` and writes ``ballast/agent/cri/api_pb2.py`` and ``api_pb2_grpc.py`` into the build
   directory, so an installed agent needs neither grpcio-tools nor a writable disk. ``grpcio-tools`` is
   in ``[build-system] requires`` for that.
2. **Editable installs and source checkouts** have no stubs in the tree. At first import, when
   ``grpc_tools`` is importable, protoc writes them into a cache directory keyed by the hash of the proto
   and the protobuf/grpc versions (``$BALLAST_CACHE_DIR``, else ``$XDG_CACHE_HOME/ballast``, else
   ``~/.cache/ballast``; a private directory made with mkdtemp for this process when none is writable,
   never a fixed path under the temporary directory). Generation goes to a scratch directory that is
   renamed into place, so concurrent first imports cannot see half-written files.
   The cache directory is appended to ``ballast.agent.cri.__path__``: the modules import as
   ``ballast.agent.cri.api_pb2`` exactly as in case 1, and the generated ``api_pb2_grpc`` finds its sibling.
3. Neither: ``ImportError`` saying what to install.

This module imports only the standard library at the top level so that ``setup.py`` can load it by file
path inside an isolated build environment.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["NRI_PROTO", "PROTO", "PROTOS", "cache_root", "generate", "load", "load_messages"]

PROTO = "ballast/agent/cri/api.proto"
"""The proto's path relative to the source root (the directory that holds ``ballast/``)."""
NRI_PROTO = "ballast/agent/nri/nri.proto"
"""The NRI plugin's messages (ttrpc envelope and NRI's api subset): messages only, no gRPC service code."""
PROTOS: tuple[tuple[str, bool], ...] = ((PROTO, True), (NRI_PROTO, False))
"""Every proto the build generates, with whether it has gRPC service stubs (``*_pb2_grpc.py``)."""

SOURCE_ROOT = Path(__file__).resolve().parents[3]


class StubGenerationError(RuntimeError):
    """protoc failed; the message carries its output."""


def generate(proto: str, include_root: Path, out_dir: Path, *, grpc: bool = True) -> list[Path]:
    """Run ``grpc_tools.protoc`` on ``include_root/proto``, writing ``*_pb2.py`` and (``grpc``)
    ``*_pb2_grpc.py``.

    ``proto`` is relative to ``include_root`` and imports are resolved from there, so the generated
    modules import each other by their package path (``ballast.agent.cri.api_pb2``). Returns the files
    written.
    Runs protoc in a child interpreter: protoc prints its errors on the process's stderr, which a
    subprocess lets us put into the exception.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={include_root}",
        f"--python_out={out_dir}",
        *([f"--grpc_python_out={out_dir}"] if grpc else []),
        str(include_root / proto),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StubGenerationError(
            f"grpc_tools.protoc failed for {proto} (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}"
        )
    stem = proto[: -len(".proto")]
    files = [out_dir / f"{stem}_pb2.py", *([out_dir / f"{stem}_pb2_grpc.py"] if grpc else [])]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise StubGenerationError(f"grpc_tools.protoc did not write {missing}")
    return files


def _versions_key(proto_text: bytes) -> str:
    import grpc_tools
    from google import protobuf

    try:
        from importlib.metadata import version

        tools_version = version("grpcio-tools")
    except Exception:  # metadata missing in odd installs: the module path still identifies it
        tools_version = str(getattr(grpc_tools, "__file__", ""))
    h = hashlib.sha256(proto_text)
    h.update(f"\0{protobuf.__version__}\0{tools_version}".encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    """Base directory for generated stubs (see the module docstring for the order)."""
    env = os.environ.get("BALLAST_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ballast"


def _with_private_fallback(candidates: list[Path]):
    """``candidates``, then (only if every one failed) a private directory made for this process."""
    yield from candidates
    private = Path(tempfile.mkdtemp(prefix="ballast-cri-"))
    candidates.append(private)
    yield private


def _generate_cached(proto: str, include_root: Path, *, grpc: bool = True) -> Path:
    """Stubs for ``proto`` in the cache (generated on first use); returns the generated package dir."""
    text = (include_root / proto).read_bytes()
    key = _versions_key(text)
    rel_dir = Path(proto).parent
    # The fallback is a fresh private directory (mkdtemp: mode 0700, unpredictable name), never a fixed
    # path under /tmp that another user could create first and fill with code this process would import.
    candidates = [cache_root()]
    last_error: OSError | None = None
    for base in _with_private_fallback(candidates):
        target = base / "cri-stubs" / key
        last = f"{Path(proto).stem}_pb2_grpc.py" if grpc else f"{Path(proto).stem}_pb2.py"
        if (target / rel_dir / last).exists():
            return target / rel_dir
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=".gen-", dir=target.parent))
            try:
                generate(proto, include_root, scratch, grpc=grpc)
                try:
                    scratch.rename(target)
                except OSError:
                    if not target.exists():  # someone else won the race if it exists now
                        raise
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return target / rel_dir
        except OSError as e:
            last_error = e
    raise ImportError(f"cannot write generated CRI stubs to any of {candidates}: {last_error}")


def load() -> tuple[ModuleType, ModuleType]:
    """``(api_pb2, api_pb2_grpc)`` for ``ballast/agent/cri/api.proto``; generates them when needed (case
    2)."""
    try:
        return (
            importlib.import_module("ballast.agent.cri.api_pb2"),
            importlib.import_module("ballast.agent.cri.api_pb2_grpc"),
        )
    except ModuleNotFoundError as e:
        if e.name not in ("ballast.agent.cri.api_pb2", "ballast.agent.cri.api_pb2_grpc"):
            raise
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        raise ImportError(
            "the CRI stubs ballast/agent/cri/api_pb2.py are not built: install Ballast from a wheel "
            "(pip install .), or install grpcio-tools so they are generated at first import"
        ) from None
    package_dir = _generate_cached(PROTO, SOURCE_ROOT)
    import ballast.agent.cri as package

    if str(package_dir) not in package.__path__:
        package.__path__.append(str(package_dir))
    importlib.invalidate_caches()
    return (
        importlib.import_module("ballast.agent.cri.api_pb2"),
        importlib.import_module("ballast.agent.cri.api_pb2_grpc"),
    )


def load_messages(proto: str, package_name: str) -> ModuleType:
    """The ``*_pb2`` module of a messages-only ``proto`` (``NRI_PROTO``) in the package ``package_name``
    (``ballast.agent.nri``), generated into the cache when the build did not ship it (case 2)."""
    module_name = f"{package_name}.{Path(proto).stem}_pb2"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        raise ImportError(
            f"the generated {module_name} is not built: install Ballast from a wheel (pip install .), or "
            "install grpcio-tools so it is generated at first import"
        ) from None
    package_dir = _generate_cached(proto, SOURCE_ROOT, grpc=False)
    package = importlib.import_module(package_name)
    if str(package_dir) not in package.__path__:
        package.__path__.append(str(package_dir))
    importlib.invalidate_caches()
    return importlib.import_module(module_name)
