"""The `nodeagent-collector` command line: ``main.py`` (the group; each command's module imported
when it is named, so `serve` carries none of the others' nor the tools), one module per command
or pair of commands: ``serve.py``, ``nodes.py`` (`nodes`, `alerts`, `forget`), ``history.py``
(`history`, `reset-history`), ``jobs.py``, ``ledger.py`` (table, JSON, CSV), ``replay.py``,
``demo.py`` (`demo`, `loadgen`: the only one that imports the tools); ``client.py``: the
query commands' side, with the operator's credentials, several collectors asked at once and merged."""
