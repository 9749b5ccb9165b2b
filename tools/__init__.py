"""Tools on top of both programs: ``simulator/`` (a simulated training node), ``loadgen.py`` (the
load generator), ``demo.py``, ``accuracy.py`` (the detector scored against the simulator's
labelled suite), ``lab_traces.py`` (the labs' recorded traces and labels), ``history_seed.py``
(days of minutes written through the store, for the query bench and tests) and ``ingest_rig.py``
(the ingest path in one process, each stage told to a meter, for the bench and the cost gate).
They may import the agent, the collector and the core; nothing below imports them except the
command lines that offer them (``--simulate``, ``nodeagent-collector demo`` and ``loadgen``)."""
