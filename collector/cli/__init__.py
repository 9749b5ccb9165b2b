"""The `nodeagent-collector` command line: the group (`main.py`, each command imported when it is
named), one module per command or pair of commands (`serve`; `nodes` and `alerts`; `demo` and
`loadgen`, the only one that offers the tools; `replay`; `history` and `jobs`) and the query
commands' client."""
