"""One view across shards: several collectors (or one collector's workers) asked at once and
their answers merged into one.

``fanout`` asks every shard's Query service at once within one timeout and says which did not
answer; ``stream_merge`` merges their streams (``StreamNodes``, ``StreamAlerts``, ``StreamJobs``,
``StreamJobTotals``, ``StreamHistory``) page by page, in pages cut by ``answer_pages``, each key's
copies made one by ``merge`` (which merges the ``Ledger``'s rows too, and holds the one pick of
the copy of a key that wins, ``pick_winners``, for both forms); ``page_merge`` does the same for
the fleet page's JSON and for ``/metrics`` text (the ``Page`` RPC's answers), and
``fleet_pages`` serves that page across collectors. A shard that does not answer is marked in the merged answer and
the merge goes on without it.
"""
