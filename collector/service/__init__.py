"""The collector's composition root: one process assembled, run and stopped. ``builder.py``
(`build_collector`, `build_ingest`: the store, alerting, ingest, the job stage, remote write and
the access policy, every object given its collaborators through its constructor, read top to
bottom), ``server_config.py`` (`ServerConfig`), ``server.py`` (`CollectorServer`: what the
builder made, with queries, the HTTP pages and the fleet fan-out, started and stopped in order),
``grpc_server.py`` (the one builder of the gRPC server a collector and a front both serve),
``run.py`` (`run_server`: one process until SIGTERM, for ``serve --workers 1`` and each worker)."""
