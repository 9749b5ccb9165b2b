"""The kubelet's pod-resources API v1, generated from api.proto (see README.md here)."""
