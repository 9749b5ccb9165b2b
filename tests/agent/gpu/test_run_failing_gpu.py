"""``nodeagent run`` on the fake NVML with one GPU of eight that hangs: reports keep reaching the
collector with the seven others, ``/metrics`` names the GPU and the call, the collector raises
GPUUnresponsive and not NodeDown, and the agent still exits on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc

from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import Collector, cli, free_port, processes
from tests.fakes.nvml.plugin import STATE_ENV
from tests.fakes.nvml.state import a100_sxm4
from tests.fakes.trees import REPO

NODE = "dying-1"
FAILING = 3


def _wait(condition: Callable[[], bool], what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, AssertionError, StopIteration):
            pass
        time.sleep(0.2)
    raise AssertionError(f"not within {limit} s: {what}")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def test_a_hanging_gpu_leaves_the_node_reporting_and_is_named(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = a100_sxm4()
    state.clock = None
    state_path = tmp_path / "nvml.state"
    state.write(state_path)
    collector = Collector(db=tmp_path / "c.db", port=free_port(), workers=1)
    metrics_port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir), STATE_ENV: str(state_path), "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable, "-m", "nodeagent.agent", "run", "--collector", collector.address, "--node-id", NODE,
        "--interval", "0.2", "--deadline", "300", "--metrics-listen", f"127.0.0.1:{metrics_port}",
    ]  # fmt: skip
    page = f"http://127.0.0.1:{metrics_port}/metrics"
    with processes() as started, (tmp_path / "agent.log").open("w") as log:
        started.append(collector.start())
        agent = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait(lambda: 'gpu="3"' in _get(page) and "DCGM_FI_DEV_GPU_TEMP{" in _get(page), "a first GPU sample")
            state.gpus[FAILING].hang = 1
            state.write(state_path)
            flagged = re.compile(r'nodeagent_gpu_unresponsive\{[^}]*gpu="3"[^}]*call="nvml\w+"[^}]*\} 1')
            _wait(lambda: bool(flagged.search(_get(page))), "GPU 3 unresponsive on /metrics")
            text = _get(page)
            temps = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
            assert len(temps) == 7 and not any('gpu="3"' in line for line in temps)
            taken = re.search(r'nodeagent_gpu_samples_taken_total\{[^}]*gpu="3"[^}]*\} (\d+)', text)
            expected = re.search(r'nodeagent_gpu_samples_expected_total\{[^}]*gpu="3"[^}]*\} (\d+)', text)
            assert taken and expected and int(taken.group(1)) < int(expected.group(1))
            # Reports keep coming while the GPU hangs.
            before = collector.reports(NODE)
            _wait(lambda: collector.reports(NODE) >= before + 20, "20 more reports stored")
            with grpc.insecure_channel(collector.address) as channel:
                latest = pb_grpc.QueryStub(channel).LatestReport(pb.LatestReportRequest(node_id=NODE), timeout=5)
            gpus = {g.index: g for g in latest.gpus}
            assert gpus[FAILING].unresponsive and not gpus[FAILING].lost
            assert [i for i, g in gpus.items() if g.HasField("memory_used_bytes")] == [0, 1, 2, 4, 5, 6, 7]

            def alerts() -> list[dict[str, str]]:
                return list(json.loads(cli("collector", "alerts", "--json", "--collector", collector.address)))

            _wait(lambda: any(a["name"] == "GPUUnresponsive" for a in alerts()), "GPUUnresponsive firing")
            firing = alerts()
            assert [a.get("key") or a.get("subject") for a in firing if a["name"] == "GPUUnresponsive"] == ["gpu:3"]
            assert not any(a["name"] == "NodeDown" for a in firing)
            # The call blocked in the library does not keep the agent from exiting.
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=60) == 0
        finally:
            state.gpus[FAILING].hang = 0
            state.write(state_path)
            if agent.poll() is None:
                agent.kill()
                agent.wait(timeout=30)
