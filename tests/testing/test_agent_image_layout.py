"""The image built here from Debian 12 packages has the Dockerfile's layout: the recipe's ``LAYOUT`` is
compared with the Dockerfile's text (no build needed), then the built archive's config and files with both.
Changing the Dockerfile without the recipe, or the recipe without the Dockerfile, fails here."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import struct
import tarfile
from pathlib import Path

import pytest

from ballast.testing import agent_image, oci_archive
from ballast.testing.agent_image import LAYOUT, REF
from ballast.testing.parts import ROOT
from tests.testing import dockerfile

DOCKERFILE = dockerfile.read(ROOT / "Dockerfile")
UNCHECKED_HASH = 0b01
"""The flags word of a ``.pyc`` compiled with ``--invalidation-mode unchecked-hash`` (PEP 552)."""


def expected_env() -> dict[str, str]:
    """The Dockerfile's ENV, with its ``$PATH`` standing for the PATH of a Debian root."""
    return {k: v.replace("$PATH", agent_image.DEBIAN_PATH) for k, v in DOCKERFILE.env.items()}


# --- the recipe against the Dockerfile's text ---------------------------------------------------------------


def test_the_recipes_environment_is_the_dockerfiles() -> None:
    env = dict(LAYOUT.env)
    assert {k: env.get(k) for k in expected_env()} == expected_env()
    # beyond the Dockerfile's own: only what its Python base image sets
    assert set(env) - set(expected_env()) == {"LANG"}
    assert env["PATH"].startswith(LAYOUT.venv + "/bin:")


def test_the_recipes_user_ports_entrypoint_and_command_are_the_dockerfiles() -> None:
    assert LAYOUT.user == DOCKERFILE.user
    assert [p if "/" in p else f"{p}/tcp" for p in DOCKERFILE.exposed] == list(LAYOUT.exposed)
    assert DOCKERFILE.entrypoint == list(LAYOUT.entrypoint)
    assert DOCKERFILE.cmd == list(LAYOUT.cmd)


def test_the_recipes_paths_account_and_bytecode_are_the_dockerfiles() -> None:
    assert DOCKERFILE.venv == LAYOUT.venv
    assert DOCKERFILE.venv_command[-1] == LAYOUT.venv and "--without-pip" in DOCKERFILE.venv_command
    assert DOCKERFILE.copies == {"scheduler_config/policy.yaml": LAYOUT.policy}
    assert (DOCKERFILE.user_name, DOCKERFILE.uid, DOCKERFILE.gid) == (
        LAYOUT.user_name,
        LAYOUT.uid,
        LAYOUT.gid,
    )
    assert (DOCKERFILE.home, DOCKERFILE.shell) == (LAYOUT.home, LAYOUT.shell)
    assert DOCKERFILE.compile_mode == "unchecked-hash"
    assert DOCKERFILE.stdlib_exclude == agent_image.COMPILE_EXCLUDE
    assert LAYOUT.user == f"{LAYOUT.uid}:{LAYOUT.gid}"


def test_the_parser_sees_a_changed_dockerfile(tmp_path: Path) -> None:
    """The comparison above is only as good as the parser: an edited line must show in what it reads."""
    text = (ROOT / "Dockerfile").read_text()
    edited = text.replace("USER 65532:65532", "USER 1000:1000").replace("EXPOSE 8888", "EXPOSE 9999")
    edited = edited.replace("PYTHONUNBUFFERED=1", "PYTHONUNBUFFERED=0")
    assert edited != text
    (tmp_path / "Dockerfile").write_text(edited)
    changed = dockerfile.read(tmp_path / "Dockerfile")
    assert (changed.user, changed.exposed, changed.env["PYTHONUNBUFFERED"]) == ("1000:1000", ["9999"], "0")


# --- pure parts of the recipe -----------------------------------------------------------------------------


def test_mirrors_come_from_deb822_and_one_line_sources() -> None:
    deb822 = """Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: bookworm
"""
    entries = list(agent_image._deb822_entries(deb822))
    assert agent_image.pick_mirrors(entries, {"bookworm"}) == (
        "http://mirror.example/debian",
        "http://mirror.example/debian-security",
    )
    one_line = "deb [signed-by=/k.gpg arch=amd64] http://other.example/debian/ trixie main\n"
    one_line += "# deb http://x bookworm\n"
    entries = list(agent_image._one_line_entries(one_line))
    assert agent_image.pick_mirrors(entries, {"bookworm", "trixie"}) == ("http://other.example/debian", None)
    assert agent_image.pick_mirrors(entries, {"bookworm"}) == (None, None)


def test_the_locks_runtime_pins_and_build_tools_are_told_apart() -> None:
    lock = (ROOT / "requirements.lock").read_text()
    pins = agent_image.runtime_pins(lock)
    assert any(p.startswith("grpcio==") for p in pins)
    assert not any(p.startswith(("grpcio-tools==", "setuptools==")) for p in pins)
    assert sorted(t.split("==")[0] for t in agent_image.build_tools(lock)) == ["grpcio-tools", "setuptools"]


def test_the_inputs_digest_follows_the_sources_and_not_their_bytecode(tmp_path: Path) -> None:
    for name in ("pyproject.toml", "setup.py", "README.md", "requirements.lock", "Dockerfile"):
        (tmp_path / name).write_text(name)
    (tmp_path / "scheduler_config").mkdir()
    (tmp_path / "scheduler_config" / "policy.yaml").write_text("policy")
    (tmp_path / "ballast" / "__pycache__").mkdir(parents=True)
    (tmp_path / "ballast" / "cli.py").write_text("print()")
    (tmp_path / "ballast" / "testing").mkdir()
    first = agent_image.inputs_digest(tmp_path, REF, "libc6 2.36")
    (tmp_path / "ballast" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "ballast" / "testing" / "harness.py").write_text("not in the wheel")
    assert agent_image.inputs_digest(tmp_path, REF, "libc6 2.36") == first
    assert agent_image.inputs_digest(tmp_path, REF, "libc6 2.37") != first
    for path in ("ballast/cli.py", "requirements.lock", "Dockerfile", "scheduler_config/policy.yaml"):
        before = (tmp_path / path).read_text()
        (tmp_path / path).write_text(before + "#")
        assert agent_image.inputs_digest(tmp_path, REF, "libc6 2.36") != first, path
        (tmp_path / path).write_text(before)
    assert agent_image.inputs_digest(tmp_path, REF, "libc6 2.36") == first


def test_an_archive_holds_one_gzip_layer_its_config_and_manifest_under_the_name(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "motd").write_text("hello\n")
    os.link(root / "etc" / "motd", root / "etc" / "motd.link")
    (root / "bin").mkdir()
    (root / "bin" / "sh").symlink_to("busybox")
    (root / "dev").mkdir()
    os.mkfifo(root / "etc" / "fifo")
    (root / "dev" / "not-in-the-layer").write_text("")
    layer = oci_archive.write_layer(root, tmp_path / "layer.tar.gz")
    blob = layer.path.read_bytes()
    assert layer.digest == "sha256:" + hashlib.sha256(blob).hexdigest() and layer.size == len(blob)
    assert layer.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(blob)).hexdigest()
    config = oci_archive.image_config(layer, LAYOUT.config())
    archive = tmp_path / "image.tar"
    manifest_digest = oci_archive.write_archive(archive, REF, layer, config)
    view = oci_archive.read_archive(archive)
    (entry,) = view.index["manifests"]
    assert entry["digest"] == manifest_digest and view.ref == REF
    assert entry["annotations"] == {oci_archive.REF_NAME: REF, oci_archive.CONTAINERD_NAME: REF}
    assert [m["mediaType"] for m in view.manifest["layers"]] == [oci_archive.LAYER_MEDIA_TYPE]
    assert view.config["rootfs"]["diff_ids"] == [layer.diff_id]
    members = oci_archive.layer_members(archive)
    assert sorted(members) == ["bin", "bin/sh", "dev", "etc", "etc/motd", "etc/motd.link"]
    assert members["etc/motd.link"].islnk() and members["bin/sh"].issym()
    assert {m.mtime for m in members.values()} == {oci_archive.MTIME}
    with tarfile.open(archive) as tar:
        assert {"oci-layout", "index.json"} <= set(tar.getnames())


# --- the built image ---------------------------------------------------------------------------------------


def test_the_built_images_config_is_the_dockerfiles(built_image: agent_image.BuiltImage) -> None:
    view = oci_archive.read_archive(built_image.archive)
    assert view.ref == REF == built_image.ref
    (entry,) = view.index["manifests"]
    assert entry["digest"] == built_image.digest
    [layer] = view.manifest["layers"]
    assert layer["mediaType"] == oci_archive.LAYER_MEDIA_TYPE
    config = view.config["config"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert {k: env.get(k) for k in expected_env()} == expected_env()
    assert config["User"] == DOCKERFILE.user
    assert config["Entrypoint"] == DOCKERFILE.entrypoint and config["Cmd"] == DOCKERFILE.cmd
    assert sorted(config["ExposedPorts"]) == [f"{p}/tcp" for p in DOCKERFILE.exposed]
    assert (view.config["os"], view.config["architecture"]) == ("linux", "amd64")


@pytest.fixture(scope="module")
def layer(built_image: agent_image.BuiltImage) -> dict[str, tarfile.TarInfo]:
    return oci_archive.layer_members(built_image.archive)


def test_the_built_image_has_the_dockerfiles_files_and_account(
    built_image: agent_image.BuiltImage, layer: dict[str, tarfile.TarInfo]
) -> None:
    venv = DOCKERFILE.venv.lstrip("/")
    assert layer[f"{venv}/bin/ballast"].isreg() and layer[f"{venv}/bin/ballast"].mode & 0o111
    assert layer[f"{venv}/pyvenv.cfg"].isreg()
    policy = DOCKERFILE.copies["scheduler_config/policy.yaml"].lstrip("/")
    files = oci_archive.layer_files(built_image.archive, {policy, "etc/passwd", "etc/group"}.__contains__)
    assert files[policy] == (ROOT / "scheduler_config" / "policy.yaml").read_bytes()
    passwd = {line.split(":")[0]: line.split(":") for line in files["etc/passwd"].decode().splitlines()}
    group = {line.split(":")[0]: line.split(":") for line in files["etc/group"].decode().splitlines()}
    _, _, uid, gid, _, home, shell = passwd[DOCKERFILE.user_name]
    assert (int(uid), int(gid), home, shell) == (
        DOCKERFILE.uid,
        DOCKERFILE.gid,
        DOCKERFILE.home,
        DOCKERFILE.shell,
    )
    assert int(group[DOCKERFILE.user_name][2]) == DOCKERFILE.gid
    assert layer[shell.lstrip("/")].isreg()
    assert DOCKERFILE.home.lstrip("/") not in layer


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_built_image_holds_the_locks_pins_and_no_pip(layer: dict[str, tarfile.TarInfo]) -> None:
    installed = {}
    for name in layer:
        match = re.fullmatch(r"(?:opt|usr)/.*-packages/([^/]+)-([^-/]+)\.dist-info", name)
        if match:
            installed[_canonical(match.group(1))] = match.group(2)
    lock = agent_image.runtime_pins((ROOT / "requirements.lock").read_text())
    pinned = {_canonical(p.split("==")[0]): p.split("==")[1] for p in lock}
    assert installed.pop("ballast") == "0.1.0"
    assert installed == pinned
    for package in [*DOCKERFILE.removed_packages, "pip"]:
        assert not [n for n in layer if re.search(rf"/{package}(/__init__\.py|-[^/]*\.dist-info)$", n)], (
            package
        )
    assert not [n for n in layer if n.endswith("/ensurepip/__init__.py")]
    assert not any(n.startswith("tmp/") for n in layer), "the build's scratch files are gone"


def test_the_built_images_bytecode_is_unchecked_hash_for_the_venv_and_the_stdlib(
    built_image: agent_image.BuiltImage, layer: dict[str, tarfile.TarInfo]
) -> None:
    venv = DOCKERFILE.venv.lstrip("/")
    stdlib = agent_image.STDLIB.lstrip("/")
    exclude = re.compile(DOCKERFILE.stdlib_exclude)
    sources = [
        n
        for n in layer
        if n.endswith(".py")
        and (n.startswith(f"{venv}/lib/") or (n.startswith(f"{stdlib}/") and not exclude.search("/" + n)))
    ]
    assert len(sources) > 1000
    pycs = oci_archive.layer_files(built_image.archive, lambda n: n.endswith(".pyc"))
    flags = {n: struct.unpack("<I", data[4:8])[0] for n, data in pycs.items()}
    assert {n for n, f in flags.items() if f != UNCHECKED_HASH} == set()
    tag = "cpython-" + agent_image.PYTHON_VERSION.replace(".", "")
    missing = []
    for source in sources:
        folder, _, file = source.rpartition("/")
        if f"{folder}/__pycache__/{file[:-3]}.{tag}.pyc" not in flags:
            missing.append(source)
    assert missing == []


def test_a_second_build_with_the_same_inputs_does_nothing(built_image: agent_image.BuiltImage) -> None:
    again = agent_image.build(log=lambda _: None)
    assert not again.rebuilt
    assert (again.archive, again.digest) == (built_image.archive, built_image.digest)
    assert again.seconds < 5
    meta = json.loads((again.archive.parent / "image.json").read_text())
    assert meta["manifest"] == built_image.digest


def test_the_cache_keeps_the_most_recent_archives(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"inputs-{i}").mkdir()
        os.utime(tmp_path / f"inputs-{i}", (1000 + i, 1000 + i))
    os.utime(tmp_path / "inputs-0", (2000, 2000))  # used again lately
    agent_image._prune(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs-0", "inputs-3", "inputs-4"]
