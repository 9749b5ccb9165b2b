"""What the collector sends to services of others over HTTP: ``post`` (one POST over urllib and which
answers retry: no answer, 5xx, 429), shared by the alert sinks and remote write, each with its
own retry loop."""
