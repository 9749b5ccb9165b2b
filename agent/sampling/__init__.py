"""One tick of the node: the sampler that runs each enabled source, the report sequence (epoch,
seq), and the cheap kernel-file reads the sources share."""
