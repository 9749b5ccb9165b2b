"""One view across shards (a shard: a worker behind a front, or a collector of `[fleet] collectors`),
their answers merged into one as one collector would give it.

``fanout`` asks every shard at once within one timeout (a `LOCAL_HEADER` call answers for
itself only) and says which did not answer; ``stream_merge`` merges their streams
(``StreamNodes``, ``StreamAlerts``, ``StreamJobs``, ``StreamJobTotals``, ``StreamHistory``) page by
page, k-way by key, in pages of bounded bytes cut by ``answer_pages``; ``merge`` makes each key's
copies one (the freshest node, the firing alert, the widest job verdict, summed totals, history
rows, the ``Ledger``'s rows) through the one pick of the copy that wins (``merge.pick_winners``, for
both forms); ``winning_copy`` holds the rules of which shard's copy of a node or job wins and in
what order merged items are listed (an alert's own in ``alerts/alert.py``); ``page_merge`` does
the same for the fleet page's JSON and ``/metrics`` text (the ``Page`` RPC's answers);
``fleet_pages`` merges the page's ``/api`` with `[fleet] collectors`; ``page_bridge`` is the HTTP
thread's one way to the loop that asks the shards; ``config`` reads `[fleet]`. A shard that does
not answer is marked in the merged answer and the merge goes on without it."""
