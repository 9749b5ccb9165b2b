"""One view across shards: several collectors (or one collector's workers) asked at once and
their answers merged into one.

``fanout`` asks every shard's Query service at once within one timeout and says which did not
answer; ``merge`` makes one ``ListNodes``/``ListAlerts``/``ListJobs``/``Jobs``/``History`` answer of
theirs; ``page_merge`` does the same for the fleet page's JSON and for ``/metrics`` text (the
``Page`` RPC's answers); ``winning_copy`` holds their rules of which shard's copy wins. A shard
that does not answer is marked in the merged answer and the merge goes on without it.
"""
