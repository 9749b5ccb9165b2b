"""``nodeagent diag``: a one-shot health check of the node against what was rented (docs/diag.md).

Its command line is ``agent/cli/diag.py``; ``run.run_diag`` runs it without one. ``profile.py``:
expectations from a profile and flags (built-in profiles in ``profiles/``, read through
``core/settings/readers.py``); ``observe.py``: two samples a window apart; ``run.py``: one run;
``kernel_log.py``: Xids from the kernel log; ``probe.py``: the storage probe (``--probe``);
``model.py``: results, verdict, exit status; ``render.py``: the table and JSON. The checks live in
``checks/``, one module per area."""
