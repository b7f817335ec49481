"""Where the kubelet puts a pod's cgroup, by its cgroupDriver, cgroupRoot and cgroupsPerQOS: a table of the
kubelet's own paths (cgroupfs as a test node's kubelet makes them, systemd as kubeadm and kind nodes show)."""

from __future__ import annotations

import pytest

from ballast.agent.cgroup_paths import CgroupLayout, pod_cgroup_parts
from ballast.contract.pod import QOSClass

UID = "0be14245-a4f2-42e4-832a-b7e833d62690"
UID_ = UID.replace("-", "_")
G, B, BE = QOSClass.GUARANTEED, QOSClass.BURSTABLE, QOSClass.BEST_EFFORT


@pytest.mark.parametrize(
    ("layout", "qos", "path"),
    [
        (CgroupLayout(), G, f"kubepods/pod{UID}"),
        (CgroupLayout(), B, f"kubepods/burstable/pod{UID}"),
        (CgroupLayout(), BE, f"kubepods/besteffort/pod{UID}"),
        (CgroupLayout("cgroupfs", "/rn1"), B, f"rn1/kubepods/burstable/pod{UID}"),
        (CgroupLayout("cgroupfs", "/a/b/"), G, f"a/b/kubepods/pod{UID}"),
        (CgroupLayout("systemd"), G, f"kubepods.slice/kubepods-pod{UID_}.slice"),
        (
            CgroupLayout("systemd"),
            B,
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
        ),
        (  # kind: cgroupRoot /kubelet with the systemd driver
            CgroupLayout("systemd", "/kubelet"),
            BE,
            "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{UID_}.slice",
        ),
        (  # a '-' in a root name is escaped like the pod uid's
            CgroupLayout("systemd", "/my-node"),
            G,
            f"my_node.slice/my_node-kubepods.slice/my_node-kubepods-pod{UID_}.slice",
        ),
    ],
)
def test_the_kubelets_pod_cgroup_paths(layout: CgroupLayout, qos: QOSClass, path: str) -> None:
    assert "/".join(layout.pod_parts(UID, qos) or ()) == path
    assert "/".join(pod_cgroup_parts(UID, qos, layout.driver, layout.root)) == path
    kubepods = layout.kubepods_parts()
    assert kubepods is not None and path.startswith("/".join(kubepods) + "/")


def test_without_cgroups_per_qos_there_is_no_pod_cgroup() -> None:
    layout = CgroupLayout("cgroupfs", "/", per_qos=False)
    assert layout.pod_parts(UID, B) is None and layout.kubepods_parts() is None
    assert "no pod cgroups" in layout.describe()


@pytest.mark.parametrize(
    ("driver", "root", "message"),
    [("runc", "/", "cgroup driver"), ("cgroupfs", "kubelet", "absolute"), ("systemd", "", "absolute")],
)
def test_a_layout_the_kubelet_could_not_have_is_refused(driver: str, root: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CgroupLayout(driver, root)
