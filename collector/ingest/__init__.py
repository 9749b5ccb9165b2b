"""The collector's way in. ``streams`` (the Ingest gRPC service: one task per agent stream,
validation, goodbye, roles, stream bounds), ``hello`` (the start of every stream, at a collector
and a front alike), ``source_streams`` (streams per source address), ``intake`` (`Ingest`:
deduplicate on (node, epoch, seq), update the node, hand each new report to its stages, the
timeline, the history and remote write), ``report_stages`` (a report's stages in one order: rules,
detector, job roll-up, signals; replay follows the same), ``node_state`` (what is held per node
and stream, its bounds), ``shown_state`` (the state word of a node it holds, in the words of
``collector/states/``), ``clock_bounds`` (a report's time against the collector's clock),
``flush`` (one transaction of what changed, acknowledged once durable; with ``flush_stats``),
``retire`` (forgotten or long-silent nodes removed in one flush), ``resting`` (a silent node
shrunk to what the views show), ``history_guard`` (history that fails stops for the run, ingest
goes on) and ``node_timeline`` (each node's last two hours in memory)."""
