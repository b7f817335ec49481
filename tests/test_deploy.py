"""The deployment artefacts: manifests (scheduler_config/deploy), scheduler configurations, the Dockerfile
and .dockerignore, the dependency lock, and the operator documentation's commands.

No cluster and no container builder run here, so these tests check what can be checked without them:
every manifest has what the API server requires of its kind and what Ballast's own CLI accepts, the
configuration copies equal their sources, kube-scheduler's validation rules hold (with negative cases
showing the validator can fail), and the image's build steps are replayed as far as they run offline
(the wheel is built from exactly the files the Dockerfile copies).
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast import __version__, cli
from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.binaries import KUBE_VERSION, MissingPiece, kubectl_path
from ballast.testing.parts import missing_part, under_ci
from tests.chart import HELM_FLAGS
from tests.deploy_rbac import (
    BUILD_TOOLS,
    DEPLOY,
    PROMETHEUS,
    ROOT,
    DockerIgnore,
    canonical,
    extended_resource_name_errors,
    find,
    load_documents,
    manifests,
    objects,
    parse_copy,
    parse_dockerfile,
    parse_env,
    read_lock,
    runtime_closure,
    validate_scheduler_config,
)

FILES = manifests(DEPLOY)
TOP_LEVEL = manifests(DEPLOY, recursive=False)
COMPONENT = manifests(PROMETHEUS)
DEFAULT_DOCS = objects(TOP_LEVEL)
DOCS = objects({**TOP_LEVEL, **COMPONENT})
"""Everything an install may run: the default one and the Prometheus component."""
ALL_DOCS = objects(FILES)
SCHEDULER_CONFIG = ROOT / "scheduler_config"
IMAGE = f"ballast:{__version__}"
KUBE_SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler:v1.36.2"

# kind -> (apiVersion, namespaced)
KINDS = {
    "Namespace": ("v1", False),
    "ServiceAccount": ("v1", True),
    "ConfigMap": ("v1", True),
    "Service": ("v1", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", False),
    "ValidatingAdmissionPolicy": ("admissionregistration.k8s.io/v1", False),
    "ValidatingAdmissionPolicyBinding": ("admissionregistration.k8s.io/v1", False),
    "Role": ("rbac.authorization.k8s.io/v1", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", True),
    "Deployment": ("apps/v1", True),
    "DaemonSet": ("apps/v1", True),
    "PodDisruptionBudget": ("policy/v1", True),
    "NetworkPolicy": ("networking.k8s.io/v1", True),
}
RBAC_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def ident(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"


def workloads(docs: list[dict[str, Any]] = DOCS) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]


def all_containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]


def ballast_containers() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for w in workloads():
        for c in all_containers(w["spec"]["template"]["spec"]):
            if c["image"] == IMAGE:
                yield w, c


def get(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return find(docs, kind, name)


# ------------------------------------------------------------------------------------------ manifests


@pytest.mark.parametrize("path", sorted(FILES), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_has_what_its_kind_requires(path: Path) -> None:
    docs = FILES[path]
    assert docs, f"{path.name} holds no object"
    for doc in docs:
        kind = doc.get("kind")
        assert kind in KINDS, f"{path.name}: unexpected kind {kind!r}"
        api_version, namespaced = KINDS[kind]
        assert doc.get("apiVersion") == api_version, ident(doc)
        meta = doc.get("metadata") or {}
        name = meta.get("name")
        assert isinstance(name, str) and name, f"{path.name}: {kind} without metadata.name"
        if kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            assert len(name) <= 253 and ("/" not in name and "%" not in name), ident(doc)
        else:
            assert DNS_SUBDOMAIN.match(name) and len(name) <= 253, ident(doc)
        if namespaced:
            assert meta.get("namespace"), f"{ident(doc)}: namespaced kind without metadata.namespace"
        else:
            assert "namespace" not in meta, f"{ident(doc)}: cluster-scoped kind with a namespace"
        for key in ("labels", "annotations"):
            assert all(isinstance(v, str) for v in (meta.get(key) or {}).values()), ident(doc)


def test_object_identities_are_unique() -> None:
    seen = [ident(d) for d in ALL_DOCS]
    assert len(seen) == len(set(seen)), sorted(s for s in seen if seen.count(s) > 1)


def test_everything_namespaced_is_in_ballast_system_except_the_auth_reader_binding() -> None:
    namespaces = {d["metadata"]["name"] for d in DOCS if d["kind"] == "Namespace"}
    assert namespaces == {"ballast-system"}
    for d in ALL_DOCS:
        ns = d["metadata"].get("namespace")
        if ns and ns != "ballast-system":
            assert (d["kind"], ns, d["roleRef"]["name"]) == (
                "RoleBinding",
                "kube-system",
                "extension-apiserver-authentication-reader",
            ), ident(d)


@pytest.mark.parametrize("w", workloads(), ids=ident)
def test_workloads_are_complete(w: dict[str, Any]) -> None:
    spec = w["spec"]
    template = spec["template"]
    labels = template["metadata"]["labels"]
    selector = spec["selector"]["matchLabels"]
    assert selector and all(labels.get(k) == v for k, v in selector.items()), "selector must match the labels"
    pod = template["spec"]
    ns = w["metadata"]["namespace"]
    sa = pod["serviceAccountName"]
    assert any(
        d["kind"] == "ServiceAccount" and (d["metadata"]["namespace"], d["metadata"]["name"]) == (ns, sa)
        for d in DOCS
    ), f"no ServiceAccount {ns}/{sa}"
    containers = all_containers(pod)
    assert pod["containers"], "a pod needs at least one container"
    names = [c["name"] for c in containers]
    assert len(names) == len(set(names)) and all(DNS_LABEL.match(n) for n in names)
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for v in volumes.values():
        if "configMap" in v:
            get(DOCS, "ConfigMap", v["configMap"]["name"])  # exists, same namespace
            assert get(DOCS, "ConfigMap", v["configMap"]["name"])["metadata"]["namespace"] == ns
    for c in containers:
        assert c.get("image"), c["name"]
        ports = {p["name"]: p["containerPort"] for p in c.get("ports") or [] if "name" in p}
        assert all(len(n) <= 15 and DNS_LABEL.match(n) for n in ports)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = c.get(probe)
            if p and "httpGet" in p and isinstance(p["httpGet"]["port"], str):
                assert p["httpGet"]["port"] in ports, f"{c['name']}.{probe}: no port {p['httpGet']['port']}"
        mounts = c.get("volumeMounts") or []
        assert {m["name"] for m in mounts} <= set(volumes), c["name"]
        assert len({m["mountPath"] for m in mounts}) == len(mounts)
        for key in ("requests", "limits"):
            assert set((c.get("resources") or {}).get(key) or {}) >= {"cpu", "memory"}, f"{c['name']}: {key}"
        for init in pod.get("initContainers") or []:
            assert init.get("restartPolicy") == "Always", "init containers here are native sidecars"
    used = {m["name"] for c in containers for m in c.get("volumeMounts") or []}
    assert used == set(volumes), "every volume is mounted"


def effective(pod: dict[str, Any], container: dict[str, Any], key: str) -> Any:
    c = container.get("securityContext") or {}
    return c[key] if key in c else (pod.get("securityContext") or {}).get(key)


@pytest.mark.parametrize("w", workloads(), ids=ident)
def test_containers_are_locked_down(w: dict[str, Any]) -> None:
    """No privilege escalation, no capabilities, read-only root, RuntimeDefault seccomp, everywhere."""
    pod = w["spec"]["template"]["spec"]
    for c in all_containers(pod):
        sc = c.get("securityContext") or {}
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]
        assert sc.get("capabilities") == {"drop": ["ALL"]}, c["name"]
        assert not sc.get("privileged"), c["name"]
        assert (effective(pod, c, "seccompProfile") or {}).get("type") == "RuntimeDefault", c["name"]
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))


@pytest.mark.parametrize("name", ["ballast-scheduler", "ballast-annotator", "ballast-rebalancer"])
def test_scheduler_and_annotator_meet_the_restricted_pod_security_standard(name: str) -> None:
    pod = get(DOCS, "Deployment", name)["spec"]["template"]["spec"]
    allowed_volumes = {"configMap", "secret", "emptyDir", "projected", "downwardAPI"}
    for v in pod.get("volumes") or []:
        assert set(v) - {"name"} <= allowed_volumes, v
    for c in all_containers(pod):
        assert effective(pod, c, "runAsNonRoot") is True, c["name"]
        assert effective(pod, c, "runAsUser") not in (0, None), c["name"]
        assert not c.get("ports") or all("hostPort" not in p for p in c["ports"])


def test_the_agent_gets_its_host_paths_and_nothing_else() -> None:
    ds = get(DOCS, "DaemonSet", "ballast-agent")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    host = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    assert {v["name"] for v in pod["volumes"]} - set(host) == {"result-key", "policy"}
    assert {v["path"]: v["type"] for v in host.values()} == {
        "/sys/devices/system": "Directory",
        "/sys/fs/cgroup": "Directory",
        "/var/lib/kubelet/config.yaml": "File",
        "/run/containerd/containerd.sock": "Socket",
        "/var/run/nri": "DirectoryOrCreate",
        "/var/lib/ballast": "DirectoryOrCreate",
    }
    mounts = {host[m["name"]]["path"]: m for m in c["volumeMounts"] if m["name"] in host}
    writable = {p for p, m in mounts.items() if not m.get("readOnly")}
    assert writable == {"/var/lib/ballast"}
    args = cli.build_parser().parse_args(c["args"])
    # The agent reads and writes where the mounts put the host paths.
    assert mounts["/sys/devices/system"]["mountPath"] == str(args.sysfs / "devices" / "system")
    assert mounts["/sys/fs/cgroup"]["mountPath"] == str(args.cgroup_root)
    # The built-in load source is on: no Prometheus needed. Its history lives in the state directory.
    assert args.report_load and args.policy == Path("/etc/ballast/policy.yaml")
    assert mounts["/var/lib/kubelet/config.yaml"]["mountPath"] == str(args.kubelet_config)
    assert args.cri_endpoint == "unix://" + mounts["/run/containerd/containerd.sock"]["mountPath"]
    assert args.nri == "off" and args.nri_socket == mounts["/var/run/nri"]["mountPath"] + "/nri.sock"
    assert args.cpu_state_file.parent == Path(mounts["/var/lib/ballast"]["mountPath"])
    assert not args.kubelet_configz
    sc = c["securityContext"]
    assert sc["runAsUser"] == 0 and sc["privileged"] is False and sc["runAsNonRoot"] is False
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert not pod.get("hostNetwork")
    assert {p["containerPort"] for p in c["ports"]} == {args.metrics_port} == {8091}


def test_the_scheduler_deployment() -> None:
    dep = get(DOCS, "Deployment", "ballast-scheduler")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    (sched,) = pod["containers"]
    (sidecar,) = pod["initContainers"]
    assert sched["image"] == KUBE_SCHEDULER_IMAGE and sidecar["image"] == IMAGE
    # kube-scheduler reads the ConfigMap's file; its probes are its own secure port's /healthz.
    config_flag = next(a for a in sched["command"] if a.startswith("--config="))
    config_path = Path(config_flag.split("=", 1)[1])
    mount = next(m for m in sched["volumeMounts"] if Path(m["mountPath"]) == config_path.parent)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert config_path.name in get(DOCS, "ConfigMap", volume["configMap"]["name"])["data"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert sched[probe]["httpGet"] == {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}
    # The extender: loopback only, probed from inside the container on /readyz and /healthz.
    args = cli.build_parser().parse_args(sidecar["args"])
    assert args.command == "extender" and args.host == "127.0.0.1"
    assert "127.0.0.1:8888/readyz" in " ".join(sidecar["readinessProbe"]["exec"]["command"])
    assert "127.0.0.1:8888/readyz" in " ".join(sidecar["startupProbe"]["exec"]["command"])
    assert "127.0.0.1:8888/healthz" in " ".join(sidecar["livenessProbe"]["exec"]["command"])
    assert f":{args.port}/" in " ".join(sidecar["readinessProbe"]["exec"]["command"])
    policy_mount = next(
        m for m in sidecar["volumeMounts"] if Path(args.policy).parent == Path(m["mountPath"])
    )
    policy_volume = next(v for v in pod["volumes"] if v["name"] == policy_mount["name"])
    assert Path(args.policy).name in get(DOCS, "ConfigMap", policy_volume["configMap"]["name"])["data"]
    # The scheduler config calls this sidecar, and the extender's API timeout is under httpTimeout.
    config = yaml.safe_load(get(DOCS, "ConfigMap", volume["configMap"]["name"])["data"][config_path.name])
    (ext,) = config["extenders"]
    assert ext["urlPrefix"] == f"http://{args.host}:{args.port}"
    from ballast.contract.durations import parse_duration

    assert args.api_timeout < parse_duration(ext["httpTimeout"])
    assert config["profiles"] == [{"schedulerName": "ballast-scheduler"}]


def test_the_scheduler_exec_probes_run_in_the_image() -> None:
    """The probe one-liners are valid Python that exits non-zero on a refused connection."""
    sidecar = get(DOCS, "Deployment", "ballast-scheduler")["spec"]["template"]["spec"]["initContainers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = sidecar[probe]["exec"]["command"]
        assert command[:2] == ["python", "-c"]
        code = command[2].replace("127.0.0.1:8888", "127.0.0.1:9")  # nothing listens on the discard port
        done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, timeout=30)
        assert done.returncode != 0 and b"Connection refused" in done.stderr, done.stderr


def test_the_annotator_deployment_and_its_service() -> None:
    dep = get(DOCS, "Deployment", "ballast-annotator")
    assert dep["spec"]["replicas"] == 2
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"] == [
        "annotator",
        "--policy",
        "/etc/ballast/policy.yaml",
        "--prometheus-url",
        "http://prometheus-k8s.monitoring.svc:9090",
    ]
    args = cli.build_parser().parse_args(c["args"])
    assert args.leader_elect is not False and args.metrics_port == 8090
    svc = get(DOCS, "Service", "ballast-annotator-metrics")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    (port,) = svc["spec"]["ports"]
    assert port["port"] == 8090 and port["targetPort"] in {p["name"] for p in c["ports"]}
    assert {p["containerPort"] for p in c["ports"]} == {args.metrics_port}


def test_the_rebalancer_deployment_ships_safe_and_its_service() -> None:
    """Dry run and leader election on, the policy from the shared ConfigMap (which has no spec.rebalance:
    it idles until an operator adds one), never evicting itself."""
    dep = get(DOCS, "Deployment", "ballast-rebalancer")
    assert dep["spec"]["replicas"] == 2
    template = dep["spec"]["template"]
    assert template["metadata"]["annotations"]["ballast.io/evict"] == "false"
    (c,) = template["spec"]["containers"]
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "rebalancer" and args.dry_run and args.leader_elect is not False
    assert args.policy == "/etc/ballast/policy.yaml" and args.metrics_port == 8092
    svc = get(DOCS, "Service", "ballast-rebalancer-metrics")
    assert svc["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert {p["containerPort"] for p in c["ports"]} == {args.metrics_port}


@pytest.mark.parametrize("name", ["ballast-scheduler", "ballast-annotator", "ballast-rebalancer"])
def test_pod_disruption_budgets_keep_one_replica(name: str) -> None:
    pdb = get(DOCS, "PodDisruptionBudget", name)
    dep = get(DOCS, "Deployment", name)
    assert pdb["spec"]["minAvailable"] == 1 < dep["spec"]["replicas"]
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]


def test_every_ballast_container_runs_a_valid_command_line() -> None:
    commands = set()
    for w, c in ballast_containers():
        assert "command" not in c, f"{ident(w)}: the image's entry point (ballast) must stay"
        args = cli.build_parser().parse_args(c["args"])  # exits on an unknown flag or a bad value
        commands.add(args.command)
    assert commands == {"extender", "annotator", "rebalancer", "agent"}


def test_rbac_objects_are_well_formed() -> None:
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in DOCS if d["kind"] == "ServiceAccount"
    }
    for d in ALL_DOCS:
        if d["kind"] in ("Role", "ClusterRole"):
            for rule in d["rules"]:
                assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, ident(d)
                assert rule["apiGroups"] and rule["resources"] and rule["verbs"], ident(d)
                assert set(rule["verbs"]) <= RBAC_VERBS, ident(d)
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], (
                    f"{ident(d)}: wildcard"
                )
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert d["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
            assert d["roleRef"]["kind"] in ("Role", "ClusterRole")
            if d["kind"] == "ClusterRoleBinding":
                assert d["roleRef"]["kind"] == "ClusterRole"
            for s in d["subjects"]:
                assert (s["namespace"], s["name"]) in accounts, ident(d)


# -------------------------------------------------------------------------------------- kustomization


def test_the_kustomization_lists_every_file_and_stays_inside_its_root() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    resources = kustomization["resources"]
    assert len(resources) == len(set(resources))
    # kustomize's load restrictor refuses files outside the kustomization's directory
    assert all(".." not in Path(r).parts and not Path(r).is_absolute() for r in resources)
    assert {DEPLOY / r for r in resources} == set(TOP_LEVEL)
    assert "namespace" not in kustomization, "a namespace override would move the kube-system RoleBinding"
    name, tag = KUBE_SCHEDULER_IMAGE.split(":")
    assert kustomization["images"] == [
        {"name": "ballast", "newName": "ballast", "newTag": __version__},
        {"name": name, "newTag": tag},
    ]
    # optional/ holds grants for non-default flags, and the annotator's admission policy
    optional = [d for p, docs in FILES.items() if p.parent.name == "optional" for d in docs]
    assert optional and {d["kind"] for d in optional} == {
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert set(FILES) == set(TOP_LEVEL) | set(COMPONENT) | {p for p in FILES if p.parent.name == "optional"}


def test_the_prometheus_component_lists_every_file_and_is_off_by_default() -> None:
    """prometheus/ is a kustomize Component holding the annotator; the default install lists it only in a
    comment, which the guide says to uncomment."""
    component = yaml.safe_load((PROMETHEUS / "kustomization.yaml").read_text())
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert component["kind"] == "Component"
    assert {PROMETHEUS / r for r in component["resources"]} == set(COMPONENT)
    assert {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in objects(COMPONENT)} == {
        "annotator"
    }
    assert not [d for d in DEFAULT_DOCS if d["metadata"]["name"].startswith("ballast-annotator")]
    kustomization = (DEPLOY / "kustomization.yaml").read_text()
    assert "components" not in yaml.safe_load(kustomization)
    assert COMPONENTS_COMMENTED in kustomization
    guide = INSTALL.read_text()
    section = guide[guide.index("## Using Prometheus instead") :]
    assert "components:\n     - prometheus" in section and "scheduler_config/deploy/prometheus/" in section


COMPONENTS_COMMENTED = "# components:\n#   - prometheus\n"
COMPONENTS_ON = "components:\n  - prometheus\n"


def with_prometheus(tmp_path: Path) -> Path:
    """A copy of the deploy directory with the Prometheus component switched on, as the guide says."""
    copy_dir = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy_dir)
    kustomization = copy_dir / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace(COMPONENTS_COMMENTED, COMPONENTS_ON))
    return copy_dir


def kubectl() -> str:
    """The control-plane harness's kubectl (a known version), else one on PATH; skip, or fail under CI."""
    try:
        return str(kubectl_path())
    except MissingPiece as exc:
        found = shutil.which("kubectl")
        if found and not under_ci():
            return found
        missing_part(f"kubectl {KUBE_VERSION} (with its built-in kustomize) is not available: {exc}")


def test_kubectl_kustomize_renders_exactly_the_manifests(tmp_path: Path) -> None:
    """The real kustomize (load restrictor, images transformer, the component): the same objects, the
    image set; by default no annotator, with the component the annotator too."""
    rendered = render()
    assert sorted(map(ident, rendered)) == sorted(map(ident, DEFAULT_DOCS))
    images = {c["image"] for w in workloads(rendered) for c in all_containers(w["spec"]["template"]["spec"])}
    assert images == {IMAGE, KUBE_SCHEDULER_IMAGE}
    with_annotator = render(with_prometheus(tmp_path))
    assert sorted(map(ident, with_annotator)) == sorted(map(ident, DOCS))
    assert {c["image"] for c in all_containers(get(with_annotator, "Deployment", "ballast-annotator")["spec"][
        "template"]["spec"])} == {IMAGE}  # fmt: skip


def test_the_prometheus_component_turns_the_agents_load_report_off(tmp_path: Path) -> None:
    """With the annotator on, the agents stop writing load (one source per node), and nothing else about
    them changes: they still publish topology and pin CPUs."""
    default = get(render(), "DaemonSet", "ballast-agent")
    with_annotator = get(render(with_prometheus(tmp_path)), "DaemonSet", "ballast-agent")
    (before,) = default["spec"]["template"]["spec"]["containers"]
    (after,) = with_annotator["spec"]["template"]["spec"]["containers"]
    assert "--report-load" in before["args"]
    assert after["args"] == [a for a in before["args"] if a != "--report-load"]
    assert not cli.build_parser().parse_args(after["args"]).report_load
    after["args"] = before["args"]
    assert with_annotator == default


RESULT_KEY_SECRET = "ballast-result-key"


def render(directory: Path = DEPLOY) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _sealing(pod: dict[str, Any], container: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The key file ``container`` is started with, and the pod volume it is read from."""
    args = container["args"]
    assert "--result-key-file" in args, f"{container['name']} runs without --result-key-file"
    key_file = Path(args[args.index("--result-key-file") + 1])
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts") or []}
    mount = mounts.get(str(key_file.parent))
    assert mount is not None and mount.get("readOnly"), f"{container['name']}: {key_file} is not mounted"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return key_file.name, volume


def test_the_rendered_install_seals_topology_results() -> None:
    """Secure by default: what `kubectl apply -k` installs starts the extender and every agent with the
    same result key, from a Secret the install step creates (never rendered here), and not optional, so
    neither runs unsealed when the Secret is missing."""
    rendered = render()
    pods = {w["metadata"]["name"]: w["spec"]["template"]["spec"] for w in workloads(rendered)}
    extender = next(c for c in all_containers(pods["ballast-scheduler"]) if c["name"] == "extender")
    (agent,) = pods["ballast-agent"]["containers"]
    for pod, container in ((pods["ballast-scheduler"], extender), (pods["ballast-agent"], agent)):
        key, volume = _sealing(pod, container)
        secret = volume["secret"]
        assert secret["secretName"] == RESULT_KEY_SECRET and not secret.get("optional"), volume
        assert key in {i["path"] for i in secret.get("items") or []} | {"key"}
        assert secret["defaultMode"] & 0o007 == 0, "not readable by other users"
    assert not [d for d in rendered if d["kind"] == "Secret"], "no key is rendered into the manifests"
    # the install step creates exactly that Secret, with a key long enough for load_key
    guide = INSTALL.read_text()
    create = (
        f"kubectl -n ballast-system create secret generic {RESULT_KEY_SECRET} \\\n"
        '     --from-literal=key="$(openssl rand -hex 32)"'
    )
    assert create in guide
    assert guide.index("kubectl apply -f scheduler_config/deploy/namespace.yaml") < guide.index(create)
    assert guide.index(create) < guide.index("kubectl apply -k scheduler_config/deploy")


def _scrapers(rendered: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {
        d["metadata"]["name"]: [peer for rule in d["spec"]["ingress"] for peer in rule["from"]]
        for d in rendered
        if d["kind"] == "NetworkPolicy"
    }


def test_the_scrapers_namespace_is_one_install_choice(tmp_path: Path) -> None:
    """kustomization.yaml's patch sets the namespace every NetworkPolicy admits, as the guide says, the
    Prometheus component's too."""
    only = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    assert _scrapers(render()) == {"ballast-agent-metrics": [only], "ballast-rebalancer-metrics": [only]}
    copy_dir = with_prometheus(tmp_path)
    kustomization = copy_dir / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count("value: monitoring") == 1
    kustomization.write_text(text.replace("value: monitoring", "value: observability"))
    other = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
    assert _scrapers(render(copy_dir)) == {
        "ballast-annotator-metrics": [other],
        "ballast-agent-metrics": [other],
        "ballast-rebalancer-metrics": [other],
    }
    assert "value: monitoring" in INSTALL.read_text(), "the install steps show where to set it"


def test_the_crd_and_the_prometheus_rule_are_not_copied_here() -> None:
    kinds = {d["kind"] for d in ALL_DOCS}
    assert "CustomResourceDefinition" not in kinds and "PrometheusRule" not in kinds
    crd = load_documents(SCHEDULER_CONFIG / "crd-noderesourcetopology.yaml")[0]
    # ... and the install instructions apply them from where they are.
    docs = INSTALL.read_text()
    assert "kubectl apply -f scheduler_config/crd-noderesourcetopology.yaml" in docs
    assert "kubectl apply -k scheduler_config/deploy" in docs
    assert crd["spec"]["group"] == "topology.crane.io"
    if (SCHEDULER_CONFIG / "recording-rules-prometheusrule.yaml").exists():
        assert "kubectl apply -f scheduler_config/recording-rules-prometheusrule.yaml" in docs


def test_images_are_pinned() -> None:
    for w in workloads():
        for c in all_containers(w["spec"]["template"]["spec"]):
            assert c["image"] in (IMAGE, KUBE_SCHEDULER_IMAGE), f"{ident(w)}: {c['image']}"
            assert c.get("imagePullPolicy") == "IfNotPresent"


# --------------------------------------------------------------------------------- configuration copies


def test_the_policy_configmap_is_policy_yaml_byte_for_byte() -> None:
    cm = get(DOCS, "ConfigMap", "ballast-policy")
    assert list(cm["data"]) == ["policy.yaml"]
    assert cm["data"]["policy.yaml"] == (SCHEDULER_CONFIG / "policy.yaml").read_text()


def scheduler_configmap() -> dict[str, Any]:
    return yaml.safe_load(get(DOCS, "ConfigMap", "ballast-scheduler-config")["data"]["scheduler-config.yaml"])


def test_the_policy_reaches_running_pods_when_the_configmap_changes() -> None:
    """Both programs reload the policy file; a subPath mount would never see a ConfigMap update."""
    readers = 0
    for w in workloads():
        pod = w["spec"]["template"]["spec"]
        policy_volumes = {
            v["name"]
            for v in pod.get("volumes", [])
            if (v.get("configMap") or {}).get("name") == "ballast-policy"
        }
        for c in all_containers(pod):
            for mount in c.get("volumeMounts", []):
                if mount["name"] in policy_volumes:
                    readers += 1
                    assert "subPath" not in mount, (
                        f"{w['metadata']['name']}/{c['name']} mounts the policy by subPath"
                    )
    assert readers >= 4  # the extender, the agent, the rebalancer and the annotator


def test_the_scheduler_configmap_is_the_node_cache_config() -> None:
    deployed = scheduler_configmap()
    source = yaml.safe_load((SCHEDULER_CONFIG / "scheduler-config-node-cache.yaml").read_text())
    assert deployed == source
    assert deployed["leaderElection"] == OWN_LEASE


OWN_LEASE = {
    "leaderElect": True,
    "resourceLock": "leases",
    "resourceName": "ballast-scheduler",
    "resourceNamespace": "ballast-system",
}


@pytest.mark.parametrize("name", ["scheduler-config.yaml", "scheduler-config-node-cache.yaml"])
def test_standalone_scheduler_configs_never_contend_for_the_default_schedulers_lease(name: str) -> None:
    config = yaml.safe_load((SCHEDULER_CONFIG / name).read_text())
    assert config["leaderElection"] == OWN_LEASE


@pytest.mark.parametrize(
    "config",
    ["scheduler-config.yaml", "scheduler-config-node-cache.yaml", "deploy ConfigMap"],
)
def test_scheduler_configs_pass_kube_scheduler_validation(config: str) -> None:
    data = (
        scheduler_configmap()
        if config == "deploy ConfigMap"
        else yaml.safe_load((SCHEDULER_CONFIG / config).read_text())
    )
    assert validate_scheduler_config(data) == []


@pytest.mark.parametrize(
    "config",
    ["scheduler-config.yaml", "scheduler-config-node-cache.yaml", "deploy ConfigMap"],
)
def test_scheduler_config_verbs_are_routes_of_the_extender(config: str) -> None:
    data = (
        scheduler_configmap()
        if config == "deploy ConfigMap"
        else yaml.safe_load((SCHEDULER_CONFIG / config).read_text())
    )
    app = create_app(load_policy(SCHEDULER_CONFIG / "policy.yaml"))
    posts = {path for path, ops in app.openapi()["paths"].items() if "post" in ops}
    assert {"/filter", "/prioritize", "/bind", "/preempt"} <= posts
    for ext in data["extenders"]:
        for key in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"):
            if ext.get(key):
                assert "/" + ext[key] in posts, f"{config}: {key} {ext[key]}"


def _mutate(path: str, value: Any) -> dict[str, Any]:
    config = copy.deepcopy(
        yaml.safe_load((SCHEDULER_CONFIG / "scheduler-config-node-cache.yaml").read_text())
    )
    target = config
    keys = path.split(".")
    for k in keys[:-1]:
        target = target[int(k)] if isinstance(target, list) else target[k]
    last = keys[-1]
    if value is _DELETE:
        del target[last]
    elif isinstance(target, list):
        index = int(last)
        if index == len(target):
            target.append(value)  # a further extender
        else:
            target[index] = value
    else:
        target[last] = value
    return config


_DELETE = object()
SECOND = {"urlPrefix": "http://127.0.0.1:9999", "filterVerb": "filter"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            _mutate("extenders.0.weight", 0),
            "extenders[0].weight: Invalid value: 0: must have a positive weight",
        ),
        (_mutate("extenders.0.weight", -1), "must have a positive weight"),
        (_mutate("extenders.0.weight", 1.5), "extenders[0].weight: 1.5 is not an int64"),
        (_mutate("extenders.0.weight", _DELETE), "must have a positive weight"),  # no defaulting
        (_mutate("extenders.1", SECOND | {"bindVerb": "bind"}), "found 2 extenders implementing bind"),
        (
            _mutate("extenders.0.enableHTTPS", True),
            "with enableHTTPS: true: the scheme is not changed for you",
        ),
        (_mutate("extenders.0.httpTimeout", "5"), "extenders[0].httpTimeout: invalid duration '5'"),
        (_mutate("extenders.0.httpTimeout", "5 seconds"), "invalid duration"),
        (_mutate("extenders.0.httpTimeout", "1d"), "invalid duration"),
        (_mutate("extenders.0.httpTimeout", "-5s"), "is negative"),
        (_mutate("extenders.0.enableHttps", True), 'unknown field "enableHttps"'),
        (_mutate("extenders.0.urlPrefix", ""), "extenders[0].urlPrefix: Required value"),
        (_mutate("extenders.0.urlPrefix", "127.0.0.1:8888"), "is not an http:// or https:// URL"),
        (_mutate("extenders.0.nodeCacheCapable", "true"), "nodeCacheCapable: 'true' is not a boolean"),
        (
            _mutate("extenders.0.tlsConfig", {"insecureSkipVerify": True}),
            'unknown field "insecureSkipVerify"',
        ),
        (_mutate("extenders.0.managedResources", [{"name": "cpu"}]), "is an invalid extended resource name"),
        (
            _mutate("extenders.0.managedResources", [{"name": "kubernetes.io/cpu"}]),
            "is an invalid extended resource name",
        ),
        (
            _mutate("extenders.0.managedResources", [{"name": "requests.example.com/gpu"}]),
            "is an invalid extended resource name",
        ),
        (
            _mutate("extenders.0.managedResources", [{"name": "example.com/Bad Name"}]),
            "name part must consist of",
        ),
        # valid: a second, non-binding extender with its own managed resource
        (_mutate("extenders.1", SECOND | {"managedResources": [{"name": "example.com/gpu"}]}), None),
        (_mutate("kind", "Policy"), "kind: 'Policy' is not KubeSchedulerConfiguration"),
        (
            _mutate("apiVersion", "kubescheduler.config.k8s.io/v1beta3"),
            "is not kubescheduler.config.k8s.io/v1",
        ),
    ],
)
def test_the_validator_refuses_what_kube_scheduler_refuses(
    config: dict[str, Any], message: str | None
) -> None:
    errors = validate_scheduler_config(config)
    if message is None:
        assert errors == []
    else:
        assert any(message in e for e in errors), errors


def test_the_validator_refuses_duplicate_managed_resources_across_extenders() -> None:
    config = _mutate("extenders.1", SECOND | {"managedResources": [{"name": "example.com/gpu"}]})
    config["extenders"][0]["managedResources"] = [{"name": "example.com/gpu"}]
    errors = validate_scheduler_config(config)
    assert errors == [
        "extenders[1].managedResources[0].name: Invalid value: 'example.com/gpu': "
        "duplicate extender managed resource name"
    ]


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("example.com/gpu", True),
        ("nvidia.com/gpu", True),
        ("example.com/a.b-c_d", True),
        ("gpu", False),  # no domain: a native resource name
        ("kubernetes.io/gpu", False),
        ("foo.kubernetes.io/gpu", False),
        ("requests.example.com/gpu", False),
        ("Example.com/gpu", False),
        ("example.com/", False),
        ("example.com/" + "a" * 64, False),
    ],
)
def test_extended_resource_names(name: str, valid: bool) -> None:
    assert (extended_resource_name_errors(name) == []) is valid


# ----------------------------------------------------------------------------------- Dockerfile, image

DOCKERFILE = (ROOT / "Dockerfile").read_text()
STAGES = parse_dockerfile(DOCKERFILE)
IGNORE = DockerIgnore((ROOT / ".dockerignore").read_text())


def copy_sources() -> list[tuple[int, str]]:
    """(stage index, source) of every COPY from the build context."""
    out = []
    for i, stage in enumerate(STAGES):
        for ins in stage.all("COPY") + stage.all("ADD"):
            cp = parse_copy(ins)
            if "from" not in cp.flags:
                out.extend((i, s) for s in cp.sources)
    return out


def test_dockerfile_stages_and_base_image() -> None:
    images = [s.image for s in STAGES]
    assert len(images) == 2 and images[0] == images[1], "build and run on the same base"
    name, _, digest = images[0].partition("@")
    assert name == "python:3.11-slim-bookworm"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), "base pinned by digest, not tag alone"
    assert STAGES[0].name == "build" and STAGES[-1].name == ""
    final = STAGES[-1]
    for ins in final.all("COPY"):
        cp = parse_copy(ins)
        if "from" in cp.flags:
            assert cp.flags["from"] in {s.name for s in STAGES[:-1]}, ins.value


def test_dockerfile_entrypoint_user_and_bytecode() -> None:
    final = STAGES[-1]
    entry = final.last("ENTRYPOINT")
    assert entry is not None and entry.exec_form == ["ballast"]
    user = final.last("USER")
    assert user is not None
    uid = user.value.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root USER (runAsNonRoot can check it)"
    assert final.all("USER")[-1].line > max(i.line for i in final.instructions if i.keyword == "RUN")
    for stage in STAGES:
        env = {k: v for ins in stage.all("ENV") for k, v in parse_env(ins).items()}
        assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    runs = " ".join(i.value for s in STAGES for i in s.all("RUN"))
    # Ballast and its dependencies, and the standard library (the base image ships no .pyc files)
    assert "compileall" in runs and "--invalidation-mode unchecked-hash /opt/ballast/lib" in runs
    assert "/usr/local/lib/python3.11" in " ".join(i.value for i in final.all("RUN"))
    cmd = final.last("CMD")
    assert cmd is not None and cmd.exec_form is not None
    args = cli.build_parser().parse_args(cmd.exec_form)
    policy_copy = next(parse_copy(i) for i in final.all("COPY") if "policy.yaml" in i.value)
    assert args.command == "extender" and args.policy == policy_copy.dest
    assert args.host == "127.0.0.1", "the unauthenticated extender listens on loopback unless told otherwise"


def test_dockerfile_installs_pinned_versions() -> None:
    build = STAGES[0]
    runs = [i for i in build.all("RUN") if "pip" in i.value]
    installs = [r for r in runs if re.search(r"pip (--python \S+ )?install", r.value)]
    assert installs and all("-c requirements.lock" in r.value for r in installs)
    lock_copy = next(i for i in build.all("COPY") if "requirements.lock" in i.value)
    assert lock_copy.line < installs[0].line
    assert "--no-build-isolation" in " ".join(r.value for r in runs), "the pinned build tools build the wheel"
    assert "pip --python /opt/ballast/bin/python check" in " ".join(r.value for r in runs)
    tools = shlex.split(installs[0].value)
    assert set(BUILD_TOOLS) <= set(tools)


def test_every_copy_source_exists_and_is_in_the_build_context() -> None:
    sources = copy_sources()
    assert sources
    for _, src in sources:
        path = ROOT / src
        assert path.exists(), f"COPY {src}: no such file"
        assert not IGNORE.excluded(src), f"COPY {src}: excluded by .dockerignore"
        if path.is_dir():
            for f in path.rglob("*"):
                rel = f.relative_to(ROOT).as_posix()
                if f.is_file() and "__pycache__" not in f.parts:
                    assert not IGNORE.excluded(rel), f"{rel}: excluded by .dockerignore"
    # what the build needs beyond ballast/: setup.py generates the CRI stubs
    copied = {s for _, s in sources}
    assert {"pyproject.toml", "setup.py", "README.md", "requirements.lock", "ballast"} <= copied


def test_dockerignore_keeps_local_state_out() -> None:
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "bench/x.py",
        "ballast.egg-info/PKG-INFO",
        "build/lib/ballast/extender/cli.py",
        "ballast/__pycache__/cli.cpython-311.pyc",
        "scheduler_config/deploy/agent.yaml",
        ".pytest_cache/v",
        "Dockerfile",
    ):
        assert IGNORE.excluded(path), path
    for path in (
        "ballast/extender/cli.py",
        "ballast/cli.py",
        "ballast/agent/cri/api.proto",
        "scheduler_config/policy.yaml",
        "setup.py",
    ):
        assert not IGNORE.excluded(path), path


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        ("*", "a/b/c", True),
        ("*\n!a", "a/b/c", False),
        ("*\n!a\na/b", "a/b/c", True),
        ("**/__pycache__", "x/y/__pycache__/z.pyc", True),
        ("**/*.pyc", "z.pyc", True),
        ("a/*.py", "a/b/c.py", False),  # Go's * does not cross '/', and no parent matches a/*.py
        ("a/*.py", "a/c.py", True),
        ("a/*.py", "b/c.py", False),
        ("/a/", "a/x", True),
        ("# comment\n\n", "a", False),
        ("doc?", "docs", True),
        ("doc[a-r]", "docs", False),
    ],
)
def test_dockerignore_matching(patterns: str, path: str, excluded: bool) -> None:
    assert DockerIgnore(patterns).excluded(path) is excluded


def test_dockerfile_parser_reads_continuations_and_comments() -> None:
    stages = parse_dockerfile(
        "# syntax=docker/dockerfile:1\nARG X=1\nFROM a:1 AS one\nRUN echo a \\\n# inside\n  && echo b\n"
        'FROM --platform=linux/amd64 b:2\nCOPY --from=one --chown=1:1 /x /y\nENTRYPOINT ["e"]\n'
    )
    assert [(s.image, s.name) for s in stages] == [("a:1", "one"), ("b:2", "")]
    assert stages[0].instructions[0].value == "echo a && echo b"
    cp = parse_copy(stages[1].all("COPY")[0])
    assert (cp.sources, cp.dest, cp.flags) == (["/x"], "/y", {"from": "one", "chown": "1:1"})
    with pytest.raises(ValueError, match="before the first FROM"):
        parse_dockerfile("RUN x\nFROM a\n")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build stage, replayed: the wheel built without isolation from exactly the COPY'd files."""
    return build_wheel(tmp_path_factory.mktemp("image"), [s for i, s in copy_sources() if i == 0])


def build_wheel(tmp: Path, sources: list[str]) -> Path:
    ctx = tmp / "ctx"
    ctx.mkdir()
    for src in sources:
        path = ROOT / src
        if path.is_dir():
            shutil.copytree(path, ctx / src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, ctx / src)
    out = tmp / "wheels"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-index",
            "--no-build-isolation",
            "--no-deps",
            "--wheel-dir",
            str(out),
            str(ctx),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (whl,) = out.glob("ballast-*.whl")
    return whl


def test_the_image_wheel_carries_the_cri_stubs_and_the_entry_point(wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = next(n for n in names if n.endswith("entry_points.txt"))
        assert "ballast = ballast.cli:main" in z.read(entry).decode()
        assert {
            "ballast/agent/cri/api_pb2.py",
            "ballast/agent/cri/api_pb2_grpc.py",
            "ballast/extender/cli.py",
            "ballast/cli.py",
        } <= names
        # One top-level package, named after the project; the test harnesses stay out of it.
        packages = {n.split("/")[0] for n in names if n.endswith(".py")}
        assert packages == {"ballast"}, packages
        assert not any(n.startswith("ballast/testing/") for n in names)
        z.extractall(tmp_path / "site")
    # The generated stubs import with the locked grpcio/protobuf (the venv's): they check the versions.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import ballast.agent.cri.api_pb2_grpc as g, ballast; "
        "assert ballast.__file__.startswith(sys.argv[1]), ballast.__file__; print(g.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "site")], capture_output=True, text=True
    )
    assert done.returncode == 0 and "ballast.agent.cri.api_pb2_grpc" in done.stdout, done.stderr


def test_a_context_without_setup_py_would_ship_no_cri_stubs(tmp_path: Path) -> None:
    """Why setup.py must be copied: without its build hook the wheel has no stubs and the agent cannot
    start on a read-only root file system."""
    sources = [s for i, s in copy_sources() if i == 0 and s != "setup.py"]
    whl = build_wheel(tmp_path, sources)
    with zipfile.ZipFile(whl) as z:
        assert "ballast/agent/cri/api_pb2.py" not in z.namelist()


# ---------------------------------------------------------------------------------------------- lock

LOCK = ROOT / "requirements.lock"


def test_the_lock_pins_every_runtime_dependency_and_the_build_tools() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = read_lock(LOCK)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for spec in project["project"]["dependencies"]:
        req = Requirement(spec)
        name, version = pins[canonical(req.name)]
        assert req.specifier.contains(Version(version)), f"{name}=={version} does not satisfy {spec}"
    for spec in project["build-system"]["requires"]:
        req = Requirement(spec)
        if canonical(req.name) in {canonical(t) for t in BUILD_TOOLS}:
            assert req.specifier.contains(Version(pins[canonical(req.name)][1])), spec
    # generated stubs refuse a grpcio older than the grpcio-tools that generated them
    assert pins["grpcio-tools"][1] == pins["grpcio"][1]


def test_the_lock_is_closed_over_dependencies() -> None:
    """Every requirement of a locked package (as installed here, at the locked version) is locked too."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = read_lock(LOCK)
    checked = 0
    for name, version in pins.values():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if dist.version != version:
            continue  # metadata of another version: nothing to conclude
        checked += 1
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            assert canonical(req.name) in pins, f"{name} needs {req.name}, which is not locked"
            assert req.specifier.contains(Version(pins[canonical(req.name)][1]), prereleases=True), (
                f"{name} needs {spec}, locked {pins[canonical(req.name)][1]}"
            )
    assert checked >= len(pins) // 2, "the lock and this environment have little in common: regenerate it"


def test_the_lock_matches_this_environment_where_it_is_the_same_project_set() -> None:
    """The runtime closure computed here names exactly the locked runtime packages."""
    pins = read_lock(LOCK)
    runtime = runtime_closure()
    build_only = {canonical(t) for t in BUILD_TOOLS} - set(runtime)
    assert set(pins) - build_only == set(runtime)


def test_the_lock_parser_refuses_what_pip_would_not_pin(tmp_path: Path) -> None:
    for bad in ("fastapi>=0.1\n", "fastapi\n", "a==1\nA==2\n", "-e .\n"):
        (tmp_path / "l").write_text(bad)
        with pytest.raises(ValueError):
            read_lock(tmp_path / "l")


# ---------------------------------------------------------------------------------------------- docs

INSTALL = ROOT / "docs" / "install.md"
GUIDE = [ROOT / "docs" / f"{page}.md" for page in ("install", "operate", "security", "troubleshooting")]
"""The pages an operator reads: installing, operating, security, troubleshooting."""


def _flags(command: str) -> set[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[attr-defined]
    flags = {s for a in sub._actions for s in a.option_strings}
    if command == "agent":
        topo = next(a for a in sub._actions if getattr(a, "dest", "") == "agent_command").choices["topology"]
        flags |= {s for a in topo._actions for s in a.option_strings}
    return flags


def test_every_ballast_flag_in_the_operator_pages_exists() -> None:
    text = "\n".join(page.read_text() for page in GUIDE)
    found = 0
    for m in re.finditer(r"ballast (extender|annotator|rebalancer|agent)\b([^\n`|]*)", text):
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(2)):
            found += 1
            assert flag in _flags(m.group(1)) | {"--help"}, f"`ballast {m.group(1)} {flag}` does not exist"
    assert found >= 8, "the pages' ballast command lines were not found"
    for flag in re.findall(r"`(--[a-z][a-z0-9-]*)", text):
        known = (
            _flags("extender") | _flags("annotator") | _flags("rebalancer") | _flags("agent") | KUBE_FLAGS
        ) | HELM_FLAGS
        assert flag in known, (
            f"{flag} is not a flag of ballast, kubectl, kube-scheduler, kube-apiserver or helm the pages use"
        )


KUBE_FLAGS = {
    "--config",  # kube-scheduler
    "--event-ttl",  # kube-apiserver (how long Events live)
    "--load-restrictor",
    "--show-labels",
}


def test_the_operator_pages_have_no_local_paths() -> None:
    for path in (*GUIDE, *FILES, ROOT / "Dockerfile", ROOT / ".dockerignore", LOCK):
        text = path.read_text()
        assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text, path


# ------------------------------------------------------------------------------------ network policies


def test_network_policies_admit_only_the_metrics_ports_of_the_annotator_agent_and_rebalancer() -> None:
    docs = [
        d
        for p in (DEPLOY / "network-policy.yaml", PROMETHEUS / "network-policy.yaml")
        for d in yaml.safe_load_all(p.read_text())
        if d
    ]
    workloads = {
        d["metadata"]["name"]: d
        for p in (PROMETHEUS / "annotator.yaml", DEPLOY / "agent.yaml", DEPLOY / "rebalancer.yaml")
        for d in yaml.safe_load_all(p.read_text())
        if d and d["kind"] in ("Deployment", "DaemonSet")
    }
    covered = set()
    for d in docs:
        assert d["apiVersion"] == "networking.k8s.io/v1" and d["kind"] == "NetworkPolicy"
        spec = d["spec"]
        assert spec["policyTypes"] == ["Ingress"]
        selector = spec["podSelector"]["matchLabels"]
        matched = [
            w
            for w in workloads.values()
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, d["metadata"]["name"]
        (pod,) = matched
        assert d["metadata"]["namespace"] == pod["metadata"]["namespace"]
        ports = {
            p["containerPort"]
            for c in pod["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        allowed = {p["port"] for rule in spec["ingress"] for p in rule["ports"]}
        assert allowed == ports, "exactly the metrics port, nothing more"
        assert all(rule.get("from") for rule in spec["ingress"]), "never from everywhere"
        covered.add(pod["metadata"]["name"])
    assert len(covered) == 3
