"""One view across shards (a shard: a worker behind a front, or a collector of `[fleet] collectors`),
their answers merged into one as one collector would give it.

``fanout`` asks every shard at once within one timeout (a `LOCAL_HEADER` call answers for
itself only); ``merge`` merges Query answers (the freshest node, the firing alert, the widest job
verdict, summed totals, history rows); ``winning_copy`` holds the rules of which shard's copy of
a node or job wins and in what order merged items are listed (an alert's own in
``alerts/alert.py``); ``answer_pages`` cuts an answer into pages of bounded bytes;
``stream_merge`` merges shards' streams page by page, k-way by key; ``page_merge`` merges the
fleet page's JSON and ``/metrics`` text; ``fleet_pages`` merges the page's ``/api`` with
`[fleet] collectors`; ``page_bridge`` is the HTTP thread's one way to the loop that asks the
shards; ``config`` reads `[fleet]`. A shard that does not answer is marked and the merge goes on
without it."""
