"""What a fix is worth: for each starved node and each slowed job, the speed-up if its bottleneck
stopped holding the GPUs back, at a named highway too, and the GPU-hours and money a day that
would stop being lost (docs/jobs.md#what-a-fix-is-worth).

``targets.py`` reads `[payoff]` (the highways a prediction is also made at); ``model.py`` is the
step model and the prediction, from the judgement's outputs alone, made per evaluation;
``worth.py`` prices each as the ledger prices, per query; ``families.py``: the
`nodeagent_fix_worth_*` families on ``/metrics``."""
