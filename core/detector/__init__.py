"""The data-starvation detector: reports in, a verdict per GPU and per node out; its thresholds
(``config``), the window over each GPU (``window``), node-wide evidence (``node_evidence``), each GPU's
state (``gpu_track``), the per-node roll-up (``node``) and the verdict records (``verdict``)."""
