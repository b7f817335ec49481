"""The guest-node tier: real nodes as QEMU guests (``ballast.testing.guest``) joined to a control plane of
their own.

Guests are slow to boot under emulation (about 40 s each), so one ``GuestPool`` serves the whole session and a
test asks it for a guest by name (``guests.get("g1")``); after each test its pods go (``clean_pods``), never
the nodes: ``tests/cluster``'s ``cluster`` fixture deletes every node after each test, so these tests do not
use it, nor its control plane (this one has the ServiceAccount admission plugin, kube-controller-manager and
a kube-scheduler, what pods in a real node need).

Without QEMU, mmdebstrap, root or the kubelet the tests skip saying what is missing; under ``CI=true`` they
fail instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ballast.testing import guest_agent
from ballast.testing.binaries import MissingPiece, check_available
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.guest import Guest, GuestPool, guest_control_plane, require_guests
from ballast.testing.parts import missing_part

KEEP_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease", "default", guest_agent.NAMESPACE}
"""What ``clean_pods`` leaves: the system's namespaces, and the agent's install (slow to start under
emulation; ``remove_agent`` takes it away)."""


@pytest.fixture(scope="session")
def guest_cp() -> Iterator[ControlPlane]:
    try:
        check_available()
    except MissingPiece as exc:
        missing_part(str(exc))
    require_guests()
    with ControlPlane(service_accounts=True) as cp:
        guest_control_plane(cp)
        yield cp


@pytest.fixture(scope="session")
def guests(guest_cp: ControlPlane, agent_image: Any) -> Iterator[GuestPool]:
    """The session's guests, each booting with the agent's image in its containerd (unpacked when the disk
    image is built, on this machine: importing it inside an emulated guest takes minutes)."""
    pool = GuestPool(guest_cp, images=(agent_image.archive,))
    try:
        yield pool
    finally:
        pool.close()


def delete_pods_everywhere(cp: ControlPlane, timeout: float = 180) -> None:
    """Delete every test pod and namespace (gracefully: the guests' kubelets confirm each), keep the nodes."""
    core = cp.core()
    for ns in core.list_namespace().items:
        name = ns.metadata.name
        if name not in KEEP_NAMESPACES:
            cp.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")
    cp.kubectl("delete", "pods", "--all", "-n", "default", "--wait=false")
    wait_until(
        lambda: (
            not [
                p
                for p in core.list_pod_for_all_namespaces().items
                if p.metadata.namespace not in {"kube-system"}
            ]
            and {ns.metadata.name for ns in core.list_namespace().items} <= KEEP_NAMESPACES
        ),
        None,
        "test pods and namespaces gone",
        timeout,
    )


@pytest.fixture
def clean_pods(guest_cp: ControlPlane) -> Iterator[ControlPlane]:
    """The guests' control plane; after the test every pod and test namespace is gone (nodes stay)."""
    yield guest_cp
    delete_pods_everywhere(guest_cp)


@pytest.fixture(scope="session")
def agent_image(guest_cp: ControlPlane) -> Any:
    """Ballast's image built here from Debian 12's packages with the Dockerfile's layout (cached)."""
    from ballast.testing import agent_image as image

    try:
        return image.build()
    except image.ImageUnavailable as exc:
        missing_part(str(exc))


@pytest.fixture(scope="session")
def agent_overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-overlay")


@pytest.fixture
def install_agent(guest_cp: ControlPlane, agent_image: Any, agent_overlay: Path) -> Callable[[Guest], Any]:
    """``install_agent(guest)``: the image in the guest, the shipped agent install applied (kustomize, image
    replaced), and the agent's pod on the guest ready; returns that pod. The install stays for later tests
    (``clean_pods`` keeps ``ballast-system``); ``remove_agent`` takes it away."""

    def install(guest: Guest) -> Any:
        guest.ensure_image(agent_image.archive, agent_image.ref, agent_image.digest)
        guest_agent.install_agent(guest_cp, agent_overlay, agent_image.ref)
        return guest_agent.wait_agent_ready(guest_cp, guest.name)

    return install


@pytest.fixture
def remove_agent(guest_cp: ControlPlane, agent_image: Any, agent_overlay: Path) -> Callable[[], None]:
    return lambda: guest_agent.uninstall_agent(guest_cp, agent_overlay, agent_image.ref)
