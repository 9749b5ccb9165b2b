"""Prometheus remote write, from a process of its own, one per collector (per worker): ``process.py``
(`RemoteWriteProcess`: hands each accepted report over without waiting, restarts the child),
``records.py`` (what is handed over), ``child.py`` (the process: one series build for every
receiver), ``series.py`` (a report, its verdict and each job as series, from
``core/exposition/``), ``sender.py`` (a receiver's bounded queue and its posting thread),
``counters.py`` (its counters in shared memory, for ``/metrics``), ``config.py``. The messages
are in ``proto/nodeagent/prompb/``."""
