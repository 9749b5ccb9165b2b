"""What the agent and the collector share, and the only code both may import: the wire rules
(``wire``), the transport (``transport``), the settings framework (``settings``), units, rates, the
trace format, logging and the small /metrics HTTP server. It imports neither program."""
