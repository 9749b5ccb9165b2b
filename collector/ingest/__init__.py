"""The collector's way in: the gRPC server (``server``: ingest stream, query and health services,
roles and stream bounds), the per-report path (``intake``: deduplicate, update the node, hand the
report to the stages, ``report_stages``: rules, detector, job roll-up, signals, in the order replay
follows too; then timeline and history), what it holds of each node and stream
(``node_state``, with the node and seq bounds), and the flush that makes it durable and then
acknowledges (``flush``, with ``flush_stats``), and the state word of a node it holds
(``shown_state``, in the words of ``collector/states/``). The store, the history and the query service have
rooms of their own beside this one."""
