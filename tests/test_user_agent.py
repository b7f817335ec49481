"""The extender's API calls name it in their User-Agent, on both paths (official client and bind's lean
client), so API audit logs tell it apart from the annotator, the agent and anything else."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson

from ballast.testing.controlplane import free_port
from ballast.testing.fakekube import FakeKube
from ballast.testing.parts import POLICY_FILE, wait_for


def test_the_extender_names_itself_on_every_call(fake_kube: FakeKube, kubeconfig: Path) -> None:
    pod = fake_kube.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"schedulerName": "ballast-scheduler", "containers": [{"name": "c", "image": "x"}]},
        }
    )
    port = free_port()
    argv = [sys.executable, "-m", "ballast", "extender", "--host", "127.0.0.1", "--port", str(port),
            "--policy", str(POLICY_FILE), "--kubeconfig", str(kubeconfig), "--policy-poll", "0"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, timeout=60, what="the extender ready")
        body = {"PodName": "web", "PodNamespace": "shop", "PodUID": pod["metadata"]["uid"], "Node": "n1"}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/bind", data=orjson.dumps(body), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
    finally:
        proc.terminate()
        proc.wait(10)
    assert fake_kube.find_requests("POST", r"/binding$"), "the bind reached the API"
    seen = {r.headers.get("User-Agent", "") for r in fake_kube.requests}
    assert seen and all(ua.startswith("ballast-extender/") for ua in seen), seen
