"""The multi-node lab's watcher: what ``nodeagent-collector jobs --json`` and ``nodes --json`` say,
every few seconds, as JSON lines (``bench/lab_cluster.py`` runs it next to the collector).

    python bench/lab_poll.py COLLECTOR OUT [EVERY_SECONDS]

The two commands run in this one process (the collector's own command line, called in-process:
one interpreter start, not one per poll, on a machine the lab already keeps busy). Each line:
``{"t": unix seconds, "jobs": [...], "nodes": [...]}``, with ``"error"`` when a command failed.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def ask(command: str, collector: str) -> Any:
    from nodeagent.collector.cli.main import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(args=[command, "--json", "--collector", collector], prog_name="nodeagent-collector",
                 standalone_mode=False)  # fmt: skip
    return json.loads(out.getvalue())


def main() -> int:
    collector, path = sys.argv[1], Path(sys.argv[2])
    every = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    with path.open("a") as out:
        while True:
            t = time.time()
            line: dict[str, Any] = {"t": t}
            for command in ("jobs", "nodes"):
                try:
                    line[command] = ask(command, collector)
                except (Exception, SystemExit) as err:  # the line says so; the next poll tries again
                    line.setdefault("error", []).append(f"{command}: {err}")
            out.write(json.dumps(line) + "\n")
            out.flush()
            time.sleep(max(0.0, t + every - time.time()))


if __name__ == "__main__":
    sys.exit(main())
