"""The cgroupfs fallback writer against temporary cgroup trees (v1 and v2, cgroupfs and systemd drivers)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from ballast.agent.cpumanager.runtime import CgroupfsRuntime, ContainerRef, MemoryRuntime, RuntimeCallError
from ballast.agent.cpuset import CPUSet
from ballast.contract.pod import QOSClass

UID = "1234-abcd-5678"
CID = "0123456789abcdef"


def _ref(qos: QOSClass = QOSClass.BURSTABLE, runtime: str = "containerd", cid: str = CID) -> ContainerRef:
    return ContainerRef(UID, "default", "web", "app", cid, runtime, qos)


def _v1(root: Path) -> Path:
    (root / "cpuset").mkdir(parents=True)
    (root / "memory").mkdir()
    return root


def _v2(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return root


# (version, driver, qos, runtime prefix, path of the container dir relative to the cgroup root)
PATHS = [
    (1, "cgroupfs", QOSClass.BURSTABLE, "containerd", f"cpuset/kubepods/burstable/pod{UID}/{CID}"),
    (1, "cgroupfs", QOSClass.GUARANTEED, "containerd", f"cpuset/kubepods/pod{UID}/{CID}"),
    (1, "cgroupfs", QOSClass.BEST_EFFORT, "containerd", f"cpuset/kubepods/besteffort/pod{UID}/{CID}"),
    (1, "cgroupfs", QOSClass.BURSTABLE, "cri-o", f"cpuset/kubepods/burstable/pod{UID}/crio-{CID}"),
    (
        1,
        "systemd",
        QOSClass.BURSTABLE,
        "containerd",
        "cpuset/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678.slice/"
        f"cri-containerd-{CID}.scope",
    ),
    (
        2,
        "systemd",
        QOSClass.GUARANTEED,
        "containerd",
        f"kubepods.slice/kubepods-pod1234_abcd_5678.slice/cri-containerd-{CID}.scope",
    ),
    (
        2,
        "systemd",
        QOSClass.BEST_EFFORT,
        "cri-o",
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd_5678.slice/crio-{CID}.scope",
    ),
    (
        2,
        "systemd",
        QOSClass.BURSTABLE,
        "docker",
        f"kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod1234_abcd_5678.slice/docker-{CID}.scope",
    ),
    (2, "cgroupfs", QOSClass.BURSTABLE, "containerd", f"kubepods/burstable/pod{UID}/{CID}"),
]


@pytest.mark.parametrize(("version", "driver", "qos", "runtime", "rel"), PATHS)
def test_paths_and_write(
    tmp_path: Path, version: int, driver: str, qos: QOSClass, runtime: str, rel: str
) -> None:
    root = _v1(tmp_path / "cg") if version == 1 else _v2(tmp_path / "cg")
    container_dir = root / rel
    container_dir.mkdir(parents=True)
    (container_dir / "cpuset.cpus").write_text("0-7\n")
    writer = CgroupfsRuntime(root, driver=driver)  # version detected from the tree
    assert writer.version == version
    assert writer.container_dir(_ref(qos, runtime)) == container_dir
    writer.set_cpuset(_ref(qos, runtime), CPUSet.parse("2-3,6"))
    assert (container_dir / "cpuset.cpus").read_text() == "2-3,6"


def test_unknown_runtime_prefix_uses_the_default_runtime(tmp_path: Path) -> None:
    writer = CgroupfsRuntime(_v1(tmp_path), default_runtime="cri-o")
    assert writer.container_dir(_ref(runtime="")).name == f"crio-{CID}"


def test_effective_cpus_are_read_back(tmp_path: Path) -> None:
    root = _v1(tmp_path)
    d = root / f"cpuset/kubepods/burstable/pod{UID}/{CID}"
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("")
    (d / "cpuset.effective_cpus").write_text("2-3\n")
    writer = CgroupfsRuntime(root)
    writer.set_cpuset(_ref(), CPUSet.parse("2-3"))
    with pytest.raises(RuntimeCallError, match=r"wrote 4 but .*effective_cpus says 2-3") as err:
        writer.set_cpuset(_ref(), CPUSet.of(4))
    assert err.value.reason == "invalid"


def test_v2_effective_file_name(tmp_path: Path) -> None:
    root = _v2(tmp_path)
    d = root / f"kubepods/pod{UID}/{CID}"
    d.mkdir(parents=True)
    (d / "cpuset.cpus.effective").write_text("0-1\n")
    writer = CgroupfsRuntime(root)
    with pytest.raises(RuntimeCallError, match=r"cpuset\.cpus\.effective says 0-1"):
        writer.set_cpuset(_ref(QOSClass.GUARANTEED), CPUSet.of(5))


def test_missing_container_dir_is_not_found(tmp_path: Path) -> None:
    writer = CgroupfsRuntime(_v1(tmp_path))
    with pytest.raises(RuntimeCallError) as err:
        writer.set_cpuset(_ref(), CPUSet.of(1))
    assert err.value.not_found and "no cgroup directory" in str(err.value)


def test_other_qos_dirs_are_tried(tmp_path: Path) -> None:
    root = _v1(tmp_path)
    d = root / f"cpuset/kubepods/besteffort/pod{UID}/{CID}"
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("")
    CgroupfsRuntime(root).set_cpuset(_ref(QOSClass.BURSTABLE), CPUSet.of(1))
    assert (d / "cpuset.cpus").read_text() == "1"


def test_kernel_refusal_is_invalid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _v1(tmp_path)
    d = root / f"cpuset/kubepods/burstable/pod{UID}/{CID}"
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("")
    import builtins

    real_open = builtins.open

    def refusing_open(path, mode="r", *args, **kwargs):
        if str(path).endswith("cpuset.cpus") and "w" in mode:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    with pytest.raises(RuntimeCallError, match="not a subset of the parent") as err:
        CgroupfsRuntime(root).set_cpuset(_ref(), CPUSet.of(9))
    assert err.value.reason == "invalid"


def test_refuses_empty_sets_and_missing_ids(tmp_path: Path) -> None:
    writer = CgroupfsRuntime(_v1(tmp_path))
    with pytest.raises(RuntimeCallError, match="empty cpuset"):
        writer.set_cpuset(_ref(), CPUSet())
    with pytest.raises(RuntimeCallError, match="no container id"):
        writer.set_cpuset(_ref(cid=""), CPUSet.of(1))


def test_lookup_is_delegated(tmp_path: Path) -> None:
    lookup = MemoryRuntime()
    lookup.containers[(UID, "app")] = "from-cri"
    writer = CgroupfsRuntime(_v1(tmp_path), lookup=lookup)
    assert writer.find_container_id(_ref(cid="")) == "from-cri"
    assert CgroupfsRuntime(_v1(tmp_path / "other")).find_container_id(_ref(cid="")) is None


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="driver"):
        CgroupfsRuntime(tmp_path, driver="cgroupv3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="runtime"):
        CgroupfsRuntime(tmp_path, default_runtime="rkt")
