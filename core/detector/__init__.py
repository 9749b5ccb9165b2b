"""The data-starvation detector: reports in, a verdict per GPU and per node out.

One module per step of the rule chain, in the order it runs: ``gate`` (1: assigned, lost,
warm-up), ``idle_share`` (2: busy share, short gaps), ``throttle`` and ``causes`` (3: throttled,
then interconnect, network, storage, h2d, cpu, unknown, first match wins, with the node-wide
evidence of ``node_evidence``), ``hysteresis`` (4: enter, stay, leave, tier) and ``node`` (5: the
roll-up per node). Beside them: ``track_state`` (one GPU's state, which the steps take: at the
bottom, they import it and never ``gpu_track``), ``gpu_track`` (the order the steps run in over
it), ``step`` (one step of the window), ``window`` (the steps' sums), ``verdict`` (the records)
and ``config`` (the thresholds). What others read of its output: ``alert_signals`` (what rules
hand to the alert book) and ``verdict_words`` (a verdict as the sentence both views show).
"""
