"""The `nodeagent` command line: ``main.py`` (the group; each command's module imported only when
the command line names it, so ``run`` carries none of the others'; asyncio and hashlib imported
first, without OpenSSL, by ``agent/__init__.py``), ``options.py`` (the options several commands
share: the sources' ``--collector.NAME`` flags and their settings), and one module per command:
``run.py`` (``nodeagent run``: its flags and checks, the spool, the source, live or ``--simulate``
with ``--set``, the finite run's JSON line and exit status), ``sample.py``, ``record.py``,
``top.py`` (the loop, keys, the in-process detector) and ``diag.py``."""
