"""Real processes and real cgroups for the load tests: a CPU burner, a memory holder, pod cgroups.

The pod cgroups live under a parent named for this test process (``ballast-load-test-<pid>``) in the
machine's real hierarchies, so parallel runs (and the containerd tests' ``kubepods``) never meet; a
temporary directory stands in for ``/sys/fs/cgroup`` with one link per v1 controller to that parent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
BURN = "import sys\nsys.stdin.readline()\nwhile True: pass\n"
HOLD = (
    "import sys, time\nsys.stdin.readline()\nblock = b'\\x01' * (int(sys.argv[1]) << 20)\n"
    "print('held', flush=True)\ntime.sleep(600)\n"
)


def ticks_of(pid: int) -> int:
    """utime + stime of a process, in clock ticks (``/proc/<pid>/stat`` fields 14 and 15)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def start(script: str, *args: str) -> subprocess.Popen[str]:
    """A Python child that waits for a line on stdin before it starts its work (so it can be moved into a
    cgroup first: only what runs there is charged to it)."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def v1_root(tmp: Path, controllers: tuple[str, ...] = ("cpuacct", "memory")) -> Iterator[Path]:
    """A cgroup root for ``PodCgroups``: ``tmp/<controller>`` links to a fresh real cgroup per controller."""
    name = f"ballast-load-test-{os.getpid()}"
    made = []
    for c in controllers:
        real = CGROUP / c / name
        real.mkdir(exist_ok=True)
        made.append(real)
        (tmp / c).symlink_to(real)
    try:
        yield tmp
    finally:
        for real in made:
            remove_tree(real)


@contextlib.contextmanager
def v2_root() -> Iterator[Path]:
    """A fresh cgroup in the machine's unified (v2) hierarchy, used as the root of a v2 tree."""
    unified = CGROUP / "unified" if (CGROUP / "unified" / "cgroup.controllers").exists() else CGROUP
    real = unified / f"ballast-load-test-{os.getpid()}"
    real.mkdir(exist_ok=True)
    try:
        yield real
    finally:
        remove_tree(real)


def make_pod_cgroup(base: Path, parts: tuple[str, ...]) -> Path:
    d = base.joinpath(*parts)
    d.mkdir(parents=True, exist_ok=True)
    return d


def enter(cgroup_dir: Path, pid: int) -> None:
    (cgroup_dir / "cgroup.procs").write_text(str(pid))


def remove_tree(root: Path) -> None:
    """rmdir a cgroup subtree, deepest first (cgroup directories are removed with rmdir only); retried
    briefly because a killed process leaves its cgroup a moment after ``wait``."""
    dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for d in [*dirs, root]:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
