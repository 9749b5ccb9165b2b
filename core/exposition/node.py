"""Host families in node_exporter's names, help and labels, from the latest tick's report.

What the agent reads (net/dev and class/net, class/infiniband, diskstats, pressure, stat, loadavg,
meminfo, net/snmp's TCP segments) is exported the way node_exporter 1.5's netdev, netclass,
infiniband, diskstats, pressure, cpu, stat, loadavg, meminfo and netstat collectors write it, so
node_exporter's dashboards and alert rules work unchanged. A value the agent did not read has no
sample (node_exporter does the same for a missing file).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from nodeagent.core.exposition.text import TextFamily, format_value, label, number
from nodeagent.v1 import nodeagent_pb2 as pb

# (node_exporter suffix after node_network_, NicSample field)
_NETDEV: Final = (
    ("receive_bytes", "rx_bytes_total"), ("receive_packets", "rx_packets_total"),
    ("receive_errs", "rx_errors_total"), ("receive_drop", "rx_dropped_total"),
    ("transmit_bytes", "tx_bytes_total"), ("transmit_packets", "tx_packets_total"),
    ("transmit_errs", "tx_errors_total"), ("transmit_drop", "tx_dropped_total"),
)  # fmt: skip

# (family after node_infiniband_, counter file, scale, help), from the raw counters of counters/
# and (the "legacy" families) counters_ext/, as node_exporter splits them: the data counters count
# 4-byte words.
_IB_COUNTERS: Final = (
    ("port_data_received_bytes_total", "port_rcv_data", 4, "Number of data octets received on all links"),
    ("port_data_transmitted_bytes_total", "port_xmit_data", 4, "Number of data octets transmitted on all links"),
    ("port_packets_received_total", "port_rcv_packets", 1,
     "Number of packets received on all VLs by this port (including errors)"),
    ("port_packets_transmitted_total", "port_xmit_packets", 1,
     "Number of packets transmitted on all VLs from this port (including errors)"),
    ("link_downed_total", "link_downed", 1,
     "Number of times the link failed to recover from an error state and went down"),
    ("link_error_recovery_total", "link_error_recovery", 1,
     "Number of times the link successfully recovered from an error state"),
    ("multicast_packets_received_total", "multicast_rcv_packets", 1,
     "Number of multicast packets received (including errors)"),
    ("multicast_packets_transmitted_total", "multicast_xmit_packets", 1,
     "Number of multicast packets transmitted (including errors)"),
    ("port_constraint_errors_received_total", "port_rcv_constraint_errors", 1,
     "Number of packets received on the switch physical port that are discarded"),
    ("port_constraint_errors_transmitted_total", "port_xmit_constraint_errors", 1,
     "Number of packets not transmitted from the switch physical port"),
    ("port_discards_received_total", "port_rcv_discards", 1,
     "Number of inbound packets discarded by the port because the port is down or congested"),
    ("port_discards_transmitted_total", "port_xmit_discards", 1,
     "Number of outbound packets discarded by the port because the port is down or congested"),
    ("port_errors_received_total", "port_rcv_errors", 1,
     "Number of packets containing an error that were received on this port"),
    ("port_transmit_wait_total", "port_xmit_wait", 1,
     "Number of ticks during which the port had data to transmit but no data was sent during the entire tick"),
    ("unicast_packets_received_total", "unicast_rcv_packets", 1,
     "Number of unicast packets received (including errors)"),
    ("unicast_packets_transmitted_total", "unicast_xmit_packets", 1,
     "Number of unicast packets transmitted (including errors)"),
    ("legacy_data_received_bytes_total", "port_rcv_data_64", 4, "Number of data octets received on all links"),
    ("legacy_data_transmitted_bytes_total", "port_xmit_data_64", 4, "Number of data octets transmitted on all links"),
    ("legacy_packets_received_total", "port_rcv_packets_64", 1, "Number of data packets received on all links"),
    # node_exporter's help of the transmit family says "received" too; kept so the HELP matches.
    ("legacy_packets_transmitted_total", "port_xmit_packets_64", 1, "Number of data packets received on all links"),
    ("legacy_multicast_packets_received_total", "port_multicast_rcv_packets", 1,
     "Number of multicast packets received"),
    ("legacy_multicast_packets_transmitted_total", "port_multicast_xmit_packets", 1,
     "Number of multicast packets transmitted"),
    ("legacy_unicast_packets_received_total", "port_unicast_rcv_packets", 1, "Number of unicast packets received"),
    ("legacy_unicast_packets_transmitted_total", "port_unicast_xmit_packets", 1,
     "Number of unicast packets transmitted"),
)  # fmt: skip

# (family after node_disk_, DiskSample field, scale to the family's unit, help)
_DISK: Final = (
    ("reads_completed_total", "reads_completed_total", 1, "The total number of reads completed successfully."),
    ("reads_merged_total", "reads_merged_total", 1, "The total number of reads merged."),
    ("read_bytes_total", "read_bytes_total", 1, "The total number of bytes read successfully."),
    ("read_time_seconds_total", "read_time_milliseconds_total", 0.001,
     "The total number of seconds spent by all reads."),
    ("writes_completed_total", "writes_completed_total", 1, "The total number of writes completed successfully."),
    ("writes_merged_total", "writes_merged_total", 1, "The number of writes merged."),
    ("written_bytes_total", "written_bytes_total", 1, "The total number of bytes written successfully."),
    ("write_time_seconds_total", "write_time_milliseconds_total", 0.001,
     "This is the total number of seconds spent by all writes."),
    ("io_now", "io_in_progress", 1, "The number of I/Os currently in progress."),
    ("io_time_seconds_total", "io_time_milliseconds_total", 0.001, "Total seconds spent doing I/Os."),
    ("io_time_weighted_seconds_total", "io_weighted_time_milliseconds_total", 0.001,
     "The weighted # of seconds spent doing I/Os."),
    ("discards_completed_total", "discards_completed_total", 1, "The total number of discards completed successfully."),
    ("discards_merged_total", "discards_merged_total", 1, "The total number of discards merged."),
    ("discarded_sectors_total", "discarded_bytes_total", 1 / 512,
     "The total number of sectors discarded successfully."),
    ("discard_time_seconds_total", "discard_time_milliseconds_total", 0.001,
     "This is the total number of seconds spent by all discards."),
    ("flush_requests_total", "flushes_completed_total", 1, "The total number of flush requests completed successfully"),
    ("flush_requests_time_seconds_total", "flush_time_milliseconds_total", 0.001,
     "This is the total number of seconds spent by all flush requests."),
)  # fmt: skip

_CPU_MODES: Final = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

# (meminfo field, HostSample field): node_exporter names them node_memory_<field>_bytes.
_MEMINFO: Final = (
    ("MemTotal", "memory_total_bytes"), ("MemFree", "memory_free_bytes"), ("MemAvailable", "memory_available_bytes"),
    ("Buffers", "memory_buffers_bytes"), ("Cached", "memory_cached_bytes"), ("Dirty", "memory_dirty_bytes"),
    ("Writeback", "memory_writeback_bytes"),
)  # fmt: skip

# (resource, HostSample field, help of waiting, help of stalled or None); node_exporter 1.5 writes
# cpu's "full" line not at all (the kernel documents it as undefined at system level).
_PRESSURE: Final = (
    ("cpu", "pressure_cpu", "Total time in seconds that processes have waited for CPU time", None),
    ("io", "pressure_io", "Total time in seconds that processes have waited due to IO congestion",
     "Total time in seconds no process could make progress due to IO congestion"),
    ("memory", "pressure_memory", "Total time in seconds that processes have waited for memory",
     "Total time in seconds no process could make progress due to memory congestion"),
)  # fmt: skip


def _family(name: str, doc: str, kind: str) -> TextFamily:
    # node_exporter's counters end in "_total"; their HELP and TYPE lines name them so.
    return TextFamily(name, kind, doc)


def _add(family: TextFamily, labels: str, value: float) -> None:
    """``labels``: the text between the braces ("" for none)."""
    if labels:
        family.lines.append(f"{family.name}{{{labels}}} {number(value)}\n")
    else:
        family.lines.append(f"{family.name} {number(value)}\n")


class _Devices(dict[str, str]):
    """Each device's ``device="name"`` text, written once for the whole page."""

    def __missing__(self, name: str) -> str:
        text = self[name] = label("device", name)
        return text


def node_families(report: pb.NodeReport, info: pb.NodeInfo | None) -> Iterator[TextFamily]:
    """Every host family of the report. A family the host has nothing for (InfiniBand on a node
    without it) has no lines; the page leaves it out, as node_exporter does."""
    devices = _Devices()
    yield from _network(report, info, devices)
    yield from _infiniband(report, info)
    yield from _disks(report, devices)
    yield from _cpu(report)
    yield from _stat_and_load(report)
    yield from _memory(report)
    yield from _pressure(report)
    yield from _netstat(report)


# (family, help, NicSample field): node_exporter's netdev counters (all integers).
_NETDEV_FAMILIES: Final = tuple(
    (f"node_network_{suffix}_total", f"Network device statistic {suffix}.", field) for suffix, field in _NETDEV
)


def _network(report: pb.NodeReport, info: pb.NodeInfo | None, devices: _Devices) -> Iterator[TextFamily]:
    # Each walk of a repeated field makes a wrapper per message: walk the NICs once.
    nics = [(nic, devices[nic.name]) for nic in report.nics]
    for name, doc, field in _NETDEV_FAMILIES:
        family = TextFamily(name, "counter", doc)
        family.lines.extend([f"{name}{{{labels}}} {getattr(nic, field)}\n" for nic, labels in nics])
        yield family
    up = _family("node_network_up", "Value is 1 if operstate is 'up', 0 otherwise.", "gauge")
    carrier = _family("node_network_carrier", "Network device property: carrier", "gauge")
    changes = _family("node_network_carrier_changes_total", "Network device property: carrier_changes_total", "counter")
    speed = _family("node_network_speed_bytes", "Network device property: speed_bytes", "gauge")
    mtu = _family("node_network_mtu_bytes", "Network device property: mtu_bytes", "gauge")
    # A speed the operator configured is the agent's own knowledge, not the kernel's: node_exporter
    # would not show it, so it goes to the highway families only.
    configured = {n.name for n in info.nics if n.speed_source == "config"} if info is not None else set()
    for nic, labels in nics:
        if nic.operstate:
            _add(up, labels, 1 if nic.operstate == "up" else 0)
        if nic.HasField("carrier"):
            _add(carrier, labels, 1 if nic.carrier else 0)
        if nic.HasField("carrier_changes_total"):
            _add(changes, labels, nic.carrier_changes_total)
        if nic.HasField("speed_bytes_per_second") and nic.name not in configured:
            _add(speed, labels, nic.speed_bytes_per_second)
        if nic.HasField("mtu"):
            _add(mtu, labels, nic.mtu)
    yield from (up, carrier, changes, speed, mtu)


def _infiniband(report: pb.NodeReport, info: pb.NodeInfo | None) -> Iterator[TextFamily]:
    ports = list(report.rdma_ports)
    if not ports:  # no families at all: each would be empty
        return
    prefix = "node_infiniband_"
    state = _family(
        prefix + "state_id",
        "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)", "gauge",
    )  # fmt: skip
    physical = _family(
        prefix + "physical_state_id",
        "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, "
        "5: link up, 6: link error recover, 7: phytest)", "gauge",
    )  # fmt: skip
    rate = _family(prefix + "rate_bytes_per_second", "Maximum signal transfer rate", "gauge")
    counters = [(_family(prefix + name, doc, "counter"), file, scale) for name, file, scale, doc in _IB_COUNTERS]
    rates = {(p.device, p.port): p for p in info.rdma_ports} if info is not None else {}
    for port in ports:
        labels = f'{label("device", port.device)},port="{port.port}"'
        if port.HasField("state_id"):
            _add(state, labels, port.state_id)
        if port.HasField("phys_state_id"):
            _add(physical, labels, port.phys_state_id)
        port_rate = port.rate_bytes_per_second if port.HasField("rate_bytes_per_second") else None
        described = rates.get((port.device, port.port))
        if port_rate is None and described is not None and described.HasField("rate_bytes_per_second"):
            port_rate = described.rate_bytes_per_second
        if port_rate is not None:
            _add(rate, labels, port_rate)
        values = dict(port.counters)  # one copy of the map, not a lookup through it per counter
        for family, file, scale in counters:
            value = values.get(file)
            if value is not None:
                family.lines.append(f"{family.name}{{{labels}}} {value * scale}\n")
    yield from (state, physical, rate)
    yield from (family for family, _, _ in counters)


_OPTIONAL_DISK_FIELDS: Final = frozenset(f.name for f in pb.DiskSample.DESCRIPTOR.fields if f.has_presence)
# (family, type, help, DiskSample field, scale, whether the field may be unset)
_DISK_FAMILIES: Final = tuple(
    (f"node_disk_{suffix}", "gauge" if suffix == "io_now" else "counter", doc, field, scale,
     field in _OPTIONAL_DISK_FIELDS)
    for suffix, field, scale, doc in _DISK
)  # fmt: skip


def _disks(report: pb.NodeReport, devices: _Devices) -> Iterator[TextFamily]:
    disks = [(disk, devices[disk.name]) for disk in report.disks]
    for name, kind, doc, field, scale, optional in _DISK_FAMILIES:
        family = TextFamily(name, kind, doc)
        lines = family.lines
        for disk, labels in disks:
            value = getattr(disk, field)
            if value or not optional or disk.HasField(field):
                # Counts stay integers; milliseconds and bytes scaled to seconds and sectors are floats.
                lines.append(f"{name}{{{labels}}} {value if scale == 1 else number(value * scale)}\n")
        yield family


# (mode, CpuTimes field)
_CPU_FIELDS: Final = tuple((mode, f"{mode}_seconds_total") for mode in _CPU_MODES)
assert _CPU_MODES == ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")  # _cpu's order


def _cpu(report: pb.NodeReport) -> Iterator[TextFamily]:
    """A node has up to a few hundred CPUs, 8 lines each: most of a big node's host families, so
    each CPU's 8 values are read as attributes and written in one go (repr is the text format's
    float where finite); a line stays one entry (remote write reads the lines)."""
    name = "node_cpu_seconds_total"
    family = TextFamily(name, "counter", "Seconds the CPUs spent in each mode.")
    lines = family.lines
    for cpu in report.host.cpus:
        p = f'{name}{{{label("cpu", cpu.cpu)},mode="'
        user, nice, system, idle = (
            cpu.user_seconds_total,
            cpu.nice_seconds_total,
            cpu.system_seconds_total,
            cpu.idle_seconds_total,
        )
        iowait, irq, softirq, steal = (
            cpu.iowait_seconds_total,
            cpu.irq_seconds_total,
            cpu.softirq_seconds_total,
            cpu.steal_seconds_total,
        )
        total = user + nice + system + idle + iowait + irq + softirq + steal
        if total - total == 0.0:  # all finite (an inf or NaN makes the sum inf or NaN)
            lines += (
                f'{p}user"}} {user!r}\n', f'{p}nice"}} {nice!r}\n', f'{p}system"}} {system!r}\n',
                f'{p}idle"}} {idle!r}\n', f'{p}iowait"}} {iowait!r}\n', f'{p}irq"}} {irq!r}\n',
                f'{p}softirq"}} {softirq!r}\n', f'{p}steal"}} {steal!r}\n',
            )  # fmt: skip
        else:
            for mode, field in _CPU_FIELDS:
                lines.append(f'{p}{mode}"}} {format_value(getattr(cpu, field))}\n')
    yield family


# (family, HostSample field, type, help): node_exporter's stat and loadavg collectors.
_HOST_SCALARS: Final = (
    ("node_context_switches_total", "context_switches_total", "counter", "Total number of context switches."),
    ("node_procs_running", "procs_running", "gauge", "Number of processes in runnable state."),
    ("node_procs_blocked", "procs_blocked", "gauge", "Number of processes blocked waiting for I/O to complete."),
    ("node_load1", "load1", "gauge", "1m load average."),
    ("node_load5", "load5", "gauge", "5m load average."),
    ("node_load15", "load15", "gauge", "15m load average."),
)


def _stat_and_load(report: pb.NodeReport) -> Iterator[TextFamily]:
    host = report.host
    for name, field, kind, doc in _HOST_SCALARS:
        if host.HasField(field):
            family = _family(name, doc, kind)
            _add(family, "", getattr(host, field))
            yield family


def _memory(report: pb.NodeReport) -> Iterator[TextFamily]:
    host = report.host
    for field, attribute in _MEMINFO:
        if host.HasField(attribute):
            name = f"node_memory_{field}_bytes"
            family = _family(name, f"Memory information field {field}_bytes.", "gauge")
            _add(family, "", getattr(host, attribute))
            yield family


def _pressure(report: pb.NodeReport) -> Iterator[TextFamily]:
    host = report.host
    for resource, attribute, waiting_doc, stalled_doc in _PRESSURE:
        if not host.HasField(attribute):
            continue
        pressure: pb.Pressure = getattr(host, attribute)
        name = f"node_pressure_{resource}_waiting_seconds_total"
        waiting = _family(name, waiting_doc, "counter")
        _add(waiting, "", pressure.some_total_microseconds / 1e6)
        yield waiting
        if stalled_doc is not None and pressure.HasField("full_total_microseconds"):
            name = f"node_pressure_{resource}_stalled_seconds_total"
            stalled = _family(name, stalled_doc, "counter")
            _add(stalled, "", pressure.full_total_microseconds / 1e6)
            yield stalled


# (node_exporter family, HostSample field): its netstat collector writes each column of
# net/snmp as node_netstat_<Proto>_<Column>, untyped, help "Statistic <Proto><Column>.".
_NETSTAT: Final = (
    ("Tcp", "OutSegs", "tcp_out_segments_total"),
    ("Tcp", "RetransSegs", "tcp_retransmitted_segments_total"),
)


def _netstat(report: pb.NodeReport) -> Iterator[TextFamily]:
    host = report.host
    for proto, column, attribute in _NETSTAT:
        if host.HasField(attribute):
            family = _family(f"node_netstat_{proto}_{column}", f"Statistic {proto}{column}.", "untyped")
            _add(family, "", getattr(host, attribute))
            yield family
