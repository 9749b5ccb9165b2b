"""One collector on every core of its machine: ``nodeagent-collector serve --workers N``
(docs/fleet-scale.md).

The serve process becomes a front (``serve_front``): it spawns N worker processes
(``supervisor``: starts, restarts and drains them), each a full `CollectorServer` with its own
database, agent port and unix socket (``worker_args``, ``worker_main``). ``front``: each agent's
hello sent to the worker that owns its node id (status UNAVAILABLE with the owner's port in a
trailer); ``front_query`` and ``front_http``: queries and the HTTP listener answered by asking
every worker and merging (with ``nodeagent.collector.fleet``); ``front_metrics``: the front's own
families. With one worker none of this runs."""
