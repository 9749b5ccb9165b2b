"""The collector's SQLite store, the only package that imports sqlite3 (``tests/core/test_layers.py``).

``database``: the lock (one collector per database), the file, its transactions and the `Store`
that holds the tables on its one connection (`StoreWriter`: the thread every write runs on);
``reader``: the queries' read-only connections, each read within a deadline; ``nodes``: each
node's row and its watermarks, checked at load by ``watermark_check``; ``generation``: the commit
count, so commits lost with a deleted ``-wal`` are reported; ``history_tables``: the per-minute
rows and the stored reports; ``ledger_tables``: the ledger's hours and each job's owners;
``job_lists``: a minute's jobs in one column; ``alert_tables``: the alert book's rows and outbox;
``files``: the file's mode.

Kept: a node's row until it is retired (`forget`, or silent `--retire-after-seconds`, 7 days);
the alerts while firing and recently resolved; minutes for `--history-retention-seconds`
(14 days); full reports for `--history-reports-seconds` (1 hour)."""
