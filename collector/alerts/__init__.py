"""Alerts: ``alert`` (the one alert shape, `Alert`, and its conversions at the edges: page JSON and
the outbox, the Query record, the table row), ``alerting`` (what the collector calls: rules per
node, the node-down watch, the book), ``node_down`` (`NodeDown` for silent nodes, `NodeStopped`
for clean stops), ``book`` (lifecycles persisted, transitions handed to sinks once durable),
``lifecycle`` (the firing, updated and resolved rule the book and replay share), ``store_failing``
(`CollectorStoreFailing`, straight to the sinks while the store cannot commit), ``report_rules``
and ``rule_state`` (hardware and health rules and what they remember), ``config`` (`[alerts]`) and
``sinks/``."""
