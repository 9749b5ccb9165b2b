"""The collector's SQLite store, the only package that imports sqlite3 (``tests/core/test_layers.py``).

``database``: the file, its transactions and the ``Store`` that holds the tables on its one
connection (``StoreWriter``: the thread every call runs on); ``reader``: the queries' read-only
connections on threads of their own, each read within a deadline (``StoreReader``); ``nodes``:
each node's row and its watermarks; ``history_tables``: the per-minute rows and the stored
reports; ``alert_tables``: the alert book's rows and outbox; ``files``: the file's mode."""
