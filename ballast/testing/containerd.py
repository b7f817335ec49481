"""A private, real containerd (with its CRI plugin) for integration tests, and pods run in it like a kubelet.

``PrivateContainerd`` starts ``containerd`` as a child process with its own root, state, runc root and
gRPC socket in a short temporary directory, imports a busybox OCI image built on the spot from the
static ``busybox`` binary (no registry), and runs host-network pod sandboxes and containers through CRI
with the kubelet's labels and cgroup parents. ``stop()`` undoes everything it started: containers,
sandboxes, containerd and its shims (by PID), mounts under the temporary directory, new shim sockets,
and the cgroup directories it created.

Settings that matter on these machines (see the project's containerd notes): ``restrict_oom_score_adj``
(root lacks CAP_SYS_RESOURCE), ``disable_apparmor``, no hugetlb controller, runc v2 shim with the
cgroupfs driver, host networking (no CNI), and a host-network sandbox without a hostname.

The CRI messages for creating sandboxes and containers are not in the agent's own proto (production
code needs none of them): ``HARNESS_PROTO`` below declares them with the upstream field numbers, in
package ``runtime.v1`` and importing ``ballast/agent/cri/api.proto`` for the shared messages; it is compiled
once per process and called with generic gRPC unary calls on ``/runtime.v1.RuntimeService/<Method>``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from ballast.agent.cpuset import CPUSet
from ballast.agent.cri import _stubs
from ballast.agent.cri.client import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    CRIClient,
    api_pb2,
)

IMAGE = "docker.io/ballast/busybox:test"
SANDBOX_IMAGE = "docker.io/ballast/pause:test"
SHIM_SOCKET_DIR = Path("/run/containerd/s")  # containerd 1.6 puts shim sockets here whatever `state` says

HARNESS_PROTO = """
syntax = "proto3";
package runtime.v1;
import "ballast/agent/cri/api.proto";

enum NamespaceMode { POD = 0; CONTAINER = 1; NODE = 2; TARGET = 3; }
message NamespaceOption { NamespaceMode network = 1; NamespaceMode pid = 2; NamespaceMode ipc = 3; }
message LinuxSandboxSecurityContext { NamespaceOption namespace_options = 1; bool privileged = 6; }
message LinuxPodSandboxConfig { string cgroup_parent = 1; LinuxSandboxSecurityContext security_context = 2; }
message PodSandboxMetadata { string name = 1; string uid = 2; string namespace = 3; uint32 attempt = 4; }
message PodSandboxConfig {
  PodSandboxMetadata metadata = 1; string hostname = 2; string log_directory = 3;
  map<string, string> labels = 6; map<string, string> annotations = 7; LinuxPodSandboxConfig linux = 8;
}
message RunPodSandboxRequest { PodSandboxConfig config = 1; string runtime_handler = 2; }
message RunPodSandboxResponse { string pod_sandbox_id = 1; }
message StopPodSandboxRequest { string pod_sandbox_id = 1; }
message StopPodSandboxResponse {}
message RemovePodSandboxRequest { string pod_sandbox_id = 1; }
message RemovePodSandboxResponse {}
message PodSandboxFilter { string id = 1; map<string, string> label_selector = 3; }
message ListPodSandboxRequest { PodSandboxFilter filter = 1; }
message PodSandbox { string id = 1; PodSandboxMetadata metadata = 2; map<string, string> labels = 5; }
message ListPodSandboxResponse { repeated PodSandbox items = 1; }
message ImageSpec { string image = 1; }
message LinuxContainerSecurityContext { NamespaceOption namespace_options = 3; }
message LinuxContainerConfig {
  LinuxContainerResources resources = 1; LinuxContainerSecurityContext security_context = 2;
}
message ContainerConfig {
  ContainerMetadata metadata = 1; ImageSpec image = 2; repeated string command = 3; repeated string args = 4;
  map<string, string> labels = 9; map<string, string> annotations = 10; string log_path = 11;
  LinuxContainerConfig linux = 15;
}
message CreateContainerRequest {
  string pod_sandbox_id = 1; ContainerConfig config = 2; PodSandboxConfig sandbox_config = 3;
}
message CreateContainerResponse { string container_id = 1; }
message StartContainerRequest { string container_id = 1; }
message StartContainerResponse {}
message StopContainerRequest { string container_id = 1; int64 timeout = 2; }
message StopContainerResponse {}
message RemoveContainerRequest { string container_id = 1; }
message RemoveContainerResponse {}
"""

_harness_pb2: ModuleType | None = None


def harness_messages() -> ModuleType:
    """The compiled ``HARNESS_PROTO`` (once per process: protobuf refuses a file registered twice)."""
    global _harness_pb2
    if _harness_pb2 is None:
        _stubs.load()  # ballast.agent.cri.api_pb2 must be importable for the generated import
        with tempfile.TemporaryDirectory(prefix="ballast-harness-proto-") as tmp:
            include = Path(tmp) / "src"
            (include / _stubs.PROTO).parent.mkdir(parents=True)
            shutil.copy(_stubs.SOURCE_ROOT / _stubs.PROTO, include / _stubs.PROTO)
            (include / "ballast_cri_harness.proto").write_text(HARNESS_PROTO)
            out = Path(tmp) / "out"
            _stubs.generate("ballast_cri_harness.proto", include, out)
            spec = importlib.util.spec_from_file_location(
                "ballast_cri_harness_pb2", out / "ballast_cri_harness_pb2.py"
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        _harness_pb2 = module
    return _harness_pb2


class ContainerdUnavailable(RuntimeError):
    """containerd cannot run here; the message is the exact reason."""


def prerequisites() -> str | None:
    """Why a private containerd cannot run on this machine, or ``None`` when it can be tried."""
    if os.geteuid() != 0:
        return "needs root (containerd and runc manage cgroups and mounts)"
    missing = [b for b in ("containerd", "ctr", "runc", "containerd-shim-runc-v2") if shutil.which(b) is None]
    if shutil.which("busybox") is None and not Path("/bin/busybox").exists():
        missing.append("busybox")
    if missing:
        return f"missing {', '.join(missing)} (Debian packages containerd, runc, busybox-static)"
    cg = Path("/sys/fs/cgroup")
    if not (cg / "cpuset").is_dir() and not (cg / "cgroup.controllers").exists():
        return "no cpuset cgroup controller under /sys/fs/cgroup"
    return None


# --- the image ----------------------------------------------------------------------------------------


def _goarch() -> str:
    machine = platform.machine()
    return {
        "x86_64": "amd64",
        "aarch64": "arm64",
        "armv7l": "arm",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
    }.get(machine, machine)


def build_busybox_image(busybox: Path, names: list[str]) -> bytes:
    """An OCI image-layout tarball with one layer (``/bin/busybox`` and a few applet links), tagged with
    every name in ``names`` (``io.containerd.image.name``), default command ``busybox sleep 3600``."""

    def add(
        tar: tarfile.TarFile, name: str, *, data: bytes | None = None, mode: int = 0o755, link: str = ""
    ) -> None:
        info = tarfile.TarInfo(name)
        info.mtime = 0
        info.mode = mode
        if link:
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
        elif data is None:
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    layer_io = io.BytesIO()
    with tarfile.open(fileobj=layer_io, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "proc", "sys", "dev", "run", "var"):
            add(tar, d)
        add(tar, "tmp", mode=0o1777)
        add(tar, "bin/busybox", data=busybox.read_bytes())
        for applet in ("sh", "sleep", "cat"):
            add(tar, f"bin/{applet}", link="busybox")
    layer = layer_io.getvalue()
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest, len(data)

    layer_digest, layer_size = blob(layer)
    arch = _goarch()
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {
            "Entrypoint": ["/bin/busybox"],
            "Cmd": ["sleep", "3600"],
            "Env": ["PATH=/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_size = blob(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    manifest_digest, manifest_size = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
            for name in names
        ],
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        add(tar, "oci-layout", data=json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), mode=0o644)
        add(tar, "index.json", data=json.dumps(index).encode(), mode=0o644)
        add(tar, "blobs")
        add(tar, "blobs/sha256")
        for digest, data in blobs.items():
            add(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", data=data, mode=0o644)
    return out.getvalue()


# --- containerd ---------------------------------------------------------------------------------------


def _config(base: Path) -> str:
    return f"""
version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{base}/containerd.sock"

[ttrpc]
  address = "{base}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{base}/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{base}/cni/bin"
    conf_dir = "{base}/cni/conf"
"""


@dataclass
class RunningPod:
    uid: str
    name: str
    namespace: str
    sandbox_id: str
    cgroup_parent: str
    container_ids: dict[str, str] = field(default_factory=dict)


class PrivateContainerd:
    """See the module docstring. Use as a context manager, or call ``start()`` and ``stop()``."""

    def __init__(self) -> None:
        # A short base path: unix socket paths are limited to ~107 bytes.
        self.base = Path(tempfile.mkdtemp(prefix="bct-"))
        self.socket = self.base / "containerd.sock"
        self.log_path = self.base / "containerd.log"
        self.proc: subprocess.Popen | None = None
        self.pods: list[RunningPod] = []
        self._channel: grpc.Channel | None = None
        self._pb: ModuleType | None = None
        self._shim_sockets_before: set[str] = set()
        self._created_dirs: list[Path] = []
        self._cgroup_dirs: list[Path] = []

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def __enter__(self) -> PrivateContainerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- start --------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        reason = prerequisites()
        if reason:
            raise ContainerdUnavailable(reason)
        for d in (Path("/run/containerd"), SHIM_SOCKET_DIR):
            if not d.exists():
                self._created_dirs.append(d)
        with contextlib.suppress(OSError):
            self._shim_sockets_before = {p.name for p in SHIM_SOCKET_DIR.iterdir()}
        for controller_root in self._cgroup_roots():
            kubepods = controller_root / "kubepods"
            for d in (kubepods, kubepods / "burstable", kubepods / "besteffort"):
                if not d.exists():
                    self._cgroup_dirs.append(d)
        (self.base / "cni" / "conf").mkdir(parents=True)
        (self.base / "cni" / "bin").mkdir(parents=True)
        config = self.base / "config.toml"
        config.write_text(_config(self.base))
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child, closed in stop()
        self._log = log
        self.proc = subprocess.Popen(
            ["containerd", "--config", str(config), "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ContainerdUnavailable(
                    f"containerd exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if self.socket.exists():
                try:
                    with CRIClient(self.endpoint, timeout=2.0, retries=0) as client:
                        client.version()
                    break
                except Exception as e:  # not serving CRI yet
                    last_error = str(e)
            time.sleep(0.1)
        else:
            raise ContainerdUnavailable(
                f"containerd did not serve CRI in {timeout:.0f}s ({last_error}): {self.log_tail()}"
            )
        self._channel = grpc.insecure_channel(self.endpoint)
        self._pb = harness_messages()
        self._import_image()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        interesting = [line for line in text if "level=error" in line or "level=fatal" in line] or text
        return " | ".join(interesting[-lines:])

    def _import_image(self) -> None:
        busybox = Path(shutil.which("busybox") or "/bin/busybox")
        tarball = self.base / "busybox-oci.tar"
        tarball.write_bytes(build_busybox_image(busybox, [IMAGE, SANDBOX_IMAGE]))
        self.import_image(tarball)

    def ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """``ctr`` against this containerd, in the CRI's namespace ``k8s.io`` (not checked)."""
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def import_image(self, tarball: Path) -> None:
        """``ctr images import`` of an image archive (OCI layout or docker-archive) into ``k8s.io``."""
        done = self.ctr("images", "import", str(tarball), timeout=300)
        if done.returncode != 0:
            raise ContainerdUnavailable(
                f"ctr images import failed: {done.stderr.strip() or done.stdout.strip()}"
            )

    # --- pods ---------------------------------------------------------------------------------------

    def _call(self, method: str, request: Any, timeout: float = 60.0) -> Any:
        assert self._channel is not None and self._pb is not None
        response_type = getattr(self._pb, f"{method}Response")
        rpc = self._channel.unary_unary(
            f"/runtime.v1.RuntimeService/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString,
        )
        return rpc(request, timeout=timeout)

    def run_pod(
        self,
        name: str,
        containers: list[str],
        *,
        uid: str | None = None,
        namespace: str = "default",
        qos: str = "burstable",
    ) -> RunningPod:
        """A host-network sandbox and running ``busybox sleep`` containers, labelled like the kubelet does.

        ``qos`` picks the cgroup parent: ``guaranteed`` -> ``/kubepods/pod<uid>``, else
        ``/kubepods/<qos>/pod<uid>``.
        """
        pb = self._pb
        assert pb is not None
        uid = uid or str(uuid.uuid4())
        parent = f"/kubepods/pod{uid}" if qos == "guaranteed" else f"/kubepods/{qos}/pod{uid}"
        labels = {POD_UID_LABEL: uid, POD_NAME_LABEL: name, POD_NAMESPACE_LABEL: namespace}
        log_dir = self.base / "logs" / f"{namespace}_{name}_{uid}"
        log_dir.mkdir(parents=True)
        host = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
        sandbox_config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            log_directory=str(log_dir),
            labels=labels,
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=parent, security_context=pb.LinuxSandboxSecurityContext(namespace_options=host)
            ),
        )
        sandbox_id = self._call(
            "RunPodSandbox", pb.RunPodSandboxRequest(config=sandbox_config)
        ).pod_sandbox_id
        running = RunningPod(uid, name, namespace, sandbox_id, parent)
        self.pods.append(running)
        for cname in containers:
            config = pb.ContainerConfig(
                metadata=api_pb2.ContainerMetadata(name=cname, attempt=0),
                image=pb.ImageSpec(image=IMAGE),
                command=["/bin/busybox", "sleep", "3600"],
                labels={**labels, CONTAINER_NAME_LABEL: cname},
                log_path=f"{cname}/0.log",
                linux=pb.LinuxContainerConfig(
                    security_context=pb.LinuxContainerSecurityContext(namespace_options=host)
                ),
            )
            cid = self._call(
                "CreateContainer",
                pb.CreateContainerRequest(
                    pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config
                ),
            ).container_id
            running.container_ids[cname] = cid
            self._call("StartContainer", pb.StartContainerRequest(container_id=cid))
        return running

    def remove_pod(self, running: RunningPod) -> None:
        """Stop and remove the pod's containers and sandbox (idempotent)."""
        pb = self._pb
        assert pb is not None
        for cid in running.container_ids.values():
            with contextlib.suppress(grpc.RpcError):
                self._call("StopContainer", pb.StopContainerRequest(container_id=cid, timeout=0))
            with contextlib.suppress(grpc.RpcError):
                self._call("RemoveContainer", pb.RemoveContainerRequest(container_id=cid))
        with contextlib.suppress(grpc.RpcError):
            self._call("StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id=running.sandbox_id))
        with contextlib.suppress(grpc.RpcError):
            self._call("RemovePodSandbox", pb.RemovePodSandboxRequest(pod_sandbox_id=running.sandbox_id))
        if running in self.pods:
            self.pods.remove(running)
        for root in self._cgroup_roots():
            self._cgroup_dirs.append(root / running.cgroup_parent.lstrip("/"))

    def list_sandboxes(self) -> list[str]:
        pb = self._pb
        assert pb is not None
        return [s.id for s in self._call("ListPodSandbox", pb.ListPodSandboxRequest()).items]

    # --- cleanup ------------------------------------------------------------------------------------

    @staticmethod
    def _cgroup_roots() -> list[Path]:
        cg = Path("/sys/fs/cgroup")
        if (cg / "cgroup.controllers").exists():
            return [cg]
        # Every v1 hierarchy, and the unified (v2) one of a hybrid set-up: runc creates the path in all.
        return [p for p in cg.iterdir() if p.is_dir() and not p.is_symlink()]

    def _our_processes(self) -> list[int]:
        """Live PIDs whose command line names our directory: containerd and the shims it started.

        Zombies have an empty command line, so they are not listed (there is nothing left to stop)."""
        marker = str(self.base).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def stop(self) -> None:
        """Remove everything started: pods, containerd, shims, mounts, sockets, cgroups, the directory."""
        if self._channel is not None:
            for running in list(self.pods):
                with contextlib.suppress(Exception):
                    self.remove_pod(running)
            self._channel.close()
            self._channel = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if hasattr(self, "_log"):
            self._log.close()
        # Shims of removed sandboxes exit by themselves (and remove their sockets); give them a moment.
        deadline = time.monotonic() + 5
        while self._our_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self._our_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._unmount_under_base()
        with contextlib.suppress(OSError):
            for p in SHIM_SOCKET_DIR.iterdir():
                if p.name not in self._shim_sockets_before:
                    with contextlib.suppress(OSError):
                        p.unlink()
        # Deepest first; only directories that are empty (the kernel refuses others) and were ours.
        for d in sorted(set(self._cgroup_dirs), key=lambda p: len(p.parts), reverse=True):
            for sub in sorted(d.glob("*/"), key=lambda p: len(p.parts), reverse=True) if d.exists() else []:
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                d.rmdir()
        for d in reversed(self._created_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        shutil.rmtree(self.base, ignore_errors=True)

    def _unmount_under_base(self) -> None:
        base = str(self.base)
        try:
            lines = Path("/proc/self/mountinfo").read_text().splitlines()
        except OSError:
            return
        targets = [line.split()[4] for line in lines if len(line.split()) > 4]
        for target in sorted((t for t in targets if t.startswith(base)), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def cpus_allowed(pid: int) -> CPUSet:
    """``Cpus_allowed_list`` of ``/proc/<pid>/status``: the CPUs the kernel lets the process run on."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return CPUSet.parse(line.split(":", 1)[1].strip())
    raise AssertionError(f"no Cpus_allowed_list for pid {pid}")
