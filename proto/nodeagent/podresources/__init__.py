"""Vendored Kubernetes APIs the agent reads (kubelet's pod-resources)."""
