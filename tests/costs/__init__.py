"""The cost gate: work counted per tick and per report, held under ``budgets.toml`` (issue 44)."""
