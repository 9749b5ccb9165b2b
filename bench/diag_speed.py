"""How long ``nodeagent diag`` takes without ``--probe`` on an 8-GPU node: target under 5 s.

Each run is a fresh process, as a Slurm prolog starts it: interpreter start, imports, NVML
scan of 8 GPUs (the fake NVML library the test suite builds, 8xH100-SXM5 and 8xA100-SXM4
profiles), two samples of every source of this machine one window apart, the kernel log,
the checks and the output. It prints the median and worst wall time per profile and window, and
their ratio to the 5 s target.

    python bench/diag_speed.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET_SECONDS = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from tests.fakes.nvml.build import build_fake_nvml
    from tests.fakes.nvml.state import a100_sxm4, h100_sxm5

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="diag-bench-") as tmp:
        lib_dir = build_fake_nvml(Path(tmp) / "lib")
        for name, profile, expect in (("8xH100-SXM5", h100_sxm5, "8xH100-sxm-ib"), ("8xA100-SXM4", a100_sxm4, None)):
            state_path = Path(tmp) / f"{name}.state"
            profile().write(state_path)
            env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": str(state_path)}
            for window in (1.0, 0.0):
                command = [sys.executable, "-m", "nodeagent.agent", "diag", "--json", "--window", str(window)]
                if expect:
                    command += ["--profile", expect]
                walls, exits = [], set()
                for _ in range(args.runs):
                    started = time.perf_counter()
                    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
                    walls.append(time.perf_counter() - started)
                    exits.add(done.returncode)
                    if done.returncode not in (0, 1):
                        raise SystemExit(f"diag could not run: {done.stderr.strip()}")
                report = json.loads(done.stdout)
                results.append(
                    {
                        "node": name,
                        "window_seconds": window,
                        "checks": len(report["checks"]),
                        "median_seconds": statistics.median(walls),
                        "max_seconds": max(walls),
                        "ratio_to_target": max(walls) / TARGET_SECONDS,
                        "inside_seconds": report["duration_seconds"],
                    }
                )
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"nodeagent diag without --probe, {args.runs} fresh processes each; target < {TARGET_SECONDS:.0f} s")
    print(f"{'node':<12} {'window':>7} {'checks':>7} {'median':>8} {'worst':>8} {'worst/target':>13} {'in diag':>8}")
    for r in results:
        print(
            f"{r['node']:<12} {r['window_seconds']:>6.1f}s {r['checks']:>7} {r['median_seconds']:>7.2f}s "
            f"{r['max_seconds']:>7.2f}s {r['ratio_to_target']:>13.2f} {r['inside_seconds']:>7.2f}s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
