"""`make`'s interpreter check, venv rebuild and install lock, run for real (scripts/ensure-venv via make)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from ballast.testing.parts import ROOT, wait_for

IDENTITY = 'import sys; print(sys.version.replace("\\n", " ") + " | " + sys.base_prefix)'


def make(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def fake_python(tmp_path: Path, version: tuple[int, int, int]) -> Path:
    """An interpreter that reports ``version``: the real one with sys.version_info replaced first."""
    major, minor, micro = version
    path = tmp_path / f"python{major}.{minor}"
    path.write_text(
        "#!/bin/sh\n"
        '[ "$1" = -c ] || exit 2\n'
        f"exec {sys.executable} -c \"import sys; sys.version_info = ({major}, {minor}, {micro}, 'final', 0); "
        f"sys.version = '{major}.{minor}.{micro} (fake)'; $2\"\n"
    )
    path.chmod(0o755)
    return path


def waiting_on(path: Path) -> bool:
    """Whether some process is blocked on a flock of ``path`` (a ``->`` line in /proc/locks)."""
    inode = f":{path.stat().st_ino} "
    return any(line.split(":", 1)[1].lstrip().startswith("->") and inode in line for line in _locks())


def _locks() -> list[str]:
    return Path("/proc/locks").read_text().splitlines()


def test_an_old_python_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    old = fake_python(tmp_path, (3, 9, 18))
    venv = tmp_path / "venv"
    p = make("install", f"PYTHON={old}", f"VENV={venv}")
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0
    assert f"Ballast needs Python 3.11+, but PYTHON={old} is Python 3.9.18" in err
    assert not venv.exists()


def test_something_that_is_not_python_is_refused(tmp_path: Path) -> None:
    p = make("venv", "PYTHON=/bin/false", f"VENV={tmp_path / 'venv'}")
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "PYTHON=/bin/false is not a working Python interpreter" in err


def test_a_venv_from_another_python_is_rebuilt_under_the_install_lock(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stale = venv / "bin" / "python"
    stale.write_text("#!/bin/sh\necho 'Python 3.10.0 from elsewhere | /opt/elsewhere'\n")
    stale.chmod(0o755)
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as if another make were installing
        p = make("venv", f"PYTHON={sys.executable}", f"VENV={venv}")
        # make blocks on the lock (the kernel lists it as a waiter), the old venv untouched meanwhile
        wait_for(lambda: waiting_on(Path(lock.name)), timeout=60, what="make to wait for the install lock")
        assert p.poll() is None and stale.read_text().startswith("#!/bin/sh")
        fcntl.flock(lock, fcntl.LOCK_UN)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert f"{venv} was made by another Python (Python 3.10.0 from elsewhere" in err
    rebuilt = subprocess.run([venv / "bin" / "python", "-c", IDENTITY], capture_output=True, text=True)
    real = subprocess.run([sys.executable, "-c", IDENTITY], capture_output=True, text=True)
    # sys.executable is this test's venv: both answer with the base interpreter's version and prefix
    assert rebuilt.stdout == real.stdout and rebuilt.stdout


def test_the_editable_install_prints_no_setuptools_note() -> None:
    """The install ``make`` runs (here into this test's own venv, a reinstall of the same tree) says
    nothing on success: setuptools' "Editable installation" note is information only."""
    venv = Path(sys.prefix)
    stamp = ".installed-by-test-makefile"
    try:
        done = subprocess.run(
            [ROOT / "scripts" / "ensure-venv", sys.executable, venv, ".", stamp],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        (venv / stamp).unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr
    assert "Editable installation" not in done.stderr + done.stdout, done.stderr
