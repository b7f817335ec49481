"""Where the NodeResourceTopology lives in the API: crane's CRD
(``scheduler_config/crd-noderesourcetopology.yaml``), cluster-scoped, one object per node named after it.
The agent writes it (``ballast.agent.nrt.publisher``), the extender watches it (``ballast.extender.cache``);
both take its
coordinates from here (``tests/agent/test_crd.py`` checks them against the manifest).
"""

from __future__ import annotations

GROUP = "topology.crane.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeResourceTopology"
PLURAL = "noderesourcetopologies"
NRT_PATH = f"/apis/{API_VERSION}/{PLURAL}"
"""The collection's REST path; ``f"{NRT_PATH}/{node}"`` is one node's object."""

COMMUNITY_GROUP = "topology.node.k8s.io"
COMMUNITY_VERSION = "v1alpha2"
COMMUNITY_API_VERSION = f"{COMMUNITY_GROUP}/{COMMUNITY_VERSION}"
COMMUNITY_NRT_PATH = f"/apis/{COMMUNITY_API_VERSION}/{PLURAL}"
"""The community NodeResourceTopology (k8stopologyawareschedwg/noderesourcetopology-api), published by
nfd-topology-updater, the resource-topology-exporter or the agent with ``--publish community``
(``scheduler_config/crd-noderesourcetopology-v1alpha2.yaml``); same kind and plural as crane's."""
