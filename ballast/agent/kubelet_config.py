"""The kubelet settings the agent depends on, read from the kubelet's config file or from ``configz``.

Two sources, one model: the ``KubeletConfiguration`` YAML file on the node (``--kubelet-config``), or the
JSON that ``GET /api/v1/nodes/{name}/proxy/configz`` returns, wrapped as ``{"kubeletconfig": {...}}``.
The fields that matter here: ``cpuManagerPolicy`` (a static kubelet owns the cpusets, so the agent
must stand back), ``reservedSystemCPUs``, ``kubeReserved`` and ``systemReserved`` (the NRT), and
``cgroupDriver``, ``cgroupRoot`` and ``cgroupsPerQOS`` (where the pod cgroups the load reader reads are).

Parsing is pure (``parse_kubelet_config``, ``parse_configz``); ``load_kubelet_config`` only adds the file
read. Every error names its source and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.cpuset import CPUSet, CPUSetParseError
from ballast.contract.quantity import Quantity, QuantityError

__all__ = [
    "KubeletConfigError",
    "KubeletSettings",
    "load_kubelet_config",
    "parse_configz",
    "parse_kubelet_config",
]

_KIND = "KubeletConfiguration"
_API_GROUP = "kubelet.config.k8s.io/"


class KubeletConfigError(ValueError):
    """Kubelet configuration that cannot be used; the message names the source and the field."""


@dataclass(frozen=True)
class KubeletSettings:
    """What the agent needs from the kubelet configuration; defaults are the kubelet's own."""

    cpu_manager_policy: str = "none"
    reserved_system_cpus: CPUSet | None = None
    """``reservedSystemCPUs`` when set (non-empty), else ``None``."""
    kube_reserved: Mapping[str, Quantity] = field(default_factory=dict)
    system_reserved: Mapping[str, Quantity] = field(default_factory=dict)
    cgroup_driver: str = "cgroupfs"
    """``cgroupDriver``: how the kubelet names pod cgroups (``ballast.agent.cgroup_paths``)."""
    cgroup_root: str = "/"
    """``cgroupRoot``: the parent of the kubelet's ``kubepods``."""
    cgroups_per_qos: bool = True
    """``cgroupsPerQOS``: without it the kubelet makes no pod cgroups."""

    @property
    def cgroup_layout(self) -> CgroupLayout:
        """Where this kubelet's pod cgroups are; the load reader follows it."""
        return CgroupLayout(self.cgroup_driver, self.cgroup_root, self.cgroups_per_qos)

    @property
    def cpu_manager_is_static(self) -> bool:
        """True when the kubelet's own static CPU manager pins containers (the agent must not)."""
        return self.cpu_manager_policy == "static"

    def reserved_resources(self) -> dict[str, Quantity]:
        """``kubeReserved + systemReserved`` per resource, keys sorted (what the node holds back)."""
        total: dict[str, Quantity] = {}
        for source in (self.kube_reserved, self.system_reserved):
            for name, q in source.items():
                total[name] = total[name] + q if name in total else q
        return dict(sorted(total.items()))


def parse_kubelet_config(data: Any, source: str = "kubelet configuration") -> KubeletSettings:
    """Read the settings from a decoded ``KubeletConfiguration`` object; ``source`` names it in errors."""
    if data is None:
        return KubeletSettings()
    if not isinstance(data, Mapping):
        raise KubeletConfigError(
            f"{source}: expected a KubeletConfiguration object, got {type(data).__name__}"
        )
    kind = data.get("kind")
    if kind is not None and kind != _KIND:
        raise KubeletConfigError(f"{source}: kind is {kind!r}, expected {_KIND!r}")
    api_version = data.get("apiVersion")
    if api_version is not None and not (isinstance(api_version, str) and api_version.startswith(_API_GROUP)):
        raise KubeletConfigError(
            f"{source}: apiVersion {api_version!r} is not in group kubelet.config.k8s.io"
        )

    policy = data.get("cpuManagerPolicy")
    if policy is None or policy == "":
        policy = "none"
    if not isinstance(policy, str):
        raise KubeletConfigError(f"{source}: cpuManagerPolicy must be a string like 'none' or 'static'")

    raw_cpus = data.get("reservedSystemCPUs")
    reserved_cpus: CPUSet | None = None
    if raw_cpus not in (None, ""):
        if isinstance(raw_cpus, int) and not isinstance(raw_cpus, bool):
            raw_cpus = str(raw_cpus)  # YAML reads `reservedSystemCPUs: 0` as an int; still a one-CPU list.
        try:
            reserved_cpus = CPUSet.parse(raw_cpus) or None
        except CPUSetParseError as e:
            raise KubeletConfigError(f"{source}: reservedSystemCPUs: {e}") from None

    driver = data.get("cgroupDriver")
    if driver in (None, ""):
        driver = "cgroupfs"
    if driver not in ("cgroupfs", "systemd"):
        raise KubeletConfigError(f"{source}: cgroupDriver must be 'cgroupfs' or 'systemd', got {driver!r}")

    root = data.get("cgroupRoot")
    if root in (None, ""):
        root = "/"
    if not isinstance(root, str) or not root.startswith("/"):
        raise KubeletConfigError(
            f"{source}: cgroupRoot must be an absolute path like '/' or '/kubelet', got {root!r}"
        )
    per_qos = data.get("cgroupsPerQOS")
    if per_qos is None:
        per_qos = True
    if not isinstance(per_qos, bool):
        raise KubeletConfigError(f"{source}: cgroupsPerQOS must be true or false, got {per_qos!r}")

    return KubeletSettings(
        cgroup_driver=driver,
        cgroup_root=root,
        cgroups_per_qos=per_qos,
        cpu_manager_policy=policy,
        reserved_system_cpus=reserved_cpus,
        kube_reserved=_resource_list(data.get("kubeReserved"), "kubeReserved", source),
        system_reserved=_resource_list(data.get("systemReserved"), "systemReserved", source),
    )


def _resource_list(raw: Any, name: str, source: str) -> dict[str, Quantity]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise KubeletConfigError(f"{source}: {name} must be a map like {{cpu: 500m, memory: 1Gi}}")
    out: dict[str, Quantity] = {}
    for key, value in raw.items():
        try:
            out[str(key)] = Quantity.parse(value)
        except QuantityError as e:
            raise KubeletConfigError(f"{source}: {name}.{key}: {e}") from None
    return out


def parse_configz(body: bytes | str | Mapping[str, Any], source: str = "configz") -> KubeletSettings:
    """Read the settings from the kubelet's ``/configz`` answer (``{"kubeletconfig": {...}}``)."""
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError as e:
            raise KubeletConfigError(f"{source}: not JSON: {e}") from None
    if not isinstance(body, Mapping) or not isinstance(body.get("kubeletconfig"), Mapping):
        raise KubeletConfigError(
            f'{source}: expected {{"kubeletconfig": {{...}}}} from the kubelet configz endpoint'
        )
    return parse_kubelet_config(body["kubeletconfig"], source)


def load_kubelet_config(path: Path) -> KubeletSettings:
    """Read and parse the kubelet config YAML (or JSON) file at ``path``; errors name the file."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise KubeletConfigError(f"{path}: cannot read kubelet config: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KubeletConfigError(f"{path}: not valid YAML: {e}") from None
    return parse_kubelet_config(data, str(path))
