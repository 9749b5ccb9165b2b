"""Getting reports to a collector: at least once, acknowledged only once durable, deduplicated to
exactly once per (node, epoch, seq) by the collector (docs/delivery.md).

``spool`` (bounded by bytes and age: the reports in seq order, their mirror on disk) and the
``sender`` that drains it (which collector and when: reconnects, rendezvous failover by node id,
a front's redirect followed once; what it logs in ``sender_log``). ``stream_session``: one
stream as a session (channel, hello, its tasks, the move home and the clean stop with goodbye,
how it ended); ``stream_status``: a stream's start and end read for their real reason;
``moves``: a failover's parts (the preferred collectors' probe, goodbye and the wait for acks,
`ResentCount`); ``unresolved``: drops that may have reached the collector, until it says.
On disk, one module per concern: ``segment_store`` (appending, syncing, deleting; the bound on
disk), ``record`` (a record's bytes), ``segment_file`` (a segment's name and size),
``state_file`` (``state.json``), ``recovery`` (reading it back at start, counting what was lost)
and ``disk_io`` (the writes that reach the device)."""
