"""``nodeagent diag``: a one-shot health check of the node against what was rented.

Its command line is ``agent/cli/diag.py``; ``run.run_diag(DiagOptions)`` runs it without one. Checks
live in ``checks/`` (one module per area), expectations in ``profile.py`` (built-in profiles in
``profiles/``), the storage probe in ``probe.py``.
"""
