"""Tests on guest nodes: real nodes as QEMU guests (cgroup v2, systemd), ``ballast.testing.guest``."""
