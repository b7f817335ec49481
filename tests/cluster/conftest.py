"""pytest fixtures around :mod:`ballast.testing.controlplane`.

``control_plane`` is one etcd + kube-apiserver for the whole session; ``cluster`` hands it to a test and,
after it, stops the test's kube-scheduler and deletes every pod and node,
so tests start from an empty cluster.
Without the binaries, etcd or openssl the tests skip with the reason; under ``CI=true`` they fail instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ballast.testing.binaries import MissingPiece, check_available
from ballast.testing.controlplane import ControlPlane, delete_all
from ballast.testing.parts import missing_part


def require_control_plane() -> None:
    """Skip (fail under ``CI=true``) unless every piece of the control plane is available."""
    try:
        check_available()
    except MissingPiece as exc:
        missing_part(str(exc))


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    require_control_plane()
    with ControlPlane() as cp:
        yield cp


@pytest.fixture
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    yield control_plane
    control_plane.stop_scheduler()
    delete_all(control_plane.core())


@pytest.fixture
def clean(cluster: ControlPlane) -> Iterator[ControlPlane]:
    """The cluster without earlier tests' Events in ``default``: a rebalancer rebuilds its promises from
    them."""
    cluster.kubectl("delete", "events", "--all", "-n", "default", "--wait=true")
    yield cluster


@pytest.fixture
def started(clean: ControlPlane) -> Iterator[list[Any]]:
    """What a test starts (rebalancers, fault proxies: anything with ``close()``), closed after it, the
    last started first."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        thing.close()
