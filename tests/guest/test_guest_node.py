"""A guest node is the node users run: its own kernel, systemd with cgroup v2 and the kubelet's systemd
driver, containerd with NRI; its pods reach the API server at the ``kubernetes`` Service address with their
own service-account token, as on any cluster (the harness gives the guest what kube-proxy and a real network
would: ``ballast.testing.guest``)."""

from __future__ import annotations

import json

import pytest

from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.guest import GuestPool
from ballast.testing.realnode import BUSYBOX

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

REVIEW = '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}'
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_a_guest_is_a_cgroup_v2_systemd_node(clean_pods: ControlPlane, guests: GuestPool) -> None:
    """What the Node reports and what the guest has: Debian 13's kernel, containerd 1.7 with its NRI socket,
    cgroup v2 only, the kubelet's systemd driver, pods in systemd slices."""
    guest = guests.get("g1")
    info = clean_pods.core().read_node(guest.name).status.node_info
    assert info.os_image.startswith("Debian GNU/Linux 13"), info
    assert info.kernel_version.startswith("6.12."), info
    assert info.container_runtime_version.startswith("containerd://1.7."), info
    assert info.kubelet_version == "v1.36.2", info
    assert guest.ssh("stat -f -c %T /sys/fs/cgroup").strip() == "cgroup2fs"
    assert guest.ssh("test -S /var/run/nri/nri.sock && echo yes").strip() == "yes"
    assert guest.configz()["cgroupDriver"] == "systemd"
    assert guest.ssh("test -d /sys/fs/cgroup/kubepods.slice && echo yes").strip() == "yes"


def test_a_pod_reaches_the_api_server_with_its_own_token(clean_pods: ControlPlane, guests: GuestPool) -> None:
    """A pod asks the API server who it is (a SelfSubjectReview) at ``$KUBERNETES_SERVICE_HOST``
    (10.96.0.1:443, DNATed in the guest) with its projected token; the answer names its service account, its
    pod and its node. Read from its termination message: nothing may reach a guest through the API server's
    node proxy."""
    guest = guests.get("g1")
    command = (
        f'wget -q -O /dev/termination-log --header "Authorization: Bearer $(cat {TOKEN})" '
        f"--header \"Content-Type: application/json\" --post-data '{REVIEW}' "
        "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/apis/authentication.k8s.io/v1/selfsubjectreviews"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "whoami"},
        "spec": {
            "nodeName": guest.name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sh", "-c", command]}
            ],
        },
    }
    core = clean_pods.core()
    core.create_namespaced_pod("default", pod)
    wait_until(
        lambda: core.read_namespaced_pod("whoami", "default").status.phase in ("Succeeded", "Failed"),
        None,
        "pod whoami finished",
        180,
    )
    status = core.read_namespaced_pod("whoami", "default").status
    terminated = status.container_statuses[0].state.terminated
    assert status.phase == "Succeeded", terminated
    user = json.loads(terminated.message)["status"]["userInfo"]
    assert user["username"] == "system:serviceaccount:default:default", user
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["whoami"], user
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [guest.name], user
