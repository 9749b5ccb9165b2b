"""The gRPC transport: targets, channel options, TLS material and tokens, the loopback rule."""
