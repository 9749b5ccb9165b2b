"""The collector's SQLite store, the only code that touches SQLite: the file and its mode,
transactions, the node, report, history and alert tables."""
