"""Live network: two namespaces joined by a veth pair, one side shaped with tc, iperf3
across it. The agent, sampling inside the receiving namespace, must see what iperf3's
receiver saw (within 5%) and express it against the configured link speed."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import require_root_tools
from tests.fakes.netns import shape, veth_pair

pytestmark = pytest.mark.root

SHAPED_MBIT = 200
SAMPLE_INTERVAL = 0.5
IPERF_SECONDS = 5


@pytest.mark.alone
def test_receive_throughput_matches_iperf3() -> None:
    require_root_tools("ip", "tc", "iperf3")
    with veth_pair() as pair:
        shape(pair, f"{SHAPED_MBIT}mbit")
        server = subprocess.Popen(pair.exec_b("iperf3", "-s", "-1", "-B", pair.addr_b), stdout=subprocess.DEVNULL)
        agent = subprocess.Popen(
            pair.exec_b(
                sys.executable, "-m", "nodeagent.agent", "sample", "--json",
                "--count", str(int((IPERF_SECONDS + 3) / SAMPLE_INTERVAL)), "--interval", str(SAMPLE_INTERVAL),
                "--link-speed", f"{pair.dev_b}={SHAPED_MBIT}M",
                "--collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband",
            ),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            time.sleep(1.0)
            client = subprocess.run(
                pair.exec_a("iperf3", "-c", pair.addr_b, "-t", str(IPERF_SECONDS), "-O", "1", "-J"),
                capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            out, _ = agent.communicate(timeout=60)
        finally:
            for proc in (agent, server):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    assert agent.returncode == 0
    received = json.loads(client.stdout)["end"]["sum_received"]["bits_per_second"] / 8
    rows = [
        next(n for n in json.loads(line)["nics"] if n["name"] == pair.dev_b)
        for line in out.splitlines()[1:]  # the first snapshot has no rates
    ]
    busy = [r for r in rows if (r["rx_bytes_per_second"] or 0) > received * 0.5]
    # Drop the first and last busy intervals: iperf3 started or stopped inside them.
    steady = busy[1:-1]
    assert len(steady) >= 4, rows
    agent_rate = sum(r["rx_bytes_per_second"] for r in steady) / len(steady)
    assert agent_rate == pytest.approx(received, rel=0.05)
    link = SHAPED_MBIT * 1e6 / 8
    assert all(r["speed_bytes_per_second"] == link and r["speed_source"] == "config" for r in steady)
    ratio = sum(r["rx_link_ratio"] for r in steady) / len(steady)
    assert ratio == pytest.approx(agent_rate / link)
    assert 0.8 < ratio <= 1.05  # shaped to the link speed: near 100% of it
