"""What tests/ and bench/ share: the fake API server, the loopback control plane, real-node and
containerd harnesses, a Prometheus server, and test doubles. Left out of the wheel: it needs pytest and
real binaries. Imports only the standard library here, so ``python3 -m ballast.testing.controlplane
check`` runs before any install."""
