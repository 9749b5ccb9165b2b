"""The settings framework: every flag of a command from the command line, ``NODEAGENT_*`` variables or
a TOML file (``framework``, ``values``), ``config show`` (``show``), the one TOML reader and link-rate
parser of every config file (``readers``) and strict checks of a table (``tables``)."""
