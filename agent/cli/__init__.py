"""The `nodeagent` command line: the group (`main.py`), the options every command shares, and one
module per command (run, sample, record, top, diag)."""
