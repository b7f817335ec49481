"""Real nodes for the loopback control plane: a real kubelet v1.36.2 with a containerd of its own.

The recipe is ``ballast/testing/node/`` (``up-node.sh NODE KUBECONFIG``, ``down-node.sh NODE KUBECONFIG``; the
development guide says what each setting is for and why), or the folder ``$BALLAST_NODE_RECIPE`` names. The
kubelet and kubectl are the control plane's own unpacked binaries (``controlplane.kubelet_path``). Each node
keeps its state, sockets and logs in a folder of its own below a short temporary path (unix socket paths are
limited), with its own ``cgroupRoot`` (``/<node>`` unless asked for ``/``), so several nodes share one host.

Pods on these nodes run real processes in cgroups the kubelet makes: what ``/proc/<pid>/status``, the pod
cgroups and the kubelet's own ``/stats/summary`` say is what a user's node would say. Images are local
(``localhost/ballast-busybox:1``, ``imagePullPolicy: Never``); pods get a 127.x address in a namespace of
their own and reach nothing else.

``check_real_nodes`` raises ``MissingPiece`` naming what is missing and how to get it; the tests skip with
it on a user's machine and fail under ``CI=true``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ballast.testing.binaries import MissingPiece, kubectl_path, kubelet_path
from ballast.testing.controlplane import ControlPlane, Server, free_port, scraped, spawn, wait_until

BUSYBOX = "localhost/ballast-busybox:1"
RECIPE = Path(__file__).resolve().parent / "node"
UP_TIMEOUT = 240.0
"""up-node.sh waits up to 120 s for Ready itself; on two busy cores image import and start can add more."""


def recipe_dir() -> Path:
    explicit = os.environ.get("BALLAST_NODE_RECIPE")
    folder = Path(explicit) if explicit else RECIPE
    if not (folder / "up-node.sh").is_file() or not (folder / "down-node.sh").is_file():
        raise MissingPiece(
            f"no real-node recipe at {folder} (up-node.sh, down-node.sh): unset BALLAST_NODE_RECIPE to use "
            "the clone's ballast/testing/node"
        )
    return folder


def _cgroup_v1_controllers() -> set[str]:
    found: set[str] = set()
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, _, after = line.partition(" - ")
        fields = after.split()
        if len(fields) >= 3 and fields[0] == "cgroup":
            found.update(fields[2].split(","))
    return found


def check_real_nodes() -> None:
    """Raise ``MissingPiece`` unless a real node can run here (root, cgroup v1, containerd, runc, a static
    busybox, the CNI loopback plugin, the kubelet binary and the recipe)."""
    recipe_dir()
    if os.geteuid() != 0:
        raise MissingPiece("a real kubelet needs root")
    missing = {"cpu", "cpuacct", "cpuset", "memory"} - _cgroup_v1_controllers()
    if missing:
        raise MissingPiece(
            f"cgroup v1 controllers {', '.join(sorted(missing))} are not mounted (the test nodes' recipe "
            "runs the kubelet on cgroup v1)"
        )
    tools = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "busybox", "nsenter", "ip", "xz")
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        raise MissingPiece(
            f"{', '.join(absent)} not found (Debian: apt-get install containerd runc busybox-static "
            "util-linux iproute2 xz-utils)"
        )
    if not Path("/usr/lib/cni/loopback").is_file():
        raise MissingPiece("no CNI loopback plugin (Debian: apt-get install containernetworking-plugins)")
    kubelet_path()


def embedded_kubeconfig(cp: ControlPlane) -> Path:
    """The rig's admin kubeconfig with its certificates inline: the recipe gives the kubelet's API the CA it
    finds as ``certificate-authority-data`` (else the kubelet would answer every client 401)."""
    assert cp.workdir
    path = cp.workdir / "admin-embedded.kubeconfig"
    if not path.is_file():
        config = json.loads(cp.kubeconfig.read_text())
        for cluster in config["clusters"]:
            ca = Path(cluster["cluster"].pop("certificate-authority"))
            cluster["cluster"]["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
        for user in config["users"]:
            for key in ("client-certificate", "client-key"):
                data = Path(user["user"].pop(key)).read_bytes()
                user["user"][f"{key}-data"] = base64.b64encode(data).decode()
        tmp = path.with_suffix(".tmp")
        # block YAML, one key a line: the recipe reads certificate-authority-data with awk
        tmp.write_text(yaml.safe_dump(config, default_flow_style=False, width=1 << 20))
        tmp.replace(path)
    return path


def require_real_nodes() -> None:
    """Skip (fail under ``CI=true``) unless a real node can run here."""
    from ballast.testing.parts import missing_part

    try:
        check_real_nodes()
    except MissingPiece as exc:
        missing_part(str(exc))


def kubelet_ssl_context(cp: ControlPlane) -> ssl.SSLContext:
    """The rig's admin certificate as a client of the kubelet API (its clientCAFile is the rig's CA); the
    kubelet serves a self-signed certificate, so the server is not verified (loopback only)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(cp.pki / "admin.crt"), str(cp.pki / "admin.key"))
    return ctx


@dataclass
class RealNode:
    """One kubelet + containerd as node ``name`` of ``cp``; ``up()`` / ``down()``."""

    cp: ControlPlane
    name: str
    base: Path
    cgroup_root: str = ""
    """The kubelet's ``cgroupRoot``; empty: ``/<name>``."""
    cpu_manager_policy: str = "none"
    reserved_cpus: str = "0"
    _ssl: ssl.SSLContext | None = field(default=None, init=False)

    @property
    def dir(self) -> Path:
        return self.base / self.name

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def cri_endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def kubelet_config(self) -> Path:
        return self.dir / "kubelet" / "config.yaml"

    @property
    def root(self) -> str:
        return self.cgroup_root or f"/{self.name}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            BALLAST_KUBELET_DIR=str(self.base),
            CGROUP_ROOT=self.root,
            CPU_MANAGER_POLICY=self.cpu_manager_policy,
            RESERVED_CPUS=self.reserved_cpus,
            KUBELET=str(kubelet_path()),
            KUBECTL=str(kubectl_path()),
        )
        return env

    def _run(self, script: str, timeout: float) -> str:
        argv = ["bash", str(recipe_dir() / script), self.name, str(embedded_kubeconfig(self.cp))]
        done = subprocess.run(argv, env=self._env(), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(
                f"{script} {self.name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def up(self) -> RealNode:
        """Start (or, after a configuration change, restart) the node; returns once it is Ready."""
        self._run("up-node.sh", UP_TIMEOUT)
        return self

    def down(self) -> None:
        self._run("down-node.sh", 120)

    def pid(self, program: str) -> int | None:
        """The pid of this node's running ``kubelet`` or ``containerd``."""
        try:
            pid = int((self.dir / "run" / f"{program}.pid").read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def kill(self, program: str) -> None:
        """SIGKILL the node's kubelet or containerd (a crash); ``up()`` starts it again."""
        pid = self.pid(program)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), None, f"{program} gone", 30)

    # --- the kubelet's own API ------------------------------------------------------------------------

    def kubelet_get(self, path: str) -> Any:
        if self._ssl is None:
            self._ssl = kubelet_ssl_context(self.cp)
        port = (self.dir / "run" / "ports").read_text().split()[0]
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=self._ssl, timeout=10) as r:
            return json.loads(r.read())

    def stats_summary(self) -> dict[str, Any]:
        """``/stats/summary``: cAdvisor's figures, the independent reference for the agent's."""
        return self.kubelet_get("/stats/summary")

    def pod_stats(self, uid: str) -> dict[str, Any] | None:
        for pod in self.stats_summary().get("pods") or []:
            if (pod.get("podRef") or {}).get("uid") == uid:
                return pod
        return None


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def new_base() -> Path:
    """A short folder for the nodes' state (containerd's socket path must stay under 100 characters)."""
    return Path(tempfile.mkdtemp(prefix="bk-", dir="/tmp"))


# --- pods on real nodes ---------------------------------------------------------------------------------


def busybox_pod(
    name: str,
    command: str,
    *,
    node: str | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    scheduler_name: str = "default-scheduler",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod running ``sh -c COMMAND`` in the local busybox image; bound to ``node`` when given."""
    container: dict[str, Any] = {
        "name": "c",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
    }
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {}), "labels": dict(labels or {})},
        "spec": spec,
    }


BURN = "while :; do :; done"
"""A busy loop: PID 1 of the container, so SIGTERM is ignored and the kubelet kills it after the grace."""


def wait_running(
    core: Any, names: list[str], namespace: str = "default", timeout: float = 120
) -> dict[str, Any]:
    """Wait until every pod is Running with all containers ready; returns name -> pod (kubernetes model)."""
    pods: dict[str, Any] = {}

    def ready() -> bool:
        for name in names:
            pod = core.read_namespaced_pod(name, namespace)
            statuses = pod.status.container_statuses or []
            if pod.status.phase != "Running" or not statuses or not all(s.ready for s in statuses):
                return False
            pods[name] = pod
        return True

    wait_until(ready, None, f"pods {', '.join(names)} running", timeout)
    return pods


def delete_pods(core: Any, names: list[str], namespace: str = "default", timeout: float = 60) -> None:
    """Delete the pods the way a user does (graceful) and wait until the kubelet confirmed each."""
    for name in names:
        try:
            core.delete_namespaced_pod(name, namespace)
        except Exception as e:  # already gone
            if getattr(e, "status", None) != 404:
                raise
    wait_until(
        lambda: not {p.metadata.name for p in core.list_namespaced_pod(namespace).items} & set(names),
        None,
        f"pods {', '.join(names)} deleted",
        timeout,
    )


@dataclass
class RealNodePool:
    """Real nodes of one test module, made on first use and all removed (with their pods) by ``close()``."""

    cp: ControlPlane
    base: Path = field(default_factory=new_base)
    nodes: dict[str, RealNode] = field(default_factory=dict)

    def get(self, name: str, *, cgroup_root: str = "", cpu_manager_policy: str = "none") -> RealNode:
        """Node ``name`` (up and Ready); asked again with other settings, its kubelet restarts with them."""
        node = self.nodes.get(name)
        if node is None:
            node = self.nodes[name] = RealNode(self.cp, name, self.base, cgroup_root, cpu_manager_policy)
            return node.up()
        if (node.cgroup_root, node.cpu_manager_policy) != (cgroup_root, cpu_manager_policy):
            node.cgroup_root, node.cpu_manager_policy = cgroup_root, cpu_manager_policy
            node.up()
        return node

    def close(self) -> None:
        errors = []
        for node in self.nodes.values():
            try:
                node.down()
            except Exception as e:  # the others still go down
                errors.append(e)
        self.nodes.clear()
        shutil.rmtree(self.base, ignore_errors=True)
        if errors:
            raise errors[0]


class NodeAgent:
    """``ballast agent`` for a real node as its own process: the node's kubelet settings (its config file,
    unless a test gives another), its containerd for CPU pinning when ``cpu_manager``, load reporting when
    given a ``policy`` (a DynamicSchedulerPolicy as a dict). Short intervals: a test waits seconds."""

    def __init__(
        self,
        cp: ControlPlane,
        node: RealNode,
        work: Path,
        *,
        policy: dict[str, Any] | None = None,
        cpu_manager: bool = False,
        kubelet_config: Path | None = None,
    ) -> None:
        assert cp.workdir
        work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        kubelet = kubelet_config or node.kubelet_config
        argv = [sys.executable, "-m", "ballast", "agent", "--node-name", node.name,
                "--kubeconfig", str(cp.kubeconfig), "--kubelet-config", str(kubelet),
                "--resync", "2s", "--cpu-manager", "on" if cpu_manager else "off",
                "--cri-endpoint", node.cri_endpoint, "--cpu-manager-reconcile-period", "1s",
                "--cpu-state-file", str(work / "state" / "cpu_manager_state"),
                "--metrics-address", "127.0.0.1", "--metrics-port", str(self.port)]  # fmt: skip
        if policy is not None:
            path = work / "policy.yaml"
            path.write_text(yaml.safe_dump(policy))
            argv += ["--report-load", "--load-sample-interval", "1s", "--load-report-interval", "2s",
                     "--policy", str(path)]  # fmt: skip
        self.argv = argv
        self.cp = cp
        self.name = f"agent-{node.name}-{self.port}"
        self.starts = 0
        self.server: Server = self.start()

    def start(self) -> Server:
        assert self.cp.workdir
        self.starts += 1
        self.server = spawn(f"{self.name}-{self.starts}", self.argv, self.cp.workdir, env=dict(os.environ))
        return self.server

    def metric(self, name: str, **labels: str) -> float:
        return scraped(f"http://127.0.0.1:{self.port}", name, **labels)

    def stop(self) -> None:
        self.server.stop()
