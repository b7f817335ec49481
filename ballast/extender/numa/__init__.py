"""NUMA placement in the extender: whether a pod that needs aligned resources fits a node's zones, the
score that follows, and at bind the zones it takes. Two kinds of topology object, each with its pure
arithmetic apart from the code that reads the cluster:

Crane's ``topology.crane.io`` NodeResourceTopology (nodes where Ballast's agent pins CPUs):

- ``crane``        pure: the NRT parsed once, what a pod needs, fit, score, zone usage, the result.
- ``check``        the NUMA side of filter and prioritize (hands community nodes to ``community_check``),
  and what filter learnt for bind.
- ``crane_bind``   pre-bind: choose zones, assume them, write (and seal) the topology result.

The community ``topology.node.k8s.io/v1alpha2`` one (the kubelet's own CPU and Topology Manager):

- ``community``          pure: parsing, what the kubelet aligns, single-numa-node fit per scope, score.
- ``community_assumed``  zones bind chose that the published ``available`` does not count yet.
- ``community_view``     the objects as their watch delivers them, malformed ones, the assumed record.
- ``community_check``    the v1alpha2 side of filter, prioritize and bind.

The verbs (``ballast.extender.extender``, ``ballast.extender.bind``) import this package; it imports nothing
of
the HTTP layer.
"""
