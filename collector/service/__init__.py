"""The collector's composition root: one process assembled, run and stopped."""
