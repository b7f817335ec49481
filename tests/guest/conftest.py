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

from collections.abc import Iterator

import pytest

from ballast.testing.binaries import MissingPiece, check_available
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.guest import GuestPool, guest_control_plane, require_guests
from ballast.testing.parts import missing_part

KEEP_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease", "default"}


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
def guests(guest_cp: ControlPlane) -> Iterator[GuestPool]:
    pool = GuestPool(guest_cp)
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
