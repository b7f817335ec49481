"""Ballast's extender app for an ASGI server other than the one ``ballast extender`` runs (uvicorn): the
cluster bench serves it with granian to compare the servers in one run.

    granian --interface asgi --factory bench.ballast_asgi:app

Built as ``ballast extender`` builds it (``ballast.extender.cli.run_extender``), from the environment:
``BALLAST_POLICY``, ``BALLAST_KUBECONFIG`` and ``BALLAST_LOG_LEVEL``.
"""

from __future__ import annotations

import os
from typing import Any

from ballast.extender.main import create_app
from ballast.kube.client import Kube, load_api_client
from ballast.model.policy import load_policy
from ballast.program.logs import setup_logging


def app() -> Any:
    setup_logging(os.environ.get("BALLAST_LOG_LEVEL", "info"))
    policy_path = os.environ["BALLAST_POLICY"]
    kube = Kube(load_api_client(os.environ["BALLAST_KUBECONFIG"]))
    return create_app(load_policy(policy_path), policy_path=policy_path, policy_poll_seconds=0, kube=kube)
