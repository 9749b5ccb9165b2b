"""The node page's GPU rows say which reading tells each GPU's computing share (the agent's
``computing_source``, agent/gpu/power_regime.py), with its evidence on hover: reports from the
agent's GPU source over the fake NVML, into a collector, read back as the page's JSON and, where
Chromium is installed, as the page drawn."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.views.fleet_page import FleetPage
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.collector.views.test_fleet_page import _chromium
from tests.conftest import require
from tests.fakes.gpu_reports import ingest_gpu_reports
from tests.fakes.nvml.state import a100_sxm4, h100_sxm5


def test_the_node_pages_gpu_rows_carry_each_gpus_source(tmp_path: Path, fake_nvml: Any, make_gpu_source: Any) -> None:
    state = a100_sxm4(2)
    state.gpus[1].name = "NVIDIA L40S"
    h100 = h100_sxm5(1).gpus[0]
    h100.index = 2
    state.gpus.append(h100)
    for g in state.gpus:
        g.util_gpu, g.gpm_sm_active, g.mem_used, g.procs = 100, 85.0, 60 << 30, {os.getpid(): 60 << 30}
    fake_nvml.load(state)
    gpu_source = make_gpu_source()
    info = pb.NodeInfo(node_id="src-node", hostname="src-node")
    gpu_source.scan(info)

    async def scenario() -> Any:
        server = CollectorServer(
            ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", http_listen="127.0.0.1:0")
        )
        await server.start()
        try:
            await ingest_gpu_reports(server, info, gpu_source, fake_nvml, state, 80)
            dom = ""
            if shutil.which("chromium") is not None and server.http is not None:
                url = f"http://{server.http.address}/node/src-node"
                dom = await asyncio.to_thread(_chromium, "--dump-dom", url, profile=tmp_path / "profile")
            return FleetPage(server).node("src-node"), dom
        finally:
            await server.stop(0.0)

    node, dom = asyncio.run(scenario())
    gpus = {g["index"]: g for g in node["verdict"]["gpus"]}
    assert [gpus[i]["computing_source"] for i in range(3)] == ["power_instant", "power_mean", "gpm"]
    assert gpus[1]["computing_source_reason"].startswith("prior: NVIDIA L40S")
    require(bool(dom), "needs chromium (Debian package; `make system-deps`) for the page itself")
    cells = re.findall(r'<td class="source"><span title="([^"]*)">([a-z_]+)</span></td>', dom)
    assert [source for _, source in cells] == ["power_instant", "power_mean", "gpm"], dom[:3000]
    assert cells[0][0].startswith("prior: NVIDIA A100") and "GPM" in cells[2][0]
    assert '<th title="which reading tells computing from waiting">source</th>' in dom
