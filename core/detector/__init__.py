"""The data-starvation detector: reports in, a verdict per GPU and per node out; the collector and
``nodeagent top`` both run it (docs/detector.md). Per GPU, per report and then per evaluation
step, ``node`` drives it (one `NodeDetector` per node) and ``gpu_track`` runs the steps in this order over one GPU's
state (``track_state``, at the bottom: the steps import it, never ``gpu_track``), thresholds in ``config``:

1. ``gate`` (`admit`, `new_job`): a lost GPU is `lost`; memory at the idle baseline and no
   process is `idle`, not counted in ratios; a GPU newly assigned, or taken by another job, is in
   `warmup`.
2. ``idle_share`` (`busy_ratio`): `1 - utilization`, or GPM SM activity on Hopper and newer;
   near-idle runs held apart as a possible gap and dropped when shorter. Beside it, on GPUs
   without GPM, ``power_share`` keeps the computing share from power for the job roll-up, and
   ``computing_source`` says which estimator follows each GPU's source and where it cannot tell
   (the wait share is then unknown, with its reason); the node's own verdicts do not use it.
3. Cause, first match wins: ``throttle`` (clock-event reasons set for enough steps make the GPU
   `throttled`), then ``causes``: each step's peer-link time splits idle time into interconnect
   and data waiting (``window`` sums the last steps, each a ``step``), and a starved step votes for network,
   storage, h2d (PCIe receive near capacity), a network receive plateau unless busy cores
   explain the wait, cpu, else unknown (node-wide counters from ``node_evidence``).
4. ``hysteresis`` (`evaluate`): enter `starved` when the idle share is above the moderate tier
   by more than the standard error for `enter_steps` steps (synchronized idleness across the
   node's GPUs is `interconnect`); the cause changes by the window's majority (one tie rule:
   the latest step's cause, then the order of `CAUSES`); calm for `exit_seconds` leaves;
   `evidence` keeps the values that decided it.
5. ``node`` (the roll-up): the node's state, its majority cause, the starvation ratios weighted
   by window time; the records in ``verdict``.

Beside the chain: ``mig`` (each MIG instance followed as a GPU, its GPU's verdict their roll-up
by slices), ``waiting`` (GPUs the job roll-up says wait on another node of their job, their wait
counted as lost). What others read of its output: ``alert_signals`` (what rules hand to the
alert book) and ``verdict_words`` (a verdict as the sentence both views show). Its windows live
in memory and are rebuilt from new reports after a restart.
"""
