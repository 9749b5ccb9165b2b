"""The collector's way in: the gRPC server (``server``), the per-report path (``report_path``:
validate, deduplicate, acknowledge once durable), the SQLite store (``store``, the only module that
touches SQLite), its flush statistics and the query service."""
