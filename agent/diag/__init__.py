"""``nodeagent diag``: a one-shot health check of the node against what was rented.

``command.diag_command`` is the CLI; ``run.run_diag(DiagOptions)`` the same without it. Checks
live in ``checks/`` (one module per area), expectations in ``profile.py`` (built-in profiles in
``profiles/``), the storage probe in ``probe.py``.
"""
