"""The state words of nodes and jobs, their orders and a job's sentence (``words``): the `nodes`
command, the fleet page, `StreamJobs` and the `jobs` command, ``/metrics``, remote write, the history and replay all
say a state as this room does. It imports nothing of the collector: every room that says a state
imports it downward (``ingest/shown_state.py`` applies it to a node the collector holds).

A node's one state word. The detector's verdict says what the node's GPUs do while its reports come; two facts it cannot
see override it. A node silent for ``[alerts] node_down_seconds`` is `down` (its last verdict
says nothing of now; the views that show it say when it was last heard): the one threshold, which
``NodeDown`` fires on too (``alerts/report_rules.py``). A node without a GPU
is `no-gpu` rather than `idle` (nothing there can wait for data). A node that said hello but
sent no report yet is `new`. A node whose agent said goodbye (it moved to another collector,
its routing key ranks that one first) is `moved` until it connects here again: not down. One
whose agent said goodbye because it stopped cleanly (``--max-reports`` done, SIGTERM) is
`stopped` until it connects again: not down either. Any
other state, one the detector adds later included, passes through as the detector says it.

A job's word is its roll-up verdict's (``jobs/verdict.py``); the fleet page shows `down` for
a job none of whose nodes reported within the detector's window (``words.job_shown_state``).
"""
