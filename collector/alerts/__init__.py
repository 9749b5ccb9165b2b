"""Alerts: the one alert shape and its conversions at the edges (``alert``), the front the
collector talks to (``front``), the book that turns signals into lifecycles and persists them
(``book``), the report rules and what they remember (``report_rules``, ``rule_state``), their
thresholds (``config``), the signal type (``signals``) and the sinks."""
