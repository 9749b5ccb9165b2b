"""Getting reports to a collector: the bounded spool (``spool``), its on-disk segments (``segments``)
and the sender that drains it over one gRPC stream (``sender``). Guarantees: docs/delivery.md."""
