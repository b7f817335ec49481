"""Real nodes as QEMU guests: each its own kernel (Debian 13, 6.12), systemd (cgroup v2 only, the kubelet's
systemd driver), containerd 1.7 with NRI, and the kubelet v1.36.2, joined to a loopback control plane.

The recipe is ``ballast/testing/vm/`` (``up-guest.sh NODE KUBECONFIG``, ``down-guest.sh NODE [KUBECONFIG]``;
its README says what each setting is for and why), or the folder ``$BALLAST_VM_RECIPE`` names. Images,
overlays and logs go to ``$BALLAST_VM_DIR`` (default ``$TMPDIR/ballast-vm``). The kubelet and kubectl are
the control plane's own unpacked binaries. Guests run under QEMU's software emulation here (no
hardware-assisted KVM): about 40 s from start to Ready, so a session keeps its guests (``GuestPool``) and
tests share them.

A guest is reached only through its forwarded ports on 127.0.0.1: ssh (``Guest.ssh``) and the kubelet's API
(``Guest.kubelet_get``). Never through the API server's node proxy (``kubectl logs/exec``,
``/api/v1/nodes/NODE/proxy``): kube-apiserver would look the node's name up with the host's resolver.

What a real node has and the recipe's guest lacked, given by the harness only (never by the shipped
manifests): the ``kubernetes`` Service address (10.96.0.1:443) DNATed to the API server, pod traffic
masqueraded out of the guest, the Service address in the control plane's serving certificate
(``controlplane.make_certs``); ``guest_control_plane`` adds the ServiceAccount admission plugin and
kube-controller-manager (the ``kube-root-ca.crt`` ConfigMap, each namespace's ``default`` account, the
DaemonSet controller) and a kube-scheduler (DaemonSet pods are bound by it), so a pod in a guest talks to the
API server with its own token as on any cluster.

``check_guests`` raises ``MissingPiece`` naming what is missing and how to get it; the tests skip with it on
a user's machine and fail under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ballast.testing.binaries import MissingPiece, kubectl_path, kubelet_path
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.realnode import embedded_kubeconfig, kubelet_ssl_context

RECIPE = Path(__file__).resolve().parent / "vm"
UP_TIMEOUT = 1200.0
"""up-guest.sh's own wait for Ready is 900 s; a cold image build (about 35 s) and two busy cores add more."""
READY_TIMEOUT = 900.0
TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "mmdebstrap": "mmdebstrap",
    "mkfs.ext4": "e2fsprogs",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "openssl": "openssl",
    "xz": "xz-utils",
    "flock": "util-linux",
    "ss": "iproute2",
}
"""Host tools the recipe runs, and the Debian package each comes from."""


def recipe_dir() -> Path:
    explicit = os.environ.get("BALLAST_VM_RECIPE")
    folder = Path(explicit) if explicit else RECIPE
    if not all((folder / s).is_file() for s in ("up-guest.sh", "down-guest.sh", "build-image.sh")):
        raise MissingPiece(
            f"no guest-node recipe at {folder} (up-guest.sh, down-guest.sh, build-image.sh): unset "
            "BALLAST_VM_RECIPE to use the clone's ballast/testing/vm"
        )
    return folder


def vm_dir() -> Path:
    """Where the recipe writes (images, overlays, logs): ``$BALLAST_VM_DIR``, else ``$TMPDIR/ballast-vm``."""
    explicit = os.environ.get("BALLAST_VM_DIR")
    return Path(explicit) if explicit else Path(tempfile.gettempdir()) / "ballast-vm"


def check_guests() -> None:
    """Raise ``MissingPiece`` unless a guest node can run here: the recipe, root (mmdebstrap's root mode,
    chroot), QEMU and the image tools, and the kubelet and kubectl binaries."""
    recipe_dir()
    if os.geteuid() != 0:
        raise MissingPiece(
            "guest nodes need root (the image is built with mmdebstrap --mode=root and chroot)"
        )
    absent = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if absent:
        raise MissingPiece(
            f"guest nodes need {', '.join(absent)} (Debian: apt-get install {' '.join(absent)})"
        )
    kubelet_path()
    kubectl_path()


def require_guests() -> None:
    """Skip (fail under ``CI=true``) unless a guest node can run here."""
    from ballast.testing.parts import missing_part

    try:
        check_guests()
    except MissingPiece as exc:
        missing_part(str(exc))


def guest_control_plane(cp: ControlPlane) -> ControlPlane:
    """What pods in guests need of the control plane: kube-controller-manager (``kube-root-ca.crt``, the
    service-account controller, the DaemonSet controller) and kube-scheduler (it binds DaemonSet pods). ``cp``
    must have been made with ``service_accounts=True`` (the admission plugin that mounts each pod's token)."""
    if not cp.service_accounts:
        raise ValueError("guest nodes need ControlPlane(service_accounts=True): pods get no token otherwise")
    cp.start_controller_manager()
    if cp.scheduler is None or not cp.scheduler.alive():
        cp.start_scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    wait_until(
        lambda: bool(cp.kubectl("get", "serviceaccount", "default", "-n", "default", check=False)),
        None,
        "the default ServiceAccount",
        120,
    )
    return cp


@dataclass(frozen=True)
class KubeletSettings:
    """A guest kubelet's own settings (the rest is the image's KubeletConfiguration)."""

    cgroup_root: str = "/"
    """``cgroupRoot``; with the systemd driver ``/a/b`` is the slice ``a.slice/a-b.slice``."""
    cpu_manager_policy: str = "none"
    reserved_cpus: str = "0"
    """``reservedSystemCPUs`` under the static policy."""

    def env(self) -> dict[str, str]:
        return {
            "CGROUP_ROOT": self.cgroup_root,
            "CPU_MANAGER_POLICY": self.cpu_manager_policy,
            "RESERVED_CPUS": self.reserved_cpus,
        }


@dataclass
class Guest:
    """One QEMU guest as node ``name`` of ``cp``: ``up()`` / ``down()``, ssh, its kubelet's API, restarts."""

    cp: ControlPlane
    name: str
    smp: int = 2
    mem: int = 1536
    settings: KubeletSettings = field(default_factory=KubeletSettings)
    images: tuple[Path, ...] = ()
    """Image archives unpacked into the guest's containerd when its disk image is built (the recipe's
    ``IMAGES``: imported on this machine, at its speed, not in the emulated guest)."""
    _ssl: ssl.SSLContext | None = field(default=None, init=False)

    @property
    def dir(self) -> Path:
        return vm_dir() / "guests" / self.name

    def _ports(self) -> dict[str, int]:
        try:
            text = (self.dir / "ports").read_text()
        except OSError as exc:
            raise RuntimeError(f"guest {self.name} is not up (no {self.dir / 'ports'})") from exc
        return {k: int(v) for k, _, v in (line.partition("=") for line in text.split()) if v}

    @property
    def ssh_port(self) -> int:
        return self._ports()["SSH_PORT"]

    @property
    def kubelet_port(self) -> int:
        return self._ports()["KUBELET_PORT"]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            BALLAST_VM_DIR=str(vm_dir()),
            KUBELET=str(kubelet_path()),
            KUBECTL=str(kubectl_path()),
            SMP=str(self.smp),
            MEM=str(self.mem),
            IMAGES=" ".join(str(p) for p in self.images),
            **self.settings.env(),
        )
        # Two vCPUs on one host thread: the harness's NAT loads connection tracking, which QEMU 7.2's
        # multi-threaded TCG once crashed in after a reboot (the recipe's README); and a busy guest then
        # costs one host core, not two, on a machine others share.
        env.setdefault(
            "TCG_THREAD", os.environ.get("BALLAST_TCG_THREAD", "single" if self.smp > 1 else "multi")
        )
        return env

    def _script(self, script: str, *args: str, timeout: float) -> str:
        argv = ["bash", str(recipe_dir() / script), self.name, *args]
        done = subprocess.run(argv, env=self._env(), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(
                f"{script} {self.name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def up(self) -> Guest:
        """Boot the guest (building the image first when needed); returns once its Node is Ready with this
        boot's bootID."""
        self._script("up-guest.sh", str(embedded_kubeconfig(self.cp)), timeout=UP_TIMEOUT)
        return self

    def down(self) -> None:
        """Stop the guest and remove its pods, its Node and its overlay."""
        self._script("down-guest.sh", str(embedded_kubeconfig(self.cp)), timeout=180)

    # --- in the guest -------------------------------------------------------------------------------------

    def ssh_argv(self, *, connect_timeout: int = 5) -> list[str]:
        return [
            "ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=6",
            "-i", str(vm_dir() / "pki" / "id_ed25519"), "-p", str(self.ssh_port), "root@127.0.0.1",
        ]  # fmt: skip

    def ssh(
        self, command: str, *, check: bool = True, timeout: float = 120, input: bytes | None = None
    ) -> str:
        """Run ``command`` (a shell line) as root in the guest; its stdout. ``check``: fail on a non-zero
        exit, naming the command, its status and stderr. A connection that fails before the command ran (a
        guest too busy to answer ssh's banner in time: under emulation on a loaded machine) is tried again
        while ``timeout`` lasts."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(deadline - time.monotonic(), 5)
            done = subprocess.run(
                [*self.ssh_argv(connect_timeout=min(int(left), 60)), command],
                input=input,
                capture_output=True,
                timeout=left,
                check=False,
            )
            if done.returncode != 255 or not _not_connected(done.stderr) or time.monotonic() >= deadline:
                break
            time.sleep(2)
        if check and done.returncode != 0:
            raise RuntimeError(
                f"in guest {self.name}: {command!r} exited {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done.stdout.decode(errors="replace")

    def boot_id(self) -> str | None:
        """The running kernel's boot ID, or None while ssh does not answer."""
        try:
            out = self.ssh("cat /proc/sys/kernel/random/boot_id", check=False, timeout=15)
        except (subprocess.TimeoutExpired, RuntimeError):
            return None
        return out.strip() or None

    def node_ready(self, boot_id: str) -> bool:
        """The Node is Ready and its kubelet reported ``boot_id`` (a Node whose guest is down keeps its last
        Ready=True: the node-lifecycle controller is off)."""
        from kubernetes.client.rest import ApiException

        try:
            node = self.cp.core().read_node(self.name)
        except ApiException:
            return False
        ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
        return node.status.node_info.boot_id == boot_id and bool(ready) and ready[0].status == "True"

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> str:
        """Wait until ssh answers and the Node is Ready with the guest's current boot ID; returns it."""
        wait_until(lambda: self.boot_id() is not None, None, f"ssh to guest {self.name}", timeout)
        boot = self.boot_id()
        assert boot
        wait_until(lambda: self.node_ready(boot), None, f"node {self.name} Ready (boot {boot})", timeout)
        return boot

    def reboot(self, timeout: float = READY_TIMEOUT) -> str:
        """``systemctl reboot`` in the guest (the overlay, and so the node's state, is kept); returns the new
        boot ID once ssh answers with it and the Node is Ready with it."""
        old = self.boot_id()
        self.ssh("systemctl reboot", check=False, timeout=30)
        wait_until(
            lambda: (b := self.boot_id()) is not None and b != old,
            None,
            f"guest {self.name} rebooted",
            timeout,
        )
        return self.wait_ready(timeout)

    def restart(self, unit: str, timeout: float = 300) -> None:
        """``systemctl restart UNIT`` (``containerd``, ``kubelet``) and wait until it is active again; for the
        kubelet also until its API answers and the Node is Ready."""
        self.ssh(f"systemctl restart {shlex.quote(unit)}", timeout=timeout)
        wait_until(
            lambda: self.ssh(f"systemctl is-active {shlex.quote(unit)}", check=False).strip() == "active",
            None,
            f"{unit} active in {self.name}",
            timeout,
        )
        if unit in ("kubelet", "kubelet.service"):
            self._wait_kubelet(timeout)

    def daemon_reload(self) -> None:
        """``systemctl daemon-reload``: systemd re-reads its units and re-applies every unit's cgroup
        settings."""
        self.ssh("systemctl daemon-reload")

    def configure_kubelet(self, settings: KubeletSettings, timeout: float = 300) -> None:
        """Restart the kubelet with other settings (kept across reboots); returns once its ``/configz`` shows
        them and the Node is Ready. Pods the old kubelet ran should be gone first (another cgroupRoot or CPU
        manager policy leaves them where the new one does not look)."""
        lines = "".join(f"{k}={v}\n" for k, v in settings.env().items())
        self.ssh("cat > /etc/kubernetes/kubelet-settings", input=lines.encode())
        self.settings = settings
        self.restart("kubelet", timeout)

        def applied() -> bool:
            config = self.configz()
            return (
                config.get("cgroupRoot") == settings.cgroup_root
                and config.get("cpuManagerPolicy") == settings.cpu_manager_policy
            )

        wait_until(applied, None, f"kubelet of {self.name} with {settings}", timeout)

    def _wait_kubelet(self, timeout: float) -> None:
        boot = self.boot_id()
        assert boot
        started = time.monotonic()
        wait_until(
            lambda: self._kubelet_raw("/healthz") == b"ok", None, f"kubelet of {self.name} healthy", timeout
        )
        left = max(timeout - (time.monotonic() - started), 10)
        wait_until(lambda: self.node_ready(boot), None, f"node {self.name} Ready", left)

    def ensure_image(self, archive: Path, ref: str, digest: str, timeout: float = 1800) -> bool:
        """Import ``archive`` unless the guest's containerd has ``ref`` with that manifest ``digest`` already
        (an image stays across reboots); True when it imported."""
        listed = self.ssh(f"ctr -n k8s.io images ls name=={shlex.quote(ref)}", check=False)
        if digest in listed:
            return False
        self.import_image(archive, timeout)
        return True

    def import_image(self, archive: Path, timeout: float = 1800) -> str:
        """Import an OCI or docker archive into the guest's containerd (``k8s.io`` namespace, what the
        kubelet's pods use; pods then say ``imagePullPolicy: Never``); kept across reboots."""
        with archive.open("rb") as f:
            data = f.read()
        return self.ssh(
            "set -e; f=$(mktemp /var/tmp/image.XXXXXX); cat > $f; ctr -n k8s.io images import $f; rm -f $f",
            input=data,
            timeout=timeout,
        )

    # --- the kubelet's own API, through the forwarded port ----------------------------------------------

    def _kubelet_raw(self, path: str) -> bytes:
        if self._ssl is None:
            self._ssl = kubelet_ssl_context(self.cp)
        url = f"https://127.0.0.1:{self.kubelet_port}{path}"
        with urllib.request.urlopen(url, context=self._ssl, timeout=15) as r:
            return r.read()

    def kubelet_get(self, path: str) -> Any:
        """GET ``path`` of the guest's kubelet (the rig's admin client certificate) as JSON."""
        return json.loads(self._kubelet_raw(path))

    def configz(self) -> dict[str, Any]:
        """The kubelet's running configuration (``/configz``)."""
        return self.kubelet_get("/configz").get("kubeletconfig") or {}

    def stats_summary(self) -> dict[str, Any]:
        """``/stats/summary``: cAdvisor's figures, the independent reference for the agent's."""
        return self.kubelet_get("/stats/summary")

    def pod_stats(self, uid: str) -> dict[str, Any] | None:
        for pod in self.stats_summary().get("pods") or []:
            if (pod.get("podRef") or {}).get("uid") == uid:
                return pod
        return None


NOT_CONNECTED = ("connect to host", "banner exchange", "kex_exchange_identification")
"""ssh's words for a connection that never reached the command (exit status 255 also ends one that broke
off mid-command, which must not run twice)."""


def _not_connected(stderr: bytes) -> bool:
    text = stderr.decode(errors="replace")
    return any(words in text for words in NOT_CONNECTED) and "closed by remote host" not in text


@dataclass
class GuestPool:
    """The session's guests, made on first use and kept (a boot costs about 40 s under emulation); ``close()``
    stops them all and removes their Nodes."""

    cp: ControlPlane
    images: tuple[Path, ...] = ()
    """Image archives every guest starts with (``Guest.images``)."""
    guests: dict[str, Guest] = field(default_factory=dict)

    def get(
        self, name: str, *, smp: int = 2, mem: int = 1536, settings: KubeletSettings | None = None
    ) -> Guest:
        """Guest ``name``, up and Ready. Asked again with other kubelet settings, its kubelet restarts with
        them; with another size it is booted again."""
        settings = settings or KubeletSettings()
        guest = self.guests.get(name)
        if guest is not None and (guest.smp, guest.mem) != (smp, mem):
            guest.down()
            del self.guests[name]
            guest = None
        if guest is None:
            guest = Guest(self.cp, name, smp, mem, settings, self.images)
            guest.down()  # what an earlier, interrupted session may have left under this name
            try:
                guest.up()
            except BaseException:
                # up-guest.sh leaves QEMU running when the guest is late (no ssh, not Ready in time): a
                # guest the pool does not hold would outlive the session
                guest.down()
                raise
            self.guests[name] = guest
        elif guest.settings != settings:
            guest.configure_kubelet(settings)
        return guest

    def close(self) -> None:
        errors = []
        for guest in self.guests.values():
            try:
                guest.down()
            except Exception as e:  # the others still go down
                errors.append(e)
        self.guests.clear()
        if errors:
            raise errors[0]
