"""An OCI image archive written with the standard library: a root file system directory becomes one gzip
layer, and the layer, its config and its manifest go into an OCI image layout packed as a tar
(``oci-layout``, ``index.json``, ``blobs/sha256/...``), the form ``ctr images import`` and
``skopeo copy oci-archive:`` read.

Why by hand: the machines that run the tests have no registry and no image builder, only the standard
library and containerd. Why one layer: the image is built from scratch (``agent_image.py``), so there is no
base layer to share with anything.

The layer is made reproducible where that is cheap: entries in name order, every mtime set to
``MTIME`` (the Python bytecode in the image is hash-based, so no ``.pyc`` depends on a source's mtime),
owners by number only, gzip without a name or time in its header. Device nodes, sockets and FIFOs are left
out, and so is everything below the directories a runtime mounts over (``/dev``, ``/proc``, ``/sys``):
containerd provides those.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

MTIME = 0
"""The mtime of every entry of a layer (1970-01-01T00:00:00Z)."""

MOUNTED_OVER = ("dev", "proc", "sys")
"""Top-level directories kept empty in a layer: the runtime mounts its own there."""

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"


@dataclass(frozen=True)
class Layer:
    """A gzip layer on disk: ``digest`` names the compressed blob, ``diff_id`` the tar inside it."""

    path: Path
    digest: str
    diff_id: str
    size: int


class _Hashing:
    """A write-only file that hashes and counts what passes through it on its way to ``out``."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)

    def flush(self) -> None:
        self.out.flush()


def _entries(root: Path) -> list[Path]:
    """Every path below ``root`` in name order (a directory before its contents), minus what a runtime
    mounts over."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here != root and here.relative_to(root).parts[0] in MOUNTED_OVER:
            dirnames[:] = []
            filenames = []
        dirnames.sort()
        found.extend(here / n for n in dirnames)
        found.extend(here / n for n in sorted(filenames))
    return sorted(found, key=lambda p: p.relative_to(root).parts)


def write_layer(root: Path, out: Path, compresslevel: int = 6) -> Layer:
    """Pack the directory ``root`` as the layer ``out`` (a ``.tar.gz``); returns its digests and size."""
    with out.open("wb") as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=compresslevel
        ) as gz:
            plain = _Hashing(gz)  # type: ignore[arg-type]
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for path in _entries(root):
                    mode = path.lstat().st_mode
                    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                        continue  # device nodes, sockets, FIFOs
                    info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
                    info.mtime = MTIME
                    info.uname = info.gname = ""
                    if info.isreg():
                        with path.open("rb") as f:
                            tar.addfile(info, f)
                    else:
                        tar.addfile(info)
    return Layer(
        out, "sha256:" + compressed.sha.hexdigest(), "sha256:" + plain.sha.hexdigest(), compressed.size
    )


def image_config(layer: Layer, config: dict[str, Any], architecture: str = "amd64") -> bytes:
    """The image's config blob: ``config`` is the runtime part (``User``, ``Env``, ``Entrypoint``, ...)."""
    body = {
        "architecture": architecture,
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, MTIME
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, MTIME
    tar.addfile(info)


def write_archive(out: Path, ref: str, layer: Layer, config: bytes, architecture: str = "amd64") -> str:
    """Write the OCI image layout tar ``out`` holding ``layer`` and ``config`` under the name ``ref``
    (a full reference, ``localhost/ballast:test``: containerd imports it under exactly that name); returns
    the manifest's digest."""
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": _descriptor(CONFIG_MEDIA_TYPE, config),
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer.digest, "size": layer.size}],
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    manifest_desc = _descriptor(MANIFEST_MEDIA_TYPE, manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            {
                **manifest_desc,
                "platform": {"architecture": architecture, "os": "linux"},
                "annotations": {REF_NAME: ref, CONTAINERD_NAME: ref},
            }
        ],
    }
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        _add_dir(tar, "blobs")
        _add_dir(tar, "blobs/sha256")
        info = tarfile.TarInfo("blobs/sha256/" + layer.digest.split(":", 1)[1])
        info.size, info.mode, info.mtime = layer.size, 0o644, MTIME
        with layer.path.open("rb") as f:
            tar.addfile(info, f)
        for data in (config, manifest):
            _add_bytes(tar, "blobs/sha256/" + hashlib.sha256(data).hexdigest(), data)
    os.replace(tmp, out)
    return str(manifest_desc["digest"])


# --- reading (the tests, and whoever checks an archive) -----------------------------------------------------


@dataclass(frozen=True)
class ArchiveView:
    """What an OCI archive holds: its index, the one manifest's config and the names of its layer."""

    index: dict[str, Any]
    manifest: dict[str, Any]
    config: dict[str, Any]
    ref: str


def read_archive(path: Path) -> ArchiveView:
    """Parse an archive written by :func:`write_archive` (one manifest, one layer); raises ``ValueError``
    naming what is wrong with one that is not."""
    with tarfile.open(path) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
            if member is None:
                raise ValueError(f"{path}: no blob {digest}")
            return member.read()

        layout_file = tar.extractfile("oci-layout")
        index_file = tar.extractfile("index.json")
        if layout_file is None or index_file is None:
            raise ValueError(f"{path}: not an OCI image layout (no oci-layout or index.json)")
        index = json.loads(index_file.read())
        manifests = index.get("manifests", [])
        if len(manifests) != 1:
            raise ValueError(f"{path}: {len(manifests)} manifests in index.json, expected 1")
        manifest = json.loads(blob(manifests[0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
    return ArchiveView(index, manifest, config, manifests[0].get("annotations", {}).get(REF_NAME, ""))


def layer_members(path: Path) -> dict[str, tarfile.TarInfo]:
    """The entries of the archive's one layer by path (``etc/passwd``), without extracting anything."""
    view = read_archive(path)
    (layer,) = view.manifest["layers"]
    with tarfile.open(path) as outer:
        member = outer.extractfile("blobs/sha256/" + layer["digest"].split(":", 1)[1])
        assert member is not None
        with tarfile.open(fileobj=member, mode="r|gz") as inner:
            return {info.name: info for info in inner}


def layer_files(path: Path, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The contents of the layer's regular files whose path (``etc/passwd``) ``wanted`` accepts."""
    view = read_archive(path)
    (layer,) = view.manifest["layers"]
    found: dict[str, bytes] = {}
    with tarfile.open(path) as outer:
        member = outer.extractfile("blobs/sha256/" + layer["digest"].split(":", 1)[1])
        assert member is not None
        with tarfile.open(fileobj=member, mode="r|gz") as inner:
            for info in inner:
                if info.isreg() and wanted(info.name):
                    f = inner.extractfile(info)
                    assert f is not None
                    found[info.name] = f.read()
    return found
