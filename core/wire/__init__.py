"""The rules of the wire both sides apply: ``identity`` (what a node id may be), ``validate`` (what
the collector refuses, the job bounds among it, and the agent's repair of it), ``proof`` (the
collector's check of a report from its bytes, walking it with ``validate`` only where that cannot
prove it valid), ``framing`` (the
ingest method and the report frame), ``clock_events`` (clock-event reason bits and names),
``fabric`` (the NVLink fabric's states and what makes it unusable) and ``trace`` (the JSON Lines
trace format)."""
