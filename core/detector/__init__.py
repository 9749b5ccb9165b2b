"""The data-starvation detector: reports in, a verdict per GPU and per node out; the collector and
``nodeagent top`` both run it (docs/detector.md).

One module per step of the rule chain, in the order it runs: ``gate`` (1: assigned, lost,
warm-up), ``idle_share`` (2: busy share, short gaps), ``throttle`` and ``causes`` (3: throttled,
then interconnect, network, storage, h2d, cpu, unknown, first match wins, with the node-wide
evidence of ``node_evidence``), ``hysteresis`` (4: enter, stay, leave, tier) and ``node`` (5: the
roll-up per node, one `NodeDetector` each). Beside them: ``gpu_track`` (one GPU's state and the
order the steps run in), ``window`` (the steps' sums), ``verdict`` (the records, the one
majority rule) and ``config`` (the thresholds); ``power_share`` (the computing share from power
on GPUs without GPM, for the job roll-up) and ``computing_source`` (which estimator follows each
GPU's source); ``mig`` (each MIG instance followed as a GPU); ``waiting`` (GPUs the job roll-up
says wait on another node). What others read of its output: ``alert_signals`` (what rules hand
to the alert book) and ``verdict_words`` (a verdict as the sentence both views show). Its windows
live in memory and are rebuilt from new reports after a restart."""
