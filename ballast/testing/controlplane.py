"""A loopback Kubernetes control plane for tests and benches: etcd + kube-apiserver (+ kube-scheduler).

No kubelet and no controller-manager run: nodes are plain API objects and pods only ever get bound, which is
all an extender sees. Everything listens on free 127.0.0.1 ports, lives in one temporary directory, and is
stopped by PID. The module imports only the standard library at the top, so ``.ci/run`` can unpack the
binaries with the system Python before any virtualenv exists::

    python3 -m ballast.testing.controlplane unpack      # prints the folder holding the three binaries

Where the binaries come from: ``binaries``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ballast.testing.binaries import (
    MissingPiece,
    check_available,
    controller_manager_path,
    etcd_path,
    kube_bin_dir,
    kubelet_path,
    openssl_path,
)
from ballast.testing.helm import helm_path

CONTROLLERS = (
    "*,-node-lifecycle-controller,-persistentvolume-attach-detach-controller,"
    "-service-ca-certificate-publisher-controller,-ttl-controller"
)
"""Every controller but those a cluster without kubelets cannot have (see ../shared/k8s/README.md): node
lifecycle would taint every node unreachable after 50 s; attach-detach wants kubelet state; the
OpenShift CA publisher and the TTL annotator only add noise."""
SERVICE_ACCOUNT_CONTROLLERS = CONTROLLERS.replace(",-service-ca-certificate-publisher-controller", "")
"""With the ServiceAccount admission plugin on: the ``openshift-service-ca.crt`` ConfigMap the plugin puts in
every pod's token volume beside ``kube-root-ca.crt`` comes from that publisher (without it no pod starts)."""
SERVICE_CIDR = "10.96.0.0/24"
KUBERNETES_SERVICE_IP = "10.96.0.1"
"""The ``kubernetes`` Service's address (the first of ``SERVICE_CIDR``): a pod reaches the API server there
(on guest nodes, ``ballast.testing.guest``, through the DNAT a kube-proxy would do), so the serving
certificate names it."""
READY_TIMEOUT = float(os.environ.get("BALLAST_KUBE_READY_TIMEOUT", "120"))
"""Seconds to wait for each server: ~5 s alone, much longer on two cores shared with other work."""


# --- processes ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """One child process with its log file; stopped by its own PID, SIGTERM then SIGKILL."""

    name: str
    proc: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, the way a crashed process goes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(20)


def spawn(name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> Server:
    log = workdir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir, env=env
        )
    return Server(name, proc, log)


def scraped(url: str, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``, from ``url``'s /metrics.

    prometheus_client is imported here, not at the top: ``.ci/run`` runs this module's ``check`` with the
    system Python before the project's venv exists."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def wait_until(
    check: Callable[[], bool], server: Server | None, what: str, timeout: float = READY_TIMEOUT
) -> None:
    """Poll ``check`` until true; fail early with the log tail if ``server`` died, or on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server is not None and not server.alive():
            raise RuntimeError(
                f"{server.name} exited ({server.proc.returncode}) before {what}:\n{server.tail()}"
            )
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError):
            pass
        time.sleep(0.2)
    tail = f":\n{server.tail()}" if server else ""
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            return resp.status == 200
    except urllib.error.HTTPError:
        return False


# --- certificates ------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run([str(openssl_path()), *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr}")


def make_certs(pki: Path) -> None:
    """A throwaway CA, a serving cert for 127.0.0.1 and the ``kubernetes`` Service's address and names (what
    a pod verifies), an admin client cert (O=system:masters), an SA key."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    # keyUsage on the CA: Python >= 3.13 verifies strictly (VERIFY_X509_STRICT), as a guest's agent does.
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=ballast-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki)  # fmt: skip
    (pki / "server.ext").write_text(
        f"subjectAltName=IP:127.0.0.1,DNS:localhost,IP:{KUBERNETES_SERVICE_IP},DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
    )
    for name, subject, ext in (
        ("server", "/CN=kube-apiserver", ("-extfile", "server.ext")),
        ("admin", "/O=system:masters/CN=ballast-test-admin", ()),
    ):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=pki)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", *ext, cwd=pki)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)


# --- the control plane -------------------------------------------------------------------------------------


@dataclass
class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, and at most one kube-scheduler at a time.

    ``start()`` / ``stop()`` (or use it as a context manager). ``kubeconfig`` is an admin kubeconfig any
    client can use; ``api()`` gives a ``kubernetes`` ApiClient for it.

    ``service_accounts``: the ServiceAccount admission plugin on, so pods get their token volume as on a
    real cluster (for real kubelets whose pods talk to the API server; the service-account controller of
    ``start_controller_manager`` makes each namespace's ``default`` account). Off by default: without a
    controller manager every pod would be refused for want of an account.
    """

    workdir: Path | None = None
    keep_workdir: bool = False
    service_accounts: bool = False
    bin_dir: Path = field(init=False)
    etcd: Server | None = field(default=None, init=False)
    apiserver: Server | None = field(default=None, init=False)
    scheduler: Server | None = field(default=None, init=False)
    controller_manager: Server | None = field(default=None, init=False)
    apiserver_port: int = field(default=0, init=False)
    scheduler_port: int = field(default=0, init=False)
    _own_workdir: bool = field(default=False, init=False)
    _scheduler_runs: int = field(default=0, init=False)

    # paths
    @property
    def pki(self) -> Path:
        assert self.workdir
        return self.workdir / "pki"

    @property
    def kubeconfig(self) -> Path:
        assert self.workdir
        return self.workdir / "admin.kubeconfig"

    @property
    def server_url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        self.bin_dir = kube_bin_dir()
        etcd_bin = etcd_path()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="ballast-kube-"))
            self._own_workdir = True
        try:
            make_certs(self.pki)
            self._start_etcd(etcd_bin)
            self._start_apiserver()
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self, etcd_bin: Path) -> None:
        assert self.workdir
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.etcd = spawn(
            "etcd",
            [str(etcd_bin), "--data-dir", str(self.workdir / "etcd"), "--name", "ballast-test",
             "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"ballast-test=http://127.0.0.1:{peer}",
             "--unsafe-no-fsync", "--log-level", "warn",
             # kube-apiserver serves a watch without a resourceVersion once etcd confirms its cache is
             # current; etcd 3.4 confirms only by these periodic notifications (no progress requests).
             "--experimental-watch-progress-notify-interval", "1s"],
            self.workdir,
        )  # fmt: skip
        wait_until(lambda: _http_ok(f"{self.etcd_url}/health"), self.etcd, "etcd /health")

    def _start_apiserver(self, port: int | None = None) -> None:
        assert self.workdir
        self.apiserver_port = port or free_port()
        pki = self.pki
        self.apiserver = spawn(
            "kube-apiserver",
            [str(self.bin_dir / "kube-apiserver"),
             "--etcd-servers", self.etcd_url,
             "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
             "--secure-port", str(self.apiserver_port),
             "--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file", str(pki / "server.key"),
             "--client-ca-file", str(pki / "ca.crt"),
             "--service-account-key-file", str(pki / "sa.key"),
             "--service-account-signing-key-file", str(pki / "sa.key"),
             "--service-account-issuer", "https://kubernetes.default.svc",
             "--service-cluster-ip-range", SERVICE_CIDR,
             "--authorization-mode", "Node,RBAC",
             "--endpoint-reconciler-type", "none",
             "--disable-admission-plugins",
             "TaintNodesByCondition" if self.service_accounts else "ServiceAccount,TaintNodesByCondition",
             "--cert-dir", str(self.workdir / "apiserver-certs")],
            self.workdir,
        )  # fmt: skip
        ctx = self.ssl_context()
        wait_until(
            lambda: _http_ok(f"{self.server_url}/readyz", ctx), self.apiserver, "kube-apiserver /readyz"
        )

    def restart_apiserver(self, kill: bool = True) -> None:
        """Stop kube-apiserver (SIGKILL: every connection reset at once, as a crash does; else SIGTERM, its
        graceful shutdown) and start it again on the same port with the same etcd, so clients that keep
        their configuration reconnect to it; returns once it is ready again."""
        assert self.apiserver
        if kill:
            self.apiserver.kill()
        else:
            self.apiserver.stop()
        self._start_apiserver(self.apiserver_port)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _write_kubeconfig(self) -> None:
        pki = self.pki
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.server_url,
                                                       "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "admin", "user": {"client-certificate": str(pki / "admin.crt"),
                                                 "client-key": str(pki / "admin.key")}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
            "current-context": "test",
        }  # fmt: skip
        # JSON is YAML: every kubeconfig reader accepts it.
        self.kubeconfig.write_text(json.dumps(config, indent=1))

    # --- scheduler ---------------------------------------------------------------------------------------

    def start_scheduler(self, config: dict[str, Any], leader_elect: bool = False) -> Server:
        """Start kube-scheduler with ``config`` (a KubeSchedulerConfiguration as a dict); stops a running one.

        ``clientConnection.kubeconfig`` is set to the admin kubeconfig. Leader election is off unless asked:
        a restarted scheduler would otherwise wait out the old lease (15 s by default).
        """
        assert self.workdir
        self.stop_scheduler()
        config = json.loads(json.dumps(config))
        config.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        config.setdefault("kind", "KubeSchedulerConfiguration")
        config.setdefault("clientConnection", {})["kubeconfig"] = str(self.kubeconfig)
        if not leader_elect:
            config["leaderElection"] = {"leaderElect": False}
        self._scheduler_runs += 1
        path = self.workdir / f"scheduler-config-{self._scheduler_runs}.yaml"
        path.write_text(json.dumps(config, indent=1))
        self.scheduler_port = free_port()
        self.scheduler = spawn(
            f"kube-scheduler-{self._scheduler_runs}",
            [str(self.bin_dir / "kube-scheduler"), "--config", str(path),
             "--authentication-kubeconfig", str(self.kubeconfig),
             "--authorization-kubeconfig", str(self.kubeconfig),
             "--bind-address", "127.0.0.1", "--secure-port", str(self.scheduler_port),
             "--cert-dir", str(self.workdir / f"scheduler-certs-{self._scheduler_runs}")],
            self.workdir,
        )  # fmt: skip
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{self.scheduler_port}/readyz"
        wait_until(lambda: _http_ok(url, insecure), self.scheduler, "kube-scheduler /readyz")
        return self.scheduler

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None

    # --- controller manager ------------------------------------------------------------------------------

    def start_controller_manager(self) -> Server:
        """Start kube-controller-manager (once; later calls return the running one). No serving port, so
        no health endpoint: ready means the ``kube-root-ca.crt`` ConfigMap it writes into every namespace
        has appeared in ``default``."""
        assert self.workdir
        if self.controller_manager is not None and self.controller_manager.alive():
            return self.controller_manager
        binary = controller_manager_path()
        pki, kubeconfig = self.pki, str(self.kubeconfig)
        self.controller_manager = spawn(
            "kube-controller-manager",
            [str(binary), "--kubeconfig", kubeconfig,
             "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
             "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
             "--use-service-account-credentials=false",
             "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
             "--controllers", SERVICE_ACCOUNT_CONTROLLERS if self.service_accounts else CONTROLLERS],
            self.workdir,
        )  # fmt: skip

        url = f"{self.server_url}/api/v1/namespaces/default/configmaps/kube-root-ca.crt"
        ctx = self.ssl_context()
        wait_until(lambda: _http_ok(url, ctx), self.controller_manager, "kube-controller-manager running")
        return self.controller_manager

    def stop_controller_manager(self) -> None:
        if self.controller_manager is not None:
            self.controller_manager.stop()
            self.controller_manager = None

    def stop(self) -> None:
        for server in (self.scheduler, self.controller_manager, self.apiserver, self.etcd):
            if server is not None:
                server.stop()
        self.scheduler = self.controller_manager = self.apiserver = self.etcd = None
        if self._own_workdir and self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- clients and helpers -----------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done.stdout

    def api(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig (imported lazily)."""
        from kubernetes import config as k8s_config

        return k8s_config.new_client_from_config(config_file=str(self.kubeconfig))

    def core(self) -> Any:
        from kubernetes import client as k8s_client

        return k8s_client.CoreV1Api(self.api())


# --- object builders (plain dicts: usable with any client) ----------------------------------------------


def node_body(
    name: str,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node that kube-scheduler accepts: Ready=True, allocatable cpu/memory/pods, no taints."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(annotations or {}),
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}],
        },
    }


def pod_body(
    name: str,
    scheduler_name: str = "default-scheduler",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if requests or limits:
        container["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    spec: dict[str, Any] = {"schedulerName": scheduler_name, "containers": [container]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": spec,
    }


def create_nodes(core: Any, bodies: Iterable[dict[str, Any]]) -> list[str]:
    """Create each node and write its status (the create call drops ``status``)."""
    names = []
    for body in bodies:
        core.create_node(body)
        core.patch_node_status(body["metadata"]["name"], {"status": body["status"]})
        names.append(body["metadata"]["name"])
    return names


def bound_pods(core: Any, namespace: str = "default") -> dict[str, str]:
    """Pod name -> node name for every bound pod in ``namespace``."""
    return {
        p.metadata.name: p.spec.node_name
        for p in core.list_namespaced_pod(namespace).items
        if p.spec.node_name
    }


def wait_bound(
    core: Any, names: Iterable[str], namespace: str = "default", timeout: float = READY_TIMEOUT
) -> dict[str, str]:
    """Wait until every pod in ``names`` is bound; return pod -> node for them."""
    wanted = set(names)
    result: dict[str, str] = {}

    def done() -> bool:
        nonlocal result
        result = {k: v for k, v in bound_pods(core, namespace).items() if k in wanted}
        return len(result) == len(wanted)

    wait_until(done, None, f"{len(wanted)} pods bound", timeout)
    return result


def delete_all(core: Any, namespace: str = "default") -> None:
    """Remove every pod (grace 0: no kubelet would ever confirm) and every node, and wait until gone."""
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    core.delete_collection_node()
    wait_until(
        lambda: not core.list_namespaced_pod(namespace).items and not core.list_node().items,
        None,
        "pods and nodes deleted",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ballast.testing.controlplane", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("unpack", help="unpack and verify the binaries; print the folder holding them")
    sub.add_parser(
        "check",
        help="unpack (kube-controller-manager, the kubelet and helm too), check etcd and openssl; print what "
        "is missing",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "unpack":
            print(kube_bin_dir())
        else:
            check_available()
            found = (kube_bin_dir(), controller_manager_path(), kubelet_path(), etcd_path(), openssl_path(),
                     helm_path())  # fmt: skip
            print("ok: " + ", ".join(map(str, found)))
    except MissingPiece as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
