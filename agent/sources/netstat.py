"""TCP segments sent and retransmitted (``<procfs>/net/snmp``, the ``Tcp:`` lines): a link that
drops or corrupts packets shows as retransmits before it shows anywhere else, and the job
roll-up compares the ratio across a job's nodes (docs/jobs.md, links).

The file holds pairs of lines per protocol, a header naming the columns and the values in the
same order (``Tcp: ... OutSegs RetransSegs ...`` / ``Tcp: ... 28860 15 ...``); the columns are
read by name, as node_exporter's netstat collector reads them, since kernels add columns.
"""

from __future__ import annotations

from nodeagent.agent.sources.base import Source
from nodeagent.agent.sources.registry import register
from nodeagent.v1 import nodeagent_pb2 as pb

# (column of the Tcp: lines, HostSample field)
_TCP_FIELDS = (("OutSegs", "tcp_out_segments_total"), ("RetransSegs", "tcp_retransmitted_segments_total"))


def parse_snmp(text: str, proto: str | None = None) -> dict[str, dict[str, int]]:
    """``Proto: names`` / ``Proto: values`` line pairs -> {proto: {name: value}}, of every
    protocol or of ``proto`` alone (the others' lines skipped unparsed: the file has six pairs,
    a tick needs one). A pair whose counts differ is left out, and so is a value that is not an
    integer (that column); MaxConn's -1 reads as -1."""
    out: dict[str, dict[str, int]] = {}
    prefix = None if proto is None else f"{proto}:"
    header: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        if prefix is not None and not line.startswith(prefix):
            continue
        name, sep, rest = line.partition(":")
        if not sep:
            header = None
            continue
        fields = rest.split()
        if header is None or header[0] != name:
            header = (name, fields)
            continue
        names = header[1]
        header = None
        if len(names) != len(fields):
            continue
        values = out.setdefault(name, {})
        for column, text_value in zip(names, fields, strict=True):
            try:
                values[column] = int(text_value)
            except ValueError:
                continue
    return out


@register
class NetstatSource(Source):
    name = "netstat"
    help = "TCP segments sent and retransmitted (net/snmp)"

    def collect(self, report: pb.NodeReport) -> None:
        text = self.ctx.files.read_text(self.ctx.roots.proc("net", "snmp"))
        if text is None:
            return
        tcp = parse_snmp(text, "Tcp").get("Tcp", {})
        host = report.host
        for column, field in _TCP_FIELDS:
            value = tcp.get(column)
            if value is not None and value >= 0:
                setattr(host, field, value)
