"""A loopback Kubernetes control plane (``controlplane``) and the tests that run the real kube-scheduler."""
