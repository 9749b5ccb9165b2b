"""The agent as a service: the daemon (`daemon.py`: the sampling loop, delivery, /metrics, signals
and shutdown) and what it tells systemd (`sd_notify.py`: `READY=1`, `WATCHDOG=1`, `STOPPING=1`)."""
