"""The node's CPU topology: the pure model, read from sysfs, and the CPUs the kubelet holds back."""
