"""Kubelet settings from the config file and from configz, and the errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import (
    KubeletConfigError,
    KubeletSettings,
    load_kubelet_config,
    parse_configz,
    parse_kubelet_config,
)
from ballast.contract.quantity import Quantity

KUBELET_YAML = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cpuManagerPolicy: static
reservedSystemCPUs: "0,32"
kubeReserved:
  cpu: 500m
  memory: 1Gi
systemReserved:
  cpu: "1"
  memory: 512Mi
  ephemeral-storage: 1Gi
"""

# A trimmed real answer of GET /api/v1/nodes/<node>/proxy/configz (kubeadm node, kubelet v1.30).
CONFIGZ = {
    "kubeletconfig": {
        "enableServer": True,
        "staticPodPath": "/etc/kubernetes/manifests",
        "cgroupDriver": "systemd",
        "cpuManagerPolicy": "none",
        "cpuManagerReconcilePeriod": "10s",
        "kubeReserved": {"cpu": "100m", "memory": "128974848"},
        "systemReserved": {"cpu": "200m", "memory": "129M"},
        "enforceNodeAllocatable": ["pods"],
    }
}


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(KUBELET_YAML)
    settings = load_kubelet_config(path)
    assert settings.cpu_manager_policy == "static"
    assert settings.cpu_manager_is_static
    assert settings.reserved_system_cpus == CPUSet.of(0, 32)
    assert settings.kube_reserved == {"cpu": Quantity.parse("500m"), "memory": Quantity.parse("1Gi")}
    assert settings.reserved_resources() == {
        "cpu": Quantity.parse("1500m"),
        "ephemeral-storage": Quantity.parse("1Gi"),
        "memory": Quantity.parse("1536Mi"),
    }
    assert str(settings.reserved_resources()["memory"]) == "1536Mi"


def test_configz_answer() -> None:
    settings = parse_configz(json.dumps(CONFIGZ).encode())
    assert settings == parse_configz(CONFIGZ)
    assert settings.cpu_manager_policy == "none"
    assert not settings.cpu_manager_is_static
    assert settings.reserved_system_cpus is None
    assert settings.reserved_resources()["cpu"] == Quantity.parse("300m")
    assert settings.reserved_resources()["memory"].value == 128974848 + 129000000


def test_defaults_are_the_kubelets() -> None:
    assert parse_kubelet_config({}) == KubeletSettings()
    assert parse_kubelet_config(None) == KubeletSettings()
    settings = parse_kubelet_config({"cpuManagerPolicy": "", "reservedSystemCPUs": ""})
    assert settings.cpu_manager_policy == "none"
    assert settings.reserved_system_cpus is None
    assert settings.reserved_resources() == {}


def test_empty_file_means_all_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_kubelet_config(path) == KubeletSettings()


def test_yaml_numbers_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "kind: KubeletConfiguration\nreservedSystemCPUs: 0\nkubeReserved: {cpu: 1, memory: 0.5}\n"
    )
    settings = load_kubelet_config(path)
    assert settings.reserved_system_cpus == CPUSet.of(0)
    assert settings.kube_reserved["cpu"] == Quantity.parse("1")
    assert settings.kube_reserved["memory"] == Quantity.parse("500m")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (
            "kind: KubeletConfiguration\nkubeReserved: {cpu: lots}\n",
            "kubeReserved.cpu: invalid quantity 'lots'",
        ),
        ("systemReserved: {memory: 1GB}\n", "systemReserved.memory: invalid quantity '1GB'"),
        ("kubeReserved: [cpu]\n", "kubeReserved must be a map"),
        ('reservedSystemCPUs: "3-1"\n', "reservedSystemCPUs: invalid cpuset '3-1'"),
        ("reservedSystemCPUs: [0, 1]\n", "reservedSystemCPUs: invalid cpuset"),
        ("cpuManagerPolicy: 3\n", "cpuManagerPolicy must be a string"),
        ("kind: Pod\n", "kind is 'Pod', expected 'KubeletConfiguration'"),
        ("apiVersion: v1\n", "apiVersion 'v1' is not in group kubelet.config.k8s.io"),
        ("- just\n- a list\n", "expected a KubeletConfiguration object, got list"),
        ("kubeReserved: {cpu: [unclosed\n", "not valid YAML"),
    ],
)
def test_garbage_config_names_the_file(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "kubelet.yaml"
    path.write_text(content)
    with pytest.raises(KubeletConfigError) as err:
        load_kubelet_config(path)
    assert str(err.value).startswith(f"{path}: ")
    assert why in str(err.value)
    assert isinstance(err.value, ValueError)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(KubeletConfigError, match=r"nope\.yaml: cannot read kubelet config"):
        load_kubelet_config(path)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>", "configz: not JSON"),
        (b"{}", 'expected {"kubeletconfig": {...}}'),
        ({"kubeletconfig": []}, 'expected {"kubeletconfig": {...}}'),
        (
            {"kubeletconfig": {"kubeReserved": {"cpu": "x"}}},
            "configz: kubeReserved.cpu: invalid quantity 'x'",
        ),
    ],
)
def test_bad_configz(body: object, why: str) -> None:
    with pytest.raises(KubeletConfigError) as err:
        parse_configz(body)  # type: ignore[arg-type]
    assert why in str(err.value)


def test_the_cgroup_driver_is_read_for_the_load_reader() -> None:
    assert parse_kubelet_config({}).cgroup_driver == "cgroupfs"  # the kubelet's default
    assert parse_kubelet_config({"cgroupDriver": "systemd"}).cgroup_driver == "systemd"
    with pytest.raises(KubeletConfigError, match="cgroupDriver"):
        parse_kubelet_config({"cgroupDriver": "runc"})


def test_the_cgroup_root_and_per_qos_setting_say_where_the_pod_cgroups_are() -> None:
    default = parse_kubelet_config({})
    assert (default.cgroup_root, default.cgroups_per_qos) == ("/", True)
    assert default.cgroup_layout == CgroupLayout()
    kind = parse_configz({"kubeletconfig": {"cgroupDriver": "systemd", "cgroupRoot": "/kubelet"}})
    assert kind.cgroup_layout == CgroupLayout("systemd", "/kubelet")
    flat = parse_kubelet_config({"cgroupRoot": "", "cgroupsPerQOS": False})
    assert flat.cgroup_layout == CgroupLayout("cgroupfs", "/", per_qos=False)
    with pytest.raises(KubeletConfigError, match="cgroupRoot must be an absolute path"):
        parse_kubelet_config({"cgroupRoot": "kubelet"}, "f.yaml")
    with pytest.raises(KubeletConfigError, match=r"f\.yaml: cgroupsPerQOS must be true or false"):
        parse_kubelet_config({"cgroupsPerQOS": "yes"}, "f.yaml")
