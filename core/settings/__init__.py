"""The settings framework: every flag of a command from the command line, ``NODEAGENT_*`` variables or
a TOML file (``framework``, ``values``), ``config show`` (``show``), ``readers`` (the one TOML
reader of every config file and of diag's profiles, and the one link-rate setting parser) and
strict checks of a table's keys and types (``tables``)."""
