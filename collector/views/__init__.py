"""What operators and scrapers read of the collector (docs/views.md). ``fleet_state`` (`FleetState`:
what the views read of one process, a read-only protocol the composition root meets),
``metrics`` (``/metrics``, ``/healthz``), ``metrics_fleet`` (the per-node and per-GPU families and
the fleet summary), ``metrics_config`` (`[metrics]`: which families the page carries),
``local_pages`` (what the HTTP listener answers, for the `Page` RPC too), ``fleet_table`` (the
rows of `nodes`, `alerts` and the page), ``fleet_page`` (the fleet page and its ``/api`` JSON),
``job_pages`` (the job pages' JSON), ``page_rows`` (a node's row in that JSON, shared by the
fleet, node and job pages), ``fleet_assets`` with ``fleet_static/`` (the HTML shells, stylesheet
and script), ``evidence_text`` (a verdict's evidence in words), ``ledger_page`` and ``ledger_html`` (the
``/ledger`` page, rendered on the server)."""
