"""Jobs, not nodes: the roll-up that joins the nodes of one multi-node job, names the node that
holds it back and why, and counts what the wait costs every GPU of the job (docs/jobs.md)."""
