"""The collector: receives agents' reports, flags data-starved GPUs, raises alerts."""
