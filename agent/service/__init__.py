"""The agent as a service: what it tells systemd (`READY=1`, `WATCHDOG=1`, `STOPPING=1`)."""
