"""Getting reports to a collector: the bounded spool (``spool``) and the sender that drains it over
one gRPC stream (``sender``, what it logs in ``sender_log``); drops that may have reached the
collector wait for its word in ``unresolved``. With a directory the spool is also on disk, one
module per concern: ``segment_store`` (appending, deleting, the bound on disk; it opens the
design), ``record`` (a record's bytes), ``segment_file`` (a segment's name and size),
``state_file`` (``state.json``), ``recovery`` (reading it all back at start) and ``disk_io`` (the
writes that reach the device). Guarantees: docs/delivery.md."""
