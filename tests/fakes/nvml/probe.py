"""Run the GPU collector for a few ticks in this process and print what it saw, as JSON.

``python -m tests.fakes.nvml.probe --ticks 2``: used by tests that need NVML found the way a
deployment finds it (``LD_LIBRARY_PATH`` set before the interpreter starts) or not found at all.
"""

from __future__ import annotations

import argparse
import json
import sys

from google.protobuf.json_format import MessageToDict

from nodeagent.agent.config import AgentConfig
from nodeagent.agent.gpu import nvml_library
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=2)
    args = parser.parse_args()
    collector = GpuSource(SourceContext(roots=Roots(), files=KernelFiles(), config=AgentConfig()))
    info = pb.NodeInfo()
    collector.scan(info)
    reports = []
    for tick in range(args.ticks):
        report = pb.NodeReport(seq=tick + 1, time_unix_seconds=1000.0 + tick)
        collector.collect(report)
        reports.append(MessageToDict(report, preserving_proto_field_name=True))
    collector.close()
    variants = {purpose: nvml_library.variant(purpose) for purpose in ("memory", "temperature", "clock_event_reasons")}
    out = {
        "info": MessageToDict(info, preserving_proto_field_name=True),
        "reports": reports,
        "calls": nvml_library.call_counts(),
        "variants": variants,
        "unavailable_reason": collector.unavailable_reason,
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
