"""Integration: the image built here runs under a real containerd (the private one of
``ballast.testing.containerd``, the host's containerd 1.6) as the Dockerfile says it runs: imported with
``ctr images import`` under its name, started with a read-only root, as UID and GID 65532, its default command
serving the extender with the bundled policy, and writing nothing to its root file system."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ballast.testing import agent_image
from ballast.testing.agent_image import LAYOUT, REF
from ballast.testing.containerd import ContainerdUnavailable, PrivateContainerd, prerequisites
from ballast.testing.parts import missing_part

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def containerd(built_image: agent_image.BuiltImage) -> Iterator[PrivateContainerd]:
    reason = prerequisites()
    if reason:
        missing_part(f"containerd cannot run here: {reason}")
    harness = PrivateContainerd()
    try:
        harness.start()
        harness.import_image(built_image.archive)
    except ContainerdUnavailable as e:
        harness.stop()
        missing_part(f"containerd cannot run here: {e}")
    try:
        yield harness
    finally:
        harness.stop()


def run(containerd: PrivateContainerd, *argv: str, read_only: bool = True, keep: str = "") -> str:
    """``ctr run`` of the image (its config's user, environment and working directory) with ``argv`` as the
    process; returns its output, failing on a non-zero exit. ``keep`` names a container to leave behind."""
    name = keep or f"t-{uuid.uuid4().hex[:12]}"
    flags = ["--read-only"] if read_only else []
    done = containerd.ctr("run", *([] if keep else ["--rm"]), *flags, REF, name, *argv)
    assert done.returncode == 0, (
        f"{argv}: exit {done.returncode}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    )
    return done.stdout


def test_the_image_is_imported_under_its_name(containerd: PrivateContainerd) -> None:
    listed = containerd.ctr("images", "ls", "-q")
    assert REF in listed.stdout.split()


def test_ballast_and_the_agents_help_run_on_a_read_only_root(containerd: PrivateContainerd) -> None:
    out = run(containerd, "ballast", "--help")
    assert out.startswith("usage: ballast") and "agent" in out
    out = run(containerd, "ballast", "agent", "--help")
    assert "--cri-endpoint" in out


def test_it_runs_as_65532_with_the_dockerfiles_environment_and_no_pip(containerd: PrivateContainerd) -> None:
    probe = (
        "import json, os, sys, importlib.util; print(json.dumps({'ids': [os.getuid(), os.getgid()],"
        " 'groups': os.getgroups(), 'prefix': sys.prefix, 'dont_write': sys.flags.dont_write_bytecode,"
        " 'version': list(sys.version_info[:2]), 'pip': importlib.util.find_spec('pip') is not None,"
        " 'unbuffered': os.environ.get('PYTHONUNBUFFERED')}))"
    )
    seen = json.loads(run(containerd, "python", "-c", probe))
    assert seen["ids"] == [LAYOUT.uid, LAYOUT.gid]
    assert seen["prefix"] == LAYOUT.venv
    assert seen["version"] == [3, 11]
    assert (seen["dont_write"], seen["unbuffered"], seen["pip"]) == (1, "1", False)


def _upper_dir(containerd: PrivateContainerd, container: str) -> Path:
    done = containerd.ctr("snapshots", "--snapshotter", "overlayfs", "mounts", "/mnt", container)
    assert done.returncode == 0, done.stderr
    options = done.stdout.split(" -o ", 1)[1].split()[0]
    return Path(dict(o.split("=", 1) for o in options.split(",") if "=" in o)["upperdir"])


def test_nothing_is_written_to_the_root_file_system(containerd: PrivateContainerd) -> None:
    """On a writable root the programs leave the snapshot's upper directory empty: no bytecode, no caches,
    nothing a read-only root would have refused (and a program might have swallowed the refusal of).
    A process that does write shows up there, so the check can fail."""
    writer = ["python", "-c", "open('/tmp/written-here', 'w').close()"]
    cases = [(["ballast", "--help"], []), (["ballast", "agent", "--help"], [])]
    cases += [(["ballast", "extender", "--help"], []), (writer, ["tmp", "tmp/written-here"])]
    for argv, expected in cases:
        name = f"w-{uuid.uuid4().hex[:12]}"
        try:
            run(containerd, *argv, read_only=False, keep=name)
            upper = _upper_dir(containerd, name)
            assert upper.is_dir()
            written = sorted(str(p.relative_to(upper)) for p in upper.rglob("*"))
            assert written == expected, f"{argv} wrote {written}"
        finally:
            containerd.ctr("containers", "rm", name)


def test_a_write_to_the_read_only_root_is_refused(containerd: PrivateContainerd) -> None:
    done = containerd.ctr(
        "run", "--rm", "--read-only", REF, f"r-{uuid.uuid4().hex[:12]}", "python", "-c", "open('/tmp/x', 'w')"
    )
    assert done.returncode != 0
    assert "Read-only file system" in done.stderr + done.stdout


def test_the_default_command_serves_the_extender_with_the_bundled_policy(
    containerd: PrivateContainerd,
) -> None:
    """The image's ENTRYPOINT and CMD as they are (no arguments given), on a read-only root: the extender
    listens on 127.0.0.1:8888 inside the container and reports the policy at LAYOUT.policy."""
    name = f"x-{uuid.uuid4().hex[:12]}"
    started = containerd.ctr("run", "-d", "--read-only", REF, name)
    assert started.returncode == 0, started.stderr
    probe = (
        "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
        "'http://127.0.0.1:8888/readyz', timeout=2).read().decode())"
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            done = containerd.ctr(
                "tasks", "exec", "--exec-id", uuid.uuid4().hex[:8], name, "python", "-c", probe
            )
            if done.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert done.returncode == 0, f"the extender did not answer: {done.stderr[-1500:]}"
        ready = json.loads(done.stdout)
        assert ready["status"] == "ok"
        assert ready["policy"]["source"] == LAYOUT.policy
    finally:
        containerd.ctr("tasks", "kill", "-s", "SIGKILL", name)
        deadline = time.monotonic() + 20
        while containerd.ctr("tasks", "delete", name).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(Exception):
            containerd.ctr("containers", "rm", name)
