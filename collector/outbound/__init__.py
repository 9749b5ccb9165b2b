"""What the collector sends to services of others over HTTP: one POST and what its answer means
(``post``), shared by the alert sinks and remote write, each with its own retry loop."""
