"""RDMA ports (InfiniBand, RoCE, iWARP) from ``<sysfs>/class/infiniband``.

``port_rcv_data`` and ``port_xmit_data`` (and their ``_64`` forms) count 4-byte words.
"N/A (no PMA)" means the device has no performance-management agent: no value. A device
without a ``<port>/counters`` folder (irdma, bnxt_re) or with an unreadable attribute loses only that value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nodeagent.agent.kernel.files import list_dir
from nodeagent.agent.sources.base import Source, SourceContext
from nodeagent.agent.sources.registry import register
from nodeagent.core.quantities.rates import is_saturated
from nodeagent.core.quantities.units import parse_ib_rate
from nodeagent.v1 import nodeagent_pb2 as pb

_WORD_BYTES = 4
# (sample field, preferred 64-bit counter, legacy counter, multiplier)
_DATA_COUNTERS = (
    ("rx_bytes_total", "port_rcv_data_64", "port_rcv_data", _WORD_BYTES),
    ("tx_bytes_total", "port_xmit_data_64", "port_xmit_data", _WORD_BYTES),
    ("rx_packets_total", "port_rcv_packets_64", "port_rcv_packets", 1),
    ("tx_packets_total", "port_xmit_packets_64", "port_xmit_packets", 1),
)


@dataclass(slots=True)
class _Port:
    device: str
    port: int
    base: str
    counter_paths: list[tuple[str, str]]  # (name, path) in counters/ and counters_ext/
    hw_counter_paths: list[tuple[str, str]]


def parse_state(text: str | None) -> tuple[int | None, str]:
    """``"4: ACTIVE"`` -> (4, "ACTIVE"); ``"5: LinkUp"`` -> (5, "LinkUp")."""
    if not text:
        return None, ""
    number, sep, label = text.partition(":")
    if not sep:
        return None, text.strip()
    try:
        return int(number), label.strip()
    except ValueError:
        return None, text.strip()


def parse_counter(text: str | None) -> int | None:
    """A counter attribute; None for "N/A (no PMA)" and anything else not a number."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


@register
class InfinibandSource(Source):
    name = "infiniband"
    help = "RDMA ports: state, rate, data and error counters (class/infiniband)"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._ports: list[_Port] = []

    def scan(self, info: pb.NodeInfo) -> None:
        files = self.ctx.files
        root = self.ctx.roots.sys("class", "infiniband")
        ports: list[_Port] = []
        del info.rdma_ports[:]
        for device in list_dir(root):
            dev_dir = os.path.join(root, device)
            hca = files.read_str(f"{dev_dir}/hca_type") or ""
            fw = files.read_str(f"{dev_dir}/fw_ver") or ""
            board = files.read_str(f"{dev_dir}/board_id") or ""
            for port_name in list_dir(os.path.join(dev_dir, "ports")):
                if not port_name.isdigit():
                    continue
                base = os.path.join(dev_dir, "ports", port_name)
                port = _Port(device, int(port_name), base, _counter_paths(base), [])
                port.hw_counter_paths = [
                    (n, os.path.join(base, "hw_counters", n)) for n in list_dir(os.path.join(base, "hw_counters"))
                ]
                ports.append(port)
                rate_text = files.read_str(f"{base}/rate") or ""
                entry = info.rdma_ports.add(
                    device=device, port=port.port, rate_text=rate_text,
                    link_layer=files.read_str(f"{base}/link_layer") or "",
                    hca_type=hca, firmware_version=fw, board_id=board,
                )  # fmt: skip
                rate = parse_ib_rate(rate_text)
                if rate is not None:
                    entry.rate_bytes_per_second = rate
        self._ports = ports

    def collect(self, report: pb.NodeReport) -> None:
        files = self.ctx.files
        for port in self._ports:
            sample = report.rdma_ports.add(device=port.device, port=port.port)
            state_id, state = parse_state(files.read_str(f"{port.base}/state"))
            sample.state = state
            if state_id is not None:
                sample.state_id = state_id
            phys_id, phys = parse_state(files.read_str(f"{port.base}/phys_state"))
            sample.phys_state = phys
            if phys_id is not None:
                sample.phys_state_id = phys_id
            rate_text = files.read_str(f"{port.base}/rate")
            rate = parse_ib_rate(rate_text) if rate_text else None
            if rate is not None:
                sample.rate_bytes_per_second = rate
            elif rate_text is None and not os.path.exists(port.base):
                self.needs_rescan = True
                continue
            counters = sample.counters
            for name, path in port.counter_paths:
                value = parse_counter(files.read_str(path))
                if value is None:
                    continue
                counters[name] = value
                if is_saturated(name, value):
                    sample.saturated_counters.append(name)
            for field, wide, legacy, scale in _DATA_COUNTERS:
                raw = counters.get(wide, counters.get(legacy))
                if raw is not None:
                    setattr(sample, field, raw * scale)
            for name, path in port.hw_counter_paths:
                value = parse_counter(files.read_str(path))
                if value is not None:
                    sample.hw_counters[name] = value


def _counter_paths(base: str) -> list[tuple[str, str]]:
    paths: list[tuple[str, str]] = []
    for sub in ("counters", "counters_ext"):
        directory = os.path.join(base, sub)
        paths.extend((n, os.path.join(directory, n)) for n in list_dir(directory))
    return paths
