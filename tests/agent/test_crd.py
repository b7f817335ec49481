"""The NodeResourceTopology CRD manifest: names, scope, columns, and a schema the agent's objects pass."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast.agent.kubelet_config import parse_kubelet_config
from ballast.agent.nrt.crane import build_nrt
from ballast.agent.topology.model import CPUTopology, NUMANode
from ballast.contract.nrt import API_VERSION, GROUP, KIND, NRT_PATH, PLURAL, VERSION

CRD_FILE = Path(__file__).resolve().parents[2] / "scheduler_config" / "crd-noderesourcetopology.yaml"


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_FILE.read_text())


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def violations(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Check ``value`` against the structural-schema subset the API server applies to this CRD."""
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            return [f"{path}: {value!r} is neither an integer nor a string"]
        if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
            return [f"{path}: {value!r} does not match the quantity pattern"]
        return []
    kind = schema.get("type")
    checks = {"object": dict, "array": list, "string": str, "integer": int}
    if kind in checks and (not isinstance(value, checks[kind]) or isinstance(value, bool)):
        return [f"{path}: {value!r} is not of type {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} is not one of {schema['enum']}"]
    found = []
    if kind == "object":
        found += [f"{path}.{k}: required" for k in schema.get("required", []) if k not in value]
        for key, item in value.items():
            if key in schema.get("properties", {}):
                found += violations(schema["properties"][key], item, f"{path}.{key}")
            elif "additionalProperties" in schema:
                found += violations(schema["additionalProperties"], item, f"{path}.{key}")
            elif path != ".metadata":
                found.append(f"{path}.{key}: unknown field (would be pruned)")
    if kind == "array":
        for i, item in enumerate(value):
            found += violations(schema["items"], item, f"{path}[{i}]")
    return found


def test_names_scope_and_version(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == (GROUP, "Cluster")
    assert spec["names"] == {
        "kind": KIND,
        "listKind": f"{KIND}List",
        "plural": PLURAL,
        "singular": "noderesourcetopology",
        "shortNames": ["nrt"],
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
    assert f"{GROUP}/{VERSION}" == API_VERSION
    assert f"/apis/{spec['group']}/{version['name']}/{spec['names']['plural']}" == NRT_PATH
    assert version["subresources"] == {}


def test_printer_columns(crd: dict[str, Any]) -> None:
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in columns] == [
        ("CRANE CPU MANAGER POLICY", ".craneManagerPolicy.cpuManagerPolicy"),
        ("CRANE TOPOLOGY MANAGER POLICY", ".craneManagerPolicy.topologyManagerPolicy"),
        ("AGE", ".metadata.creationTimestamp"),
    ]
    assert columns[2]["type"] == "date"


def test_schema_policies_and_quantities(schema: dict[str, Any]) -> None:
    assert schema["required"] == ["craneManagerPolicy"]
    policy = schema["properties"]["craneManagerPolicy"]
    assert policy["properties"]["cpuManagerPolicy"]["enum"] == ["None", "Static"]
    assert policy["properties"]["topologyManagerPolicy"]["enum"] == ["None", "SingleNUMANodePodLevel"]
    zone = schema["properties"]["zones"]["items"]
    assert zone["properties"]["type"]["enum"] == ["Node", "Socket", "Core"]
    quantity = zone["properties"]["resources"]["properties"]["capacity"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True
    for good in ("4", "4000m", "8Gi", "1e3", "129M", ".5"):
        assert violations(quantity, good) == [], good
    assert violations(quantity, 4) == []
    assert violations(quantity, "4 cores") != []
    assert violations(quantity, 4.5) != []


def test_agent_objects_are_valid(schema: dict[str, Any]) -> None:
    topology = CPUTopology.from_cpus(
        [(c, c % 4, c % 4 // 2, c % 4 // 2) for c in range(8)],
        numa_nodes=[NUMANode(0, 2**30, ((0, 10), (1, 21))), NUMANode(1, 2**30, ((0, 21), (1, 10)))],
    )
    for kubelet in (
        parse_kubelet_config({}),
        parse_kubelet_config(
            {
                "cpuManagerPolicy": "static",
                "reservedSystemCPUs": "0,4",
                "kubeReserved": {"cpu": "500m", "memory": "1Gi", "pid": "100"},
            }
        ),
    ):
        nrt = build_nrt(node_name="n", node_uid="u", topology=topology, kubelet=kubelet)
        assert violations(schema, nrt) == []


def test_the_checker_catches_bad_objects(schema: dict[str, Any]) -> None:
    bad = {
        "craneManagerPolicy": {"cpuManagerPolicy": "Exclusive"},
        "zones": [{"name": "node0", "type": "Numa", "resources": {"capacity": {"cpu": "x"}}}],
        "extra": 1,
    }
    found = violations(schema, bad)
    assert ".craneManagerPolicy.topologyManagerPolicy: required" in found
    assert any("'Exclusive' is not one of" in f for f in found)
    assert any("'Numa' is not one of" in f for f in found)
    assert any("capacity.cpu: 'x' does not match" in f for f in found)
    assert ".extra: unknown field (would be pruned)" in found
