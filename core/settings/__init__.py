"""The settings framework: every flag of a command from the command line, ``NODEAGENT_*`` variables or
a TOML file (``framework``, ``values``), ``config show`` (``show``) and strict reading of a table
(``tables``)."""
