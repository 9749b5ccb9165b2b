"""Prometheus exposition, shared by the agent's ``/metrics`` and the collector's: the families built
from a report (dcgm-exporter's ``dcgm``, MIG instances among them; ``gpu_health``: the fabric,
Xid counters, suspect readings; ``gpu_shares``: each process's and pod's share of a shared GPU;
node_exporter's ``node``; remote write uses them too), the text format written directly
(``text``) and the small HTTP server (``http_server``; its connection slots and their deadlines
in ``http_slots``, one connection's requests in ``http_connection``, what goes back in
``http_reply``)."""
