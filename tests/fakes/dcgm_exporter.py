"""A fake dcgm-exporter: its ``/metrics`` page, on a loopback HTTP server, with per-GPU values a test
(or the lab) sets.

The page is rendered as dcgm-exporter renders it (``internal/pkg/rendermetrics/render_metrics.go``,
template ``gpuMetricsFormat``; doubles with Go's ``%f``), with the families, types and help texts of
its ``etc/default-counters.csv`` (``tests/data/dcgm_exporter/``, where the origin and licence are
noted): ``render_family`` reproduces its own server test's expected page byte for byte.

How DCGM refreshes is the knob that matters to the agent: ``refresh_seconds`` 0 makes every scrape a
new DCGM sample (the energy counter climbs, the draw wavers), a positive value refreshes on that
wall-clock period (dcgm-exporter's ``--collect-interval``; 30 s by default), None never (a stuck
exporter). ``delay_seconds`` holds each answer (a slow exporter), ``status`` answers another HTTP
status, ``body`` serves other text. In another process (the lab), run it as
``python -m tests.fakes.dcgm_exporter --gpu UUID ...`` and set values with ``POST /values`` and a
JSON body ``{"UUID": {"sm_active": 0.7, "tensor_active": 0.2}}`` (an instance as ``"UUID/GPU_I_ID"``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from tests.fakes.nvml.state import FakeNvmlState

COUNTERS_CSV = Path(__file__).resolve().parents[1] / "data" / "dcgm_exporter" / "default-counters.csv"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"  # a commented row of the default counters: served when collect_sm_active
# Fields the fake models; every other active row of the counters CSV is served at a constant.
_MODELLED = {
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", SM_ACTIVE, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
}  # fmt: skip
_CONSTANTS = {"DCGM_FI_DEV_SM_CLOCK": 1410, "DCGM_FI_DEV_MEM_CLOCK": 1593, "DCGM_FI_DEV_GPU_TEMP": 34,
              "DCGM_FI_DEV_MEMORY_TEMP": 40, "DCGM_FI_DEV_FB_USED": 1024, "DCGM_FI_DEV_FB_FREE": 80000}  # fmt: skip
# DCGM's double-valued fields among the defaults (written with Go's %f); the rest are int64.
_DOUBLES = {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"}


def counters(path: Path = COUNTERS_CSV) -> dict[str, tuple[str, str, bool]]:
    """Field -> (Prometheus type, help, active) from a dcgm-exporter counters CSV, in its order;
    a commented row is not active."""
    out: dict[str, tuple[str, str, bool]] = {}
    for row in csv.reader(path.read_text().splitlines()):
        if len(row) < 3:
            continue
        name = row[0].lstrip("#").strip()
        if name.startswith("DCGM_"):
            out[name] = (row[1].strip(), ",".join(row[2:]).strip(), not row[0].startswith("#"))
    return out


def render_family(name: str, prom_type: str, help_text: str, series: Iterable[tuple[Mapping[str, str], str]]) -> str:
    """One family as dcgm-exporter's template writes it: its labels in the template's order."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {prom_type}"]
    for labels, value in series:
        text = ",".join(f'{key}="{val}"' for key, val in labels.items())
        lines.append(f"{name}{{{text}}} {value}")
    return "\n".join(lines) + "\n"


def go_double(value: float) -> str:
    return f"{value:f}"


@dataclass
class FakeGpu:
    """One GPU (``gpu_instance`` None) or GPU instance as the exporter sees it."""

    index: int
    uuid: str  # the physical GPU's, also for an instance (as dcgm-exporter labels it)
    model: str
    pci_bus_id: str
    gpu_instance: int | None = None
    mig_profile: str = ""
    sm_active: float = 0.0
    tensor_active: float = 0.0
    gr_active: float = 0.0
    dram_active: float = 0.0


@dataclass
class _Dcgm:
    """DCGM's cache: values as of its last refresh."""

    refreshes: int = 0
    energy_mj: dict[str, int] = field(default_factory=dict)
    values: dict[tuple[str, int | None], tuple[float, float, float, float]] = field(default_factory=dict)


class FakeDcgmExporter:
    def __init__(
        self,
        gpus: Iterable[FakeGpu],
        *,
        refresh_seconds: float | None = 0.0,
        collect_sm_active: bool = True,
        hostname: str = "fake-node",
        old_namespace: bool = False,
    ) -> None:
        self.gpus = {(g.uuid, g.gpu_instance): g for g in gpus}
        self.refresh_seconds = refresh_seconds
        self.collect_sm_active = collect_sm_active
        self.hostname = hostname
        self.uuid_label = "uuid" if old_namespace else "UUID"
        self.driver = "570.133.20"  # DCGM_FI_DRIVER_VERSION, a label row of the default counters
        self.delay_seconds = 0.0
        self.status = 200
        self.body: str | None = None  # served instead of the page (text that is not one)
        self.requests = 0  # requests received (a slow answer counts at once)
        self.scrapes = 0  # pages rendered
        self._counters = counters()
        self._lock = threading.Lock()
        self._dcgm = _Dcgm()
        self._refreshed_at = float("-inf")
        self._server: ThreadingHTTPServer | None = None
        # Called under the lock at each refresh, before the values are taken (the lab: the GPUs'
        # activity read from their fake NVML state, as DCGM samples the hardware's counters).
        self.before_refresh: Callable[[FakeDcgmExporter], None] | None = None

    @classmethod
    def for_state(cls, state: FakeNvmlState, **kwargs: Any) -> FakeDcgmExporter:
        """The GPUs of a fake NVML state (its UUIDs, names, bus ids; each MIG GPU instance once)."""
        gpus: list[FakeGpu] = []
        for i, g in enumerate(state.gpus):
            instances = {m.gi: m.profile for m in getattr(g, "mig", [])}
            if not instances:
                gpus.append(FakeGpu(i, g.uuid, g.name, g.bus_id))
            for gi, profile in sorted(instances.items()):
                gpus.append(FakeGpu(i, g.uuid, g.name, g.bus_id, gpu_instance=gi, mig_profile=profile))
        return cls(gpus, **kwargs)

    # -- what a test sets --

    def set(self, uuid: str, *, instance: int | None = None, **values: float) -> None:
        """Values of one GPU (or GPU instance), seen at DCGM's next refresh: sm_active, tensor_active,
        gr_active, dram_active (ratios 0..1)."""
        with self._lock:
            gpu = self.gpus[(uuid, instance)]
            for name, value in values.items():
                if not hasattr(gpu, name) or name in {"index", "uuid", "model", "pci_bus_id"}:
                    raise KeyError(f"no settable value {name!r}")
                setattr(gpu, name, float(value))

    def refresh(self) -> None:
        """A DCGM refresh now, whatever ``refresh_seconds`` says (a test's own pace)."""
        with self._lock:
            self._refresh(time.monotonic())

    # -- the server --

    @property
    def url(self) -> str:
        assert self._server is not None, "start the exporter first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/metrics"

    def start(self, port: int = 0) -> FakeDcgmExporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                exporter.requests += 1
                if self.path.split("?")[0] != "/metrics":
                    self._answer(404, b"404 page not found\n")
                    return
                time.sleep(exporter.delay_seconds)
                body = (exporter.page() if exporter.body is None else exporter.body).encode()
                self._answer(exporter.status, body if exporter.status == 200 else b"error\n")

            def do_POST(self) -> None:
                if self.path != "/values":
                    self._answer(404, b"404 page not found\n")
                    return
                data = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                for key, values in data.items():
                    uuid, _, gi = key.partition("/")
                    exporter.set(uuid, instance=int(gi) if gi else None, **values)
                self._answer(200, b"ok\n")

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the scraper gave up first
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-dcgm-exporter", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeDcgmExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the page --

    def page(self) -> str:
        """The page now: DCGM's cache, refreshed first if its period has passed."""
        with self._lock:
            self.scrapes += 1
            now = time.monotonic()
            period = self.refresh_seconds
            due = period is not None and (period == 0 or now - self._refreshed_at >= period)
            if due or not self._dcgm.values:
                last = self._refreshed_at
                self._refresh(now)
                if period and math.isfinite(last):
                    # DCGM samples a watched field on its own clock (dcgm-exporter hands it the
                    # collect interval as the watch's update frequency and reads the latest sample
                    # at each scrape): the refreshes keep to a grid of the period, not to the
                    # scrapes (a scrape a little under the period after the last would skip one).
                    self._refreshed_at = now - (now - last) % period
            return "".join(self._families())

    def _refresh(self, now: float) -> None:
        dcgm = self._dcgm
        dcgm.refreshes += 1
        self._refreshed_at = now
        if self.before_refresh is not None:
            self.before_refresh(self)
        for key, g in self.gpus.items():
            dcgm.values[key] = (g.sm_active, g.tensor_active, g.gr_active, g.dram_active)
            dcgm.energy_mj[g.uuid] = dcgm.energy_mj.get(g.uuid, 1_000_000) + 7_919  # about 80 W for 0.1 s

    def _families(self) -> Iterator[str]:
        labels = {name: self.driver for name, (kind, _, on) in self._counters.items() if on and kind == "label"}
        for name, (prom_type, help_text, active) in self._counters.items():
            served = (name == SM_ACTIVE and self.collect_sm_active) or (active and name != SM_ACTIVE)
            if not served or prom_type == "label":
                continue
            yield render_family(name, prom_type, help_text, self._series(name, labels))

    def _series(self, name: str, extra: Mapping[str, str]) -> Iterator[tuple[dict[str, str], str]]:
        profiling = name.startswith("DCGM_FI_PROF_")
        for key, g in self.gpus.items():  # a GPU in MIG mode: every field under each instance's labels
            labels = {"gpu": str(g.index), self.uuid_label: g.uuid, "pci_bus_id": g.pci_bus_id,
                      "device": f"nvidia{g.index}", "modelName": g.model}  # fmt: skip
            if g.gpu_instance is not None:
                labels |= {"GPU_I_PROFILE": g.mig_profile, "GPU_I_ID": str(g.gpu_instance)}
            labels["hostname"] = self.hostname
            labels |= extra
            if name == "DCGM_FI_DEV_XID_ERRORS":
                labels |= {"err_code": "0", "err_msg": "No Error"}
            value = self._value(name, key, g)
            yield labels, go_double(value) if profiling or name in _DOUBLES else str(int(value))

    def _value(self, name: str, key: tuple[str, int | None], g: FakeGpu) -> float:
        if name not in _MODELLED:
            return _CONSTANTS.get(name, 0)
        dcgm = self._dcgm
        sm, tensor, gr, dram = dcgm.values[key]
        return {
            "DCGM_FI_DEV_POWER_USAGE": 80.0 + dcgm.refreshes % 7 * 0.013,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": dcgm.energy_mj[g.uuid],
            "DCGM_FI_DEV_GPU_UTIL": round(gr * 100),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": gr,
            SM_ACTIVE: sm,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": tensor,
            "DCGM_FI_PROF_DRAM_ACTIVE": dram,
        }[name]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake dcgm-exporter on loopback.")
    parser.add_argument("--gpu", action="append", default=[], help="a GPU UUID (repeat); its index is its place")
    parser.add_argument("--model", default="NVIDIA A100-SXM4-80GB")
    parser.add_argument("--refresh-seconds", type=float, default=0.0, help="DCGM's refresh period; 0: every scrape")
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--from-nvml-state", type=Path,
                        help="a fake NVML state file: each GPU's activity read from it at every refresh "
                             "(its gpm_sm_active, gpm_tensor, gpm_gr_active, gpm_dram, in percent)")  # fmt: skip
    args = parser.parse_args(argv)
    gpus = [FakeGpu(i, uuid, args.model, f"00000000:{i + 7:02X}:00.0") for i, uuid in enumerate(args.gpu)]
    exporter = FakeDcgmExporter(gpus, refresh_seconds=args.refresh_seconds)
    if args.from_nvml_state is not None:
        exporter.before_refresh = nvml_state_activity(args.from_nvml_state)
    exporter.start(args.port)
    print(exporter.url, flush=True)
    threading.Event().wait()


# A fake NVML state's activity fields (percent) and the exporter's values (ratios) they feed.
_STATE_ACTIVITY: Final = {
    "gpm_sm_active": "sm_active",
    "gpm_tensor": "tensor_active",
    "gpm_gr_active": "gr_active",
    "gpm_dram": "dram_active",
}


def nvml_state_activity(path: Path) -> Callable[[FakeDcgmExporter], None]:
    """A refresh hook: each GPU's activity as its fake NVML state says now (``gpu I gpm_sm_active
    P`` lines, the GPU by its place). An unreadable file keeps the last values."""

    def refresh(exporter: FakeDcgmExporter) -> None:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return
        by_index = {g.index: g for g in exporter.gpus.values() if g.gpu_instance is None}
        for line in lines:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "gpu" and parts[2] in _STATE_ACTIVITY and parts[1].isdigit():
                gpu = by_index.get(int(parts[1]))
                if gpu is not None:
                    setattr(gpu, _STATE_ACTIVITY[parts[2]], min(1.0, max(0.0, float(parts[3]) / 100.0)))

    return refresh


if __name__ == "__main__":
    main()
