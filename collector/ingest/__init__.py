"""The collector's way in: the gRPC server (``server``: ingest stream, query and health services,
roles and stream bounds), the per-report path (``report_path``: validate, deduplicate, acknowledge
once durable) and its flush statistics. The store, the history and the query service have rooms
of their own beside this one."""
