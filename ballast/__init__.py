"""Ballast: load-aware and topology-aware scheduling for Kubernetes.

One package: the ``ballast`` command (``cli``) with a subcommand per program (``extender``, ``annotator``,
``rebalancer``, ``agent``), the pure load model (``model``), the contracts with the cluster (``contract``),
the Kubernetes client (``kube``), what every program shares (``program``), and ``testing`` for the tests
and benchmarks. Imports only the standard library, so ``python3 -m ballast.testing.controlplane check``
runs before any install.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ballast")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
