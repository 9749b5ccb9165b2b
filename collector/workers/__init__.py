"""One collector on every core of its machine: ``serve --workers N`` (N > 1).

The ``serve`` process becomes a front: it spawns N worker processes (``supervisor``), each a full
``CollectorServer`` with its own SQLite database, agent port and a unix socket for the front
(``worker_args``, ``worker_main``); it sends each agent's hello to the worker that owns its node
(``front``: status UNAVAILABLE with the owner's port in a trailer), and answers queries and the
HTTP listener by asking every worker and merging (``front``, ``front_http``, with
``nodeagent.collector.fleet``). N == 1 is the single process of before: none of this runs.
"""
