"""The collector's composition root: one process assembled, run and stopped. ``server.py``
(`CollectorServer`: the store, alerting, ingest, the job stage, remote write, queries, the HTTP
pages and the fleet fan-out wired together, started and stopped in order), ``grpc_server.py`` (the
one builder of the gRPC server a collector and a front both serve), ``run.py`` (`run_server`: one
process until SIGTERM, for ``serve --workers 1`` and each worker)."""
