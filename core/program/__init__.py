"""What both programs share at their edges: ``command_line`` (one-line errors and exit statuses),
``log`` (structured logs), ``safe_text`` (names from the wire made harmless for tables, logs and
CSV), ``lean_imports`` (libraries imported without the optional modules the programs never use),
``malloc_arenas`` (a daemon's threads sharing two glibc malloc arenas), ``lock_file`` (one owner
per spool directory or database), ``child_restart`` (the collector's children: one restart
policy, dying with the parent)."""
