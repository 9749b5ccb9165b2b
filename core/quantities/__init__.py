"""Numbers with units: ``units`` (link rates, durations) and ``rates`` (counters to rates: resets
and saturation, the disk busy ratio, CPU time shares, a link's capacity for bad readings; the
only place a counter's increase is worked out)."""
