"""Where the real binaries the tests run come from, unpacked and verified: kube-apiserver, kube-scheduler,
kubectl, kube-controller-manager and the kubelet v1.36.2 (``../shared/k8s`` or ``$BALLAST_KUBE_BIN``), etcd
and openssl from the system. Helm's are in ``helm``. Standard library only, so ``.ci/run`` can check them with
the system Python before any virtualenv exists (``python3 -m ballast.testing.controlplane check``).

Where the Kubernetes binaries come from, first match wins:
- ``$BALLAST_KUBE_BIN``: a folder with plain ``kube-apiserver``, ``kube-scheduler``, ``kubectl`` (used in
  place), or with their ``.xz`` files and a ``SHA256SUMS`` (unpacked and verified like the next one);
- ``../shared/k8s`` beside the clone: ``.xz`` files and ``SHA256SUMS`` of the uncompressed binaries.
Unpacked binaries go to ``$BALLAST_KUBE_CACHE``, else ``$XDG_CACHE_HOME/ballast/kube-v1.36.2`` (default
``~/.cache``), never into the repository. Without either source, binaries already unpacked there serve.
etcd is Debian's ``etcd-server`` (``etcd`` on PATH).
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import tempfile
from pathlib import Path

KUBE_VERSION = "v1.36.2"
BINARIES = ("kube-apiserver", "kube-scheduler", "kubectl")
CONTROLLER_MANAGER = "kube-controller-manager"

ROOT = Path(__file__).resolve().parents[2]
SHARED_K8S = ROOT.parent / "shared" / "k8s"


class MissingPiece(RuntimeError):
    """A binary, checksum or tool the control plane needs is absent; the message says which and why."""


# --- binaries ----------------------------------------------------------------------------------------------


def cache_folder(variable: str, name: str) -> Path:
    """Where unpacked binaries go: ``$variable``, else ``$XDG_CACHE_HOME/ballast/NAME`` (``~/.cache``)."""
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ballast" / name


def source_folder(variable: str, shared: Path, missing: str) -> Path:
    """The folder binaries come from: ``$variable`` if set (it must be a folder), else ``shared`` beside the
    clone; ``missing`` says how to get them when neither is there."""
    explicit = os.environ.get(variable)
    if explicit:
        path = Path(explicit)
        if not path.is_dir():
            raise MissingPiece(f"{variable}={explicit} is not a folder")
        return path
    if not shared.is_dir():
        raise MissingPiece(missing)
    return shared


def cache_dir() -> Path:
    return cache_folder("BALLAST_KUBE_CACHE", f"kube-{KUBE_VERSION}")


def source_dir() -> Path:
    """The folder the binaries come from: ``$BALLAST_KUBE_BIN`` if set, else ``../shared/k8s``."""
    return source_folder(
        "BALLAST_KUBE_BIN",
        SHARED_K8S,
        f"no Kubernetes binaries: set BALLAST_KUBE_BIN to a folder with {', '.join(BINARIES)} "
        f"({KUBE_VERSION}), or place their .xz files and SHA256SUMS in ../shared/k8s beside the clone "
        f"(nor are they unpacked already in {cache_dir()})",
    )


def _all_there(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) and (folder / name).is_file() for name in BINARIES)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_sums(path: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def _unpack_one(xz: Path, want: str, dest: Path) -> None:
    """Decompress to a temporary name, verify, then rename: concurrent sessions never see half a file."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with lzma.open(xz) as src, os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != want:
            raise MissingPiece(f"{xz}: checksum mismatch after unpacking (SHA256SUMS says {want})")
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def kube_bin_dir() -> Path:
    """A folder holding the three binaries, unpacking and verifying them into the cache when needed; with no
    source at all, the cache when an earlier run filled it."""
    try:
        src = source_dir()
    except MissingPiece:
        # Unpacked and verified on an earlier run: the cache serves without its source (a clone moved
        # away from ../shared, a shell without BALLAST_KUBE_BIN).
        if not os.environ.get("BALLAST_KUBE_BIN") and _all_there(cache_dir()):
            return cache_dir()
        raise
    if _all_there(src):
        return src
    sums_file = src / "SHA256SUMS"
    if not sums_file.is_file():
        raise MissingPiece(f"{src}: neither plain {', '.join(BINARIES)} nor their .xz files with SHA256SUMS")
    sums = _read_sums(sums_file)
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        xz = src / f"{name}.xz"
        if name not in sums or not xz.is_file():
            raise MissingPiece(f"{src}: {name}.xz or its line in SHA256SUMS is missing")
        target = dest / name
        if target.is_file() and _sha256(target) == sums[name]:
            continue
        _unpack_one(xz, sums[name], target)
    return dest


def extra_binary(name: str) -> Path:
    """A binary only some tests need (kube-controller-manager, kubelet), unpacked and verified into the cache
    like the others, only when asked."""
    src = source_dir()
    plain = src / name
    if plain.is_file() and os.access(plain, os.X_OK):
        return plain
    sums_file = src / "SHA256SUMS"
    xz = src / f"{name}.xz"
    sums = _read_sums(sums_file) if sums_file.is_file() else {}
    if name not in sums or not xz.is_file():
        raise MissingPiece(f"{src}: {name} (plain, or .xz with a SHA256SUMS line) is missing")
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / name
    if not (target.is_file() and _sha256(target) == sums[name]):
        _unpack_one(xz, sums[name], target)
    return target


def controller_manager_path() -> Path:
    return extra_binary(CONTROLLER_MANAGER)


def kubelet_path() -> Path:
    return extra_binary("kubelet")


def kubectl_path() -> Path:
    """The harness's kubectl (known version), preferred over whatever kubectl is on PATH."""
    return kube_bin_dir() / "kubectl"


def etcd_path() -> Path:
    found = shutil.which("etcd")
    if not found:
        raise MissingPiece("etcd is not installed (Debian: apt-get install etcd-server)")
    return Path(found)


def openssl_path() -> Path:
    found = shutil.which("openssl")
    if not found:
        raise MissingPiece("openssl is not installed (Debian: apt-get install openssl)")
    return Path(found)


def check_available() -> None:
    """Raise :class:`MissingPiece` unless every binary and tool is there (unpacks into the cache)."""
    kube_bin_dir()
    etcd_path()
    openssl_path()
