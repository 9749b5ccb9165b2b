"""How the programs reach others: the gRPC transport (targets, channel options, TLS material and
tokens, the loopback rule) and the backoff every retry waits by (``backoff``)."""
