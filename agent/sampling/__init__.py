"""One tick of the node: ``sampler`` (runs each enabled source and assembles the report),
``report_source`` (the `ReportSource` protocol, sampler or simulator, and `ReportSequence`, which
stamps epoch and seq), ``source_reasons`` (each GPU's computing source in words, on the wire when
it says something new and once a minute)."""
