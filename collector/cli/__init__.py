"""The `nodeagent-collector` command line: the group (`main.py`, each command imported when it is
named), the query commands' client, `replay`, `history` and `jobs`."""
