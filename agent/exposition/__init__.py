"""The agent's own ``/metrics``: ``page.py`` (the page of the last tick: dcgm-exporter's and
node_exporter's families from ``core/exposition/``, and the agent's own), ``telemetry.py`` (what
each tick hands to the page, apart so that a daemon without ``--metrics-listen`` loads no page),
``process.py`` (``process_*`` as prometheus_client names them, from /proc), ``pod_resources.py``
(the kubelet's pod of each GPU, for the page's labels, and each tick's `JobRef.k8s_namespace`
where one namespace holds the GPU). Served by ``core/exposition/http_server.py``."""
