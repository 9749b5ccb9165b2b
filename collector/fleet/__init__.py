"""One view across shards (a shard: a worker behind a front, or a collector of `[fleet] collectors`),
their answers merged into one as one collector would give it.

``fanout`` asks every shard at once within one timeout (a `LOCAL_HEADER` call answers for
itself only); ``merge`` merges Query answers (the freshest node, the firing alert, the widest job
verdict, summed totals, history rows; the ranks in ``collector/merge_rules.py``);
``answer_pages`` cuts an answer into pages of bounded bytes; ``stream_merge`` merges shards'
streams page by page, k-way by key; ``page_merge`` merges the fleet page's JSON and ``/metrics``
text; ``fleet_pages`` merges the page's ``/api`` with `[fleet] collectors`; ``page_bridge`` is the
HTTP thread's one way to the loop that asks the shards; ``config`` reads `[fleet]`. A shard that
does not answer is marked and the merge goes on without it."""
