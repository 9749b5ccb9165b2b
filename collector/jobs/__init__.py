"""Jobs, not nodes: the roll-up that joins the nodes of one multi-node job, names the node that
holds it back and why, and counts what the wait costs every GPU of the job (docs/jobs.md). Two
stages, each keyed by its own key, joined in one process by ``rollup`` (`JobRollup`).

The node stage, ``node_stage`` (where a node lives): one `JobStep` per job per window step, a
`JobLeave` when it stops; the owners' waits applied to its detector. The job stage, ``job_stage``
(on the job's owner): each step judged once over all its nodes, a `JobWait` to each member.
Between them ``messages`` and their wire form ``wire``. The judgement: ``membership`` (which
nodes, GPUs and ranks belong to a job), ``node_values`` (what a node shows at a step),
``robust`` (median, MAD, modified z-score), ``straggler`` (which node holds the job back),
``link`` (a degraded link of one node), ``nic_peaks`` (the NICs that carry the collective),
``wait_share`` (the job's wait share and each GPU's loss), ``judge`` (the rules in order).
What comes out: ``signals`` (`JobStraggler`), ``membership_alerts`` (who joined a job),
``verdict`` (`JobVerdict`), ``families`` (the `nodeagent_job_*` families); ``config``: the
thresholds."""
