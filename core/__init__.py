"""What the agent and the collector share, and the only code both may import: the wire rules
(``wire``, the trace format too), the transport (``transport``), the settings framework
(``settings``), numbers with units and counter rates (``quantities``), the detector (``detector``),
Prometheus exposition (``exposition``: families, text, the small HTTP server) and what both programs
share at their edges (``program``: errors, logs, lean imports). It imports neither program."""
