"""pytest fixtures: `fake_kube` (a started FakeKube per test) and `kube_client` (an ApiClient for it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .fake import FakeKube


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    """A fresh fake API server per test; fails the test if the fake itself raised (a bug in the fake)."""
    with FakeKube() as fake:
        yield fake
        assert not fake.bugs, "fakekube raised internally:\n" + "\n".join(fake.bugs)


@pytest.fixture
def kubeconfig(fake_kube: FakeKube, tmp_path: Path) -> Path:
    """A kubeconfig file pointing at `fake_kube`, for components configured from a kubeconfig path."""
    return fake_kube.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_client(kubeconfig: Path) -> Iterator[Any]:
    """`kubernetes.client.ApiClient` loaded from the kubeconfig, as production code builds it."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client
    finally:
        client.close()
