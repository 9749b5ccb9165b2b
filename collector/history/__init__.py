"""The per-minute history of each node: the rollup of reports into minutes and what a flush writes
of it."""
