"""Tools on top of both programs: the simulator, the load generator, the demo and the accuracy
scoring. They may import the agent, the collector and the core; nothing below imports them except
the command lines that offer them (``--simulate``, ``demo``, ``loadgen``)."""
