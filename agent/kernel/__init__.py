"""What the agent reads of the kernel's files, below every source: the reads themselves
(``files.py``) and the formats more than one source parses (``pressure.py``)."""
