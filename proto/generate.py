"""Regenerate the Python code of the wire contract.

python proto/generate.py            # rewrite proto/nodeagent/{v1,podresources/v1}/*_pb2*.py(i)
python proto/generate.py --out DIR  # write into DIR instead (the drift test uses this)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
# nodeagent's wire contract, the kubelet's pod-resources API (vendored) that the agent reads, and
# Prometheus' remote-write messages (collector/remote_write/).
PACKAGES = ("nodeagent/v1", "nodeagent/podresources/v1", "nodeagent/prompb")
SOURCES = sorted(p.relative_to(PROTO_ROOT).as_posix() for d in PACKAGES for p in PROTO_ROOT.glob(f"{d}/*.proto"))


def generate(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *SOURCES,
    ]
    # protoc resolves imports of google/protobuf/*.proto from grpc_tools' bundled copy.
    args.insert(1, f"-I{Path(grpc_tools.__file__).parent / '_proto'}")
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=PROTO_ROOT)
    generate(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
