"""The collector's composition root: one process assembled (``builder``: every object given its
collaborators through its constructor, from ``server_config``'s ``ServerConfig``), run and stopped
(``server``, ``run``), its gRPC server built alike for a collector and a front (``grpc_server``)."""
