"""Ballast's container image built here, from Debian 12 (bookworm) packages, with the Dockerfile's layout.

The Dockerfile's base (``python:3.11-slim-bookworm``) cannot be pulled on the machines that run the tests
(no registry), but Debian's packages can be had through the machine's own apt configuration, and Debian 12's
``python3`` is CPython 3.11 like that base. So the image the tests load into containerd (a private one here,
the QEMU guests' containerd 1.7) is made of:

1. a root file system from ``mmdebstrap --variant=essential`` with ``PACKAGES`` (Python 3.11 and what the
   Python base image adds to Debian: CA certificates, netbase, tzdata; no apt, no pip), documentation and
   manuals left out as in Debian's slim images, and the standard library compiled to unchecked-hash bytecode.
   It comes from THIS machine's Debian mirror, security mirror and proxy (``host_apt_sources``; the
   environment variables ``APT_MIRROR`` and ``APT_SECURITY_MIRROR`` override). Cached, rebuilt when the suite,
   the package list, the mirrors or this recipe change.
2. ``/opt/ballast``: a virtualenv without pip holding the wheel built from the checkout as the Dockerfile
   builds it (``pip wheel --no-build-isolation --no-deps`` with the lock's setuptools and grpcio-tools), its
   dependencies pinned by ``requirements.lock`` (``-c requirements.lock``, then ``pip check``), compiled to
   unchecked-hash bytecode. The dependencies come as wheels for CPython 3.11 and Debian 12's glibc, through
   the machine's pip configuration; pip itself runs from outside the image and is never in it.
3. the user and group ``ballast`` (65532), ``/etc/ballast/policy.yaml`` (``scheduler_config/policy.yaml``),
   and the config of ``LAYOUT``: the Dockerfile's ENV, USER, EXPOSE, ENTRYPOINT and CMD.
4. an OCI image archive named ``REF`` (``oci_archive.py``), for ``ctr -n k8s.io images import``.

``tests/testing/test_agent_image_layout.py`` holds ``LAYOUT`` and the built image equal to the Dockerfile.

Cache: ``$BALLAST_IMAGE_CACHE``, else ``$XDG_CACHE_HOME/ballast/agent-image`` (``~/.cache``), with the
archives of the last ``KEEP_IMAGES`` sets of inputs (``images/<digest>/``). ``build()`` does nothing but hash
its inputs when the archive for them is there: the lock, the package's sources (``pyproject.toml``,
``setup.py``, ``README.md``, ``ballast/`` but ``ballast/testing/``), the Dockerfile, the policy, the installed
Debian package versions and this recipe. Needs root (mmdebstrap's root mode and ``chroot``), mmdebstrap and a
Debian mirror; PyPI (or the machine's pip index) when the lock changes.

    python -m ballast.testing.agent_image build DEST     # DEST: the archive to write (a copy of the cache's)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ballast.testing import oci_archive
from ballast.testing.binaries import cache_folder

ROOT = Path(__file__).resolve().parents[2]
REF = "localhost/ballast:test"
"""The name the image is imported under (``ctr -n k8s.io images import`` keeps it as given)."""

SUITE = "bookworm"
PYTHON_VERSION = "3.11"
PACKAGES = ("python3", "ca-certificates", "netbase", "tzdata")
"""On top of Debian's essential packages: Python 3.11 and what python:3.11-slim adds to Debian."""

DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
)
STDLIB = f"/usr/lib/python{PYTHON_VERSION}"
SYSTEM_PYTHON = ("/usr/lib/python3/dist-packages", "/usr/share/python3")
"""Debian's other Python files (its python3 helpers): compiled like the standard library, so that every
``.pyc`` in the image is hash-based."""
COMPILE_EXCLUDE = r"/(idlelib|lib2to3|tkinter|turtledemo|ensurepip|pydoc_data)/"
"""The Dockerfile's ``compileall -x``: parts of the standard library nothing runs (left without bytecode)."""

DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH of a Debian root file system: what the Dockerfile's ``$PATH`` stands for in this image."""

ARCHIVE_NAME = "ballast-image.oci.tar"
RUNTIME_PINS_END = "# build only"
"""requirements.lock's runtime pins are the lines above this comment; the build tools are below."""


class ImageUnavailable(RuntimeError):
    """The image cannot be built here; the message says what is missing."""


# --- the layout (what the Dockerfile's final stage makes) ---------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The Dockerfile's final stage as data; ``config()`` is the image config's runtime part."""

    venv: str = "/opt/ballast"
    policy: str = "/etc/ballast/policy.yaml"
    user_name: str = "ballast"
    uid: int = 65532
    gid: int = 65532
    home: str = "/nonexistent"
    shell: str = "/usr/sbin/nologin"
    user: str = "65532:65532"
    env: tuple[tuple[str, str], ...] = (
        ("PATH", "/opt/ballast/bin:" + DEBIAN_PATH),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("PYTHONUNBUFFERED", "1"),
        ("LANG", "C.UTF-8"),  # set by the Python base image
    )
    exposed: tuple[str, ...] = ("8888/tcp",)
    entrypoint: tuple[str, ...] = ("ballast",)
    cmd: tuple[str, ...] = (
        "extender",
        "--host",
        "127.0.0.1",
        "--port",
        "8888",
        "--policy",
        "/etc/ballast/policy.yaml",
    )

    def config(self) -> dict[str, object]:
        return {
            "User": self.user,
            "Env": [f"{k}={v}" for k, v in self.env],
            "ExposedPorts": {p: {} for p in self.exposed},
            "Entrypoint": list(self.entrypoint),
            "Cmd": list(self.cmd),
        }


LAYOUT = Layout()


# --- this machine's apt configuration (pure parsing, then the files) ----------------------------------------


@dataclass(frozen=True)
class AptSources:
    """Where Debian's packages come from: the main mirror, the security mirror (or none), and apt options
    (the proxy) to pass on."""

    main: str
    security: str | None = None
    options: tuple[str, ...] = field(default=())


def _deb822_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    """(first URI, suites) of each enabled ``Types: deb`` stanza of a ``.sources`` file."""
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        uris = fields.get("uris", "").split()
        if uris:
            yield uris[0], fields.get("suites", "").split()


def _one_line_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    """(URI, [suite]) of each ``deb`` line of a ``sources.list``-style file (options in brackets skipped)."""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        rest = words[1:]
        if rest and rest[0].startswith("["):
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2:
            yield rest[0], [rest[1]]


def pick_mirrors(entries: list[tuple[str, list[str]]], codenames: set[str]) -> tuple[str | None, str | None]:
    """The Debian mirror (a suite of ``codenames``, or its -updates/-backports) and the security mirror (its
    -security or /updates) among apt's entries; the first of each wins."""
    main = security = None
    names = "|".join(re.escape(c) for c in sorted(codenames) if c)
    for uri, suites in entries:
        for suite in suites:
            if re.fullmatch(rf"({names})(-security|/updates)", suite):
                security = security or uri.rstrip("/")
            elif re.fullmatch(rf"({names})(-updates|-backports)?", suite):
                main = main or uri.rstrip("/")
    return main, security


def host_apt_sources(etc_apt: Path = Path("/etc/apt")) -> AptSources:
    """This machine's mirrors and proxy (``APT_MIRROR`` / ``APT_SECURITY_MIRROR`` override the mirrors)."""
    codenames = {SUITE}
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                codenames.add(line.split("=", 1)[1].strip().strip('"'))
    entries: list[tuple[str, list[str]]] = []
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        with contextlib.suppress(OSError):
            entries.extend(_deb822_entries(path.read_text()))
    for path in [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]:
        with contextlib.suppress(OSError):
            entries.extend(_one_line_entries(path.read_text()))
    main, security = pick_mirrors(entries, codenames)
    main = os.environ.get("APT_MIRROR") or main
    security = os.environ.get("APT_SECURITY_MIRROR") or security
    if not main:
        raise ImageUnavailable(
            f"no Debian mirror for {'/'.join(sorted(codenames))} in this machine's apt configuration "
            f"({etc_apt}/sources.list.d/*.sources, sources.list); set APT_MIRROR to a Debian mirror's URI"
        )
    options: list[str] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, timeout=30).stdout
        options = [
            line.rstrip(";")
            for line in dump.splitlines()
            if re.match(r"(?i)^Acquire::(https?|ftp|socks)::Proxy", line)
        ]
    return AptSources(main.rstrip("/"), security.rstrip("/") if security else None, tuple(options))


# --- inputs and stamps --------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """``$BALLAST_IMAGE_CACHE``, else ``$XDG_CACHE_HOME/ballast/agent-image`` (``~/.cache``)."""
    return cache_folder("BALLAST_IMAGE_CACHE", "agent-image")


SOURCE_FILES = ("pyproject.toml", "setup.py", "README.md")
SOURCE_DIRS = ("ballast",)


NOT_IN_THE_WHEEL = ("ballast/testing",)
"""Source folders pyproject.toml keeps out of the wheel: a change there changes nothing in the image."""


def _source_files(root: Path) -> list[Path]:
    """What the Dockerfile copies to build the wheel (``COPY pyproject.toml setup.py README.md``,
    ``COPY ballast``), minus bytecode and the folders the wheel leaves out."""
    files = [root / name for name in SOURCE_FILES]
    for d in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(root / d):
            here = Path(dirpath).relative_to(root).as_posix()
            dirnames[:] = sorted(
                n for n in dirnames if n != "__pycache__" and f"{here}/{n}" not in NOT_IN_THE_WHEEL
            )
            files.extend(Path(dirpath) / n for n in sorted(filenames) if not n.endswith((".pyc", ".pyo")))
    return files


def inputs_digest(root: Path, ref: str, packages: str) -> str:
    """One digest of everything the image is made of: the package's sources, the lock, the Dockerfile, the
    policy, the Debian packages installed (``packages``: name and version per line), this recipe, the name."""
    h = hashlib.sha256()
    parts: list[tuple[str, bytes]] = [("ref", ref.encode()), ("packages", packages.encode())]
    for path in [
        *_source_files(root),
        root / "requirements.lock",
        root / "Dockerfile",
        root / "scheduler_config" / "policy.yaml",
        Path(__file__),
        Path(oci_archive.__file__),
    ]:
        parts.append(
            (path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name, path.read_bytes())
        )
    for name, data in parts:
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def runtime_pins(lock_text: str) -> list[str]:
    """The lock's runtime pins: its requirement lines above ``# build only``."""
    pins = []
    for line in lock_text.splitlines():
        if line.startswith(RUNTIME_PINS_END):
            break
        if line.strip() and not line.startswith("#"):
            pins.append(line.strip())
    return pins


def build_tools(lock_text: str) -> list[str]:
    """The lock's pins of setuptools and grpcio-tools (the Dockerfile's build stage installs those)."""
    return [line for line in lock_text.splitlines() if re.match(r"(?i)^(setuptools|grpcio[-_]tools)==", line)]


# --- running things -----------------------------------------------------------------------------------------


Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _run(
    argv: list[str], what: str, *, env: dict[str, str] | None = None, log_file: Path | None = None
) -> str:
    """Run ``argv`` at a low priority (the machines are shared); its output, or ``ImageUnavailable`` with
    the end of it."""
    done = subprocess.run(["nice", "-n", "10", *argv], capture_output=True, text=True, env=env, check=False)
    output = done.stdout + done.stderr
    if log_file is not None:
        log_file.write_text(output)
    if done.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-25:])
        raise ImageUnavailable(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment for programs run in the image's root: nothing of the caller's Python or pip."""
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TERM")}
    # PYTHONDONTWRITEBYTECODE as in the Dockerfile's build stage: only compileall writes bytecode (a module
    # pip happens to import would otherwise get a timestamp-based .pyc that compileall then keeps)
    return {"PATH": DEBIAN_PATH, "HOME": "/root", "PYTHONDONTWRITEBYTECODE": "1", **keep, **extra}


def _pip(python: Path | str, command: str) -> list[str]:
    quiet = [] if command == "check" else ["-q"]
    return [str(python), "-m", "pip", command, *quiet, "--disable-pip-version-check"]


def _chroot(rootfs: Path, argv: list[str], what: str, **env: str) -> str:
    return _run(["chroot", str(rootfs), *argv], what, env=_clean_env(**env))


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One build at a time per cache (two test processes, two engineers' shells)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def prerequisites() -> str | None:
    """Why the image cannot be built here, or ``None``."""
    if os.geteuid() != 0:
        return "building the image needs root (mmdebstrap --mode=root, chroot)"
    missing = [t for t in ("mmdebstrap", "chroot", "apt-config") if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)} (Debian packages mmdebstrap, coreutils, apt)"
    return None


# --- 1. the Debian root -------------------------------------------------------------------------------------


def _base_rootfs(cache: Path, log: Log) -> tuple[Path, str]:
    """The cached Debian root (mmdebstrap, stdlib compiled) and its package list; built when its stamp
    differs."""
    sources = host_apt_sources()
    where = cache / f"base-{SUITE}"
    rootfs, stamp_file, packages_file = where / "rootfs", where / "stamp", where / "packages.txt"
    compile_cmd = [
        "python3",
        "-m",
        "compileall",
        "-q",
        "-f",
        "-j",
        "0",
        "--invalidation-mode",
        "unchecked-hash",
        "-x",
        COMPILE_EXCLUDE,
        STDLIB,
        *SYSTEM_PYTHON,
    ]
    stamp = json.dumps(
        {
            "suite": SUITE,
            "packages": PACKAGES,
            "dpkg": DPKG_EXCLUDES,
            "sources": [sources.main, sources.security],
            "options": sources.options,
            "compile": compile_cmd,
        },
        sort_keys=True,
    )
    if rootfs.is_dir() and packages_file.is_file() and _read(stamp_file) == stamp:
        return rootfs, packages_file.read_text()
    lists = [f"deb {sources.main} {SUITE} main", f"deb {sources.main} {SUITE}-updates main"]
    if sources.security:
        lists.append(f"deb {sources.security} {SUITE}-security main")
    log(f"image: Debian {SUITE} from {sources.main}{' + ' + sources.security if sources.security else ''}")
    new = where / "rootfs.new"
    shutil.rmtree(new, ignore_errors=True)
    where.mkdir(parents=True, exist_ok=True)
    stamp_file.unlink(missing_ok=True)
    started = time.monotonic()
    argv = [
        "mmdebstrap",
        "--mode=root",
        "--variant=essential",
        "--components=main",
        f"--include={','.join(PACKAGES)}",
        '--aptopt=APT::Install-Recommends "false"',
        '--aptopt=Acquire::Check-Valid-Until "false"',
        *[f"--aptopt={o}" for o in sources.options],
        *[f"--dpkgopt={o}" for o in DPKG_EXCLUDES],
        f'--customize-hook=chroot "$1" {shlex.join(compile_cmd)}',
        # Debian's own timestamp bytecode of what the Dockerfile leaves uncompiled
        '--customize-hook=find "$1' + STDLIB + "\" -path '*/pydoc_data/__pycache__' -prune -exec rm -rf {} +",
        SUITE,
        str(new),
        *lists,
    ]
    _run(argv, "mmdebstrap", log_file=where / "mmdebstrap.log")
    packages = _chroot(new, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"], "dpkg-query")
    shutil.rmtree(rootfs, ignore_errors=True)
    new.rename(rootfs)
    packages_file.write_text(packages)
    stamp_file.write_text(stamp)
    log(
        f"image: Debian root built in {time.monotonic() - started:.1f} s"
        f" ({len(packages.splitlines())} packages)"
    )
    return rootfs, packages


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


# --- 2. wheels ----------------------------------------------------------------------------------------------


def _build_venv(cache: Path, lock_text: str, lock: Path, log: Log) -> Path:
    """A virtualenv of this machine's Python with the lock's setuptools and grpcio-tools (the Dockerfile's
    build stage), cached; its pip also downloads the wheels and installs them into the image."""
    venv = cache / "build-venv"
    tools = "\n".join(build_tools(lock_text))
    python = venv / "bin" / "python"
    if python.exists() and _read(venv / ".tools") == tools:
        return venv
    log("image: build virtualenv (setuptools, grpcio-tools from requirements.lock)")
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], "python -m venv (build)")
    _run(
        [*_pip(python, "install"), "-c", str(lock), "setuptools", "grpcio-tools"],
        "pip install setuptools grpcio-tools",
    )
    (venv / ".tools").write_text(tools)
    return venv


def _glibc_minor(packages: str) -> int:
    for line in packages.splitlines():
        name, _, version = line.partition(" ")
        if name == "libc6":
            match = re.match(r"2\.(\d+)", version)
            if match:
                return int(match.group(1))
    raise ImageUnavailable("no libc6 in the Debian root")


def _wheelhouse(cache: Path, venv: Path, lock_text: str, glibc: int, log: Log) -> Path:
    """Wheels of the lock's runtime pins for CPython 3.11 and the root's glibc, downloaded once per lock."""
    pins = runtime_pins(lock_text)
    cp = "cp" + PYTHON_VERSION.replace(".", "")
    house = cache / f"wheels-{cp}"
    stamp = json.dumps({"pins": pins, "glibc": glibc})
    if _read(house / ".stamp") == stamp:
        return house
    log(f"image: downloading {len(pins)} wheels ({cp}, manylinux <= 2.{glibc})")
    new = cache / f"wheels-{cp}.new"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    (new / "requirements.txt").write_text("\n".join(pins) + "\n")
    platforms = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"]
    platforms += [f"manylinux_2_{g}_x86_64" for g in range(5, glibc + 1)]
    _run(
        _pip(venv / "bin" / "python", "download")
        + [
            "--no-deps",
            "--only-binary",
            ":all:",
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
        ]
        + ["--abi", cp, "--abi", "abi3", "--abi", "none"]
        + [arg for p in platforms for arg in ("--platform", p)]
        + ["-r", str(new / "requirements.txt"), "-d", str(new)],
        "pip download (the lock's runtime pins)",
    )
    shutil.rmtree(house, ignore_errors=True)
    new.rename(house)
    (house / ".stamp").write_text(stamp)
    return house


def _project_wheel(root: Path, venv: Path, work: Path) -> Path:
    """The project's wheel, built as the Dockerfile builds it: from a copy of the files it copies, without
    build isolation, with the pinned build tools."""
    src = work / "src"
    for path in _source_files(root):
        target = src / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    out = work / "wheels"
    python = venv / "bin" / "python"
    _run(
        [*_pip(python, "wheel"), "--no-build-isolation", "--no-deps", "--wheel-dir", str(out), str(src)],
        "pip wheel (the project)",
    )
    (wheel,) = out.glob("ballast-*.whl")
    return wheel


# --- 3. the image's root ------------------------------------------------------------------------------------


def _install_ballast(rootfs: Path, venv: Path, wheelhouse: Path, wheel: Path, lock: Path) -> None:
    """The Dockerfile's ``RUN pip wheel ... && python -m venv --without-pip ... && pip install ...
    && pip check && compileall``, in the image's root, with pip run from outside it (``/tmp/build``,
    removed after)."""
    layout = LAYOUT
    build = rootfs / "tmp" / "build"
    shutil.rmtree(build, ignore_errors=True)
    (build / "pip-lib").mkdir(parents=True)
    pip_pkg = next((venv / "lib").glob("python3*/site-packages/pip"))
    shutil.copytree(pip_pkg, build / "pip-lib" / "pip", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(wheelhouse, build / "wheels", ignore=shutil.ignore_patterns(".stamp", "requirements.txt"))
    shutil.copy2(wheel, build / "wheels" / wheel.name)
    shutil.copy2(lock, build / "requirements.lock")
    python = f"{layout.venv}/bin/python"
    pip_env = {"PYTHONPATH": "/tmp/build/pip-lib", "PIP_CONFIG_FILE": "/dev/null", "PIP_NO_CACHE_DIR": "1"}
    _chroot(rootfs, ["python3", "-m", "venv", "--without-pip", layout.venv], "python -m venv --without-pip")
    _chroot(
        rootfs,
        [
            *_pip(python, "install"),
            "--no-index",
            "--find-links",
            "/tmp/build/wheels",
            "--no-compile",
            "-c",
            "/tmp/build/requirements.lock",
            f"/tmp/build/wheels/{wheel.name}",
        ],
        "pip install (the wheel, -c requirements.lock)",
        **pip_env,
    )
    _chroot(rootfs, _pip(python, "check"), "pip check", **pip_env)
    shutil.rmtree(build)
    _chroot(
        rootfs,
        [
            python,
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            f"{layout.venv}/lib",
        ],
        "compileall (the virtualenv)",
    )


def _add_user_and_policy(rootfs: Path, policy: Path) -> None:
    """``groupadd --system --gid 65532 ballast && useradd --system --uid 65532 ...`` (Debian's essential set
    has no useradd, and the root has no shadow files: the account is locked by its ``*``), and the
    Dockerfile's ``COPY scheduler_config/policy.yaml /etc/ballast/policy.yaml``."""
    layout = LAYOUT
    with (rootfs / "etc" / "group").open("a") as f:
        f.write(f"{layout.user_name}:*:{layout.gid}:\n")
    with (rootfs / "etc" / "passwd").open("a") as f:
        f.write(f"{layout.user_name}:*:{layout.uid}:{layout.gid}::{layout.home}:{layout.shell}\n")
    target = rootfs / layout.policy.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(policy, target)
    target.chmod(0o644)


# --- the build ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltImage:
    """An image archive: ``archive`` (the OCI archive), the name it imports as, its manifest's digest, and
    whether this call built it (``rebuilt``) and in how many seconds (``seconds``: the check alone when
    up to date)."""

    archive: Path
    ref: str
    digest: str
    rebuilt: bool
    seconds: float


def build(dest: Path | None = None, *, root: Path = ROOT, ref: str = REF, log: Log = _stderr) -> BuiltImage:
    """The image archive of the checkout ``root``, built into the cache unless it is up to date there, then
    copied to ``dest`` when given. Raises ``ImageUnavailable`` saying what is missing or what failed."""
    reason = prerequisites()
    if reason:
        raise ImageUnavailable(reason)
    started = time.monotonic()
    cache = cache_dir()
    with _locked(cache):
        rootfs_base, packages = _base_rootfs(cache, log)
        digest = inputs_digest(root, ref, packages)
        # one folder per set of inputs: checkouts sharing the cache (two branches, two sessions) do not
        # replace each other's archive while the other still reads it
        image_dir = cache / "images" / digest[:24]
        archive = image_dir / ARCHIVE_NAME
        meta = _read(image_dir / "image.json")
        rebuilt = not (archive.is_file() and meta and json.loads(meta).get("inputs") == digest)
        if rebuilt:
            manifest_digest = _build_image(cache, rootfs_base, packages, root, ref, image_dir, digest, log)
            _prune(cache / "images", keep=KEEP_IMAGES)
        else:
            manifest_digest = json.loads(meta or "{}")["manifest"]
            os.utime(image_dir)  # recently used: pruned last
        if dest is not None:
            dest = Path(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.copyfile(archive, tmp)
            os.replace(tmp, dest)
            archive = dest
    seconds = time.monotonic() - started
    if rebuilt:
        log(f"image: {ref} built in {seconds:.1f} s ({archive})")
    return BuiltImage(archive, ref, manifest_digest, rebuilt, seconds)


KEEP_IMAGES = 3
"""Archives kept in the cache (the most recently built or used)."""


def _prune(images: Path, keep: int) -> None:
    folders = sorted(
        (p for p in images.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for old in folders[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def _build_image(
    cache: Path,
    rootfs_base: Path,
    packages: str,
    root: Path,
    ref: str,
    image_dir: Path,
    digest: str,
    log: Log,
) -> str:
    lock = root / "requirements.lock"
    lock_text = lock.read_text()
    work = cache / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    phases: dict[str, float] = {}
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        phases[name] = round(now - clock, 1)
        clock = now

    try:
        venv = _build_venv(cache, lock_text, lock, log)
        wheelhouse = _wheelhouse(cache, venv, lock_text, _glibc_minor(packages), log)
        phase("build tools and wheels")
        wheel = _project_wheel(root, venv, work)
        phase("project wheel")
        rootfs = work / "rootfs"
        _run(["cp", "-a", "--reflink=auto", str(rootfs_base), str(rootfs)], "copying the Debian root")
        _install_ballast(rootfs, venv, wheelhouse, wheel, lock)
        _add_user_and_policy(rootfs, root / "scheduler_config" / "policy.yaml")
        phase("virtualenv")
        image_dir.mkdir(parents=True, exist_ok=True)
        layer = oci_archive.write_layer(rootfs, work / "layer.tar.gz")
        config = oci_archive.image_config(layer, LAYOUT.config())
        manifest = oci_archive.write_archive(image_dir / ARCHIVE_NAME, ref, layer, config)
        phase("layer and archive")
        log("image: " + ", ".join(f"{k} {v} s" for k, v in phases.items()))
        (image_dir / "image.json").write_text(
            json.dumps(
                {
                    "inputs": digest,
                    "manifest": manifest,
                    "ref": ref,
                    "layer_bytes": layer.size,
                    "seconds": phases,
                },
                indent=1,
            )
        )
        (image_dir / "packages.txt").write_text(packages)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- command line -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ballast.testing.agent_image",
        description="Build Ballast's image from Debian 12 packages with the Dockerfile's layout (cached).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "build", help="write the OCI image archive to DEST (built only when its inputs changed)"
    )
    b.add_argument("dest", type=Path, help="the archive to write, e.g. ballast-image.tar")
    b.add_argument("--ref", default=REF, help=f"the name it imports as (default {REF})")
    args = parser.parse_args(argv)
    try:
        built = build(args.dest, ref=args.ref)
    except ImageUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    state = "built" if built.rebuilt else "up to date"
    print(f"{built.ref} {built.digest} {built.archive} ({state}, {built.seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
