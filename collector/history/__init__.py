"""The per-minute history of each node: ``minutes`` (a minute row, its columns and how they merge
into steps), ``node_history`` (each node's open minute as reports arrive, and what a flush takes of it),
``node_rates`` (the node row's rates between two reports) and ``batch`` (what one flush writes).
The tables themselves are the store's (``collector/store/history_tables.py``)."""
