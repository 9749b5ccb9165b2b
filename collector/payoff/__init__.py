"""What a fix is worth: for each starved node and each slowed job, the speed-up if its bottleneck
stopped holding the GPUs back, at a named highway too (``[payoff]`` targets), and the GPU-hours
and money a day that would stop being lost (docs/jobs.md#what-a-fix-is-worth).

``targets.py`` reads ``[payoff]``; ``model.py`` is the step model and the prediction, from the
judgement's outputs alone (a node's verdict, a job's judgement), made per evaluation and priced
per query."""
