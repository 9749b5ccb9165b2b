"""What both programs share at their edges: one-line errors and exit statuses, structured logs,
libraries imported lean."""
