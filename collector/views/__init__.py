"""What operators and scrapers read of the collector: `/metrics` and `/healthz`, the fleet page and
its assets, the fleet table, each node's recent timeline."""
