#!/usr/bin/env bash
# The real-GPU check, as one command on a machine with an NVIDIA driver (and PyTorch for the
# workload phases). Every step has its own time limit, so one that hangs cannot take the rest.
#
#   1. what the driver says: nvidia-smi -L, nvlink status, and -q (saved to $OUT)
#   2. `nodeagent sample` with every source: the first JSON snapshots and the table
#   3. `nodeagent diag` against the 8xH200-sxm-ib profile, and against what one GPU should show
#   4. end to end: a collector on loopback, `nodeagent run` sampling this machine for real with
#      --max-reports, then the collector's view of the node and its /metrics for the GPU
#   5. bench/gpu_real.py: idle, matmul and starved-loader phases beside nvidia-smi, then the
#      GPU source's tick cost on the real library
#   6. bench/gpu_verdict.py: the collector's verdict on a matmul loop and two starved loaders
#   7. bench/lab.py --gpu: the bottleneck lab with a real CUDA step and the real driver (clean,
#      h2d, cpu, network; needs root for the network namespace), within LAB_SECONDS per scenario
#   8. many cores: bench/ingest_throughput.py with the collector on CPUs 0-1 (1 and 2 workers)
#      and the load generator on the others, so it takes none of the collector's cores
#
# Packages missing on the GPU machine travel as wheels in .whl/ (installed to /tmp/site), e.g.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl grpcio grpcio-health-checking grpcio-reflection protobuf structlog click psutil \
#     nvidia-ml-py prometheus-client
# at the versions of the development environment.
#
#     OUT=/tmp/out [LAB_SECONDS=35] bash bench/device_check.sh [PHASE_SECONDS]
set -u
OUT=${OUT:-/tmp/nodeagent-device-check}
PHASE_SECONDS=${1:-25}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# Uninstalled: the `nodeagent` package as links to its folders (build/src/nodeagent).
.ci/link-tree
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
    { echo "device_check: could not install the carried wheels" >&2; exit 2; }
  export PYTHONPATH=/tmp/site:$PWD/build/src:$PWD
else
  export PYTHONPATH=$PWD/build/src:$PWD
fi
PY=${PYTHON:-python3}
step() { echo; echo "== $* ($(date +%T))"; }

step "driver"
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,power.limit --format=csv
nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1
nvidia-smi nvlink -s 2>&1 | head -20
$PY -c 'import sys, grpc, google.protobuf, pynvml; print(sys.version.split()[0], "grpc", grpc.__version__, "protobuf", google.protobuf.__version__)'

step "nodeagent sample (every source)"
timeout 60 $PY -m nodeagent.agent sample --json --count 3 --interval 1 >"$OUT/sample.jsonl" 2>/tmp/sample.err
echo "rc=$? snapshots=$(wc -l <"$OUT/sample.jsonl")"
tail -5 /tmp/sample.err
timeout 60 $PY -m nodeagent.agent sample --count 2 --interval 1 2>&1 | tail -40

step "nodeagent diag --profile 8xH200-sxm-ib"
timeout 90 $PY -m nodeagent.agent diag --profile 8xH200-sxm-ib --json >"$OUT/diag.json" 2>/tmp/diag.err
echo "rc=$?"
tail -5 /tmp/diag.err
timeout 90 $PY -m nodeagent.agent diag --profile 8xH200-sxm-ib --expect-gpus 1 --expect-nvlinks 0 2>&1 | tail -40

step "end to end: collector + live agent"
rm -f /tmp/nodeagent-device.db*
$PY -m nodeagent.collector serve --listen 127.0.0.1:50551 --http-listen 127.0.0.1:9577 --db /tmp/nodeagent-device.db \
  >"$OUT/collector.log" 2>&1 &
collector=$!
sleep 2
timeout 90 $PY -m nodeagent.agent run --collector 127.0.0.1:50551 --node-id h200-device --interval 0.5 \
  --max-reports 20 --deadline 60 2>/tmp/agent-run.err | tail -3
echo "agent rc=${PIPESTATUS[0]}"
tail -5 /tmp/agent-run.err
timeout 30 $PY -m nodeagent.collector nodes --collector 127.0.0.1:50551 --json | tee "$OUT/nodes.json" | head -c 3000
echo
$PY - <<'EOF' | head -40
import urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9577/metrics", timeout=10).read().decode()
wanted = ("nodeagent_gpu_", "nodeagent_node_reports_total", "nodeagent_node_state", "nodeagent_node_gpus")
for line in text.splitlines():
    if line.startswith(wanted):
        print(line)
EOF
kill "$collector"
wait "$collector"
echo "collector rc=$?"

step "bench/gpu_real.py --phase-seconds $PHASE_SECONDS"
timeout $((PHASE_SECONDS * 3 + 240)) $PY bench/gpu_real.py --phase-seconds "$PHASE_SECONDS" --raw "$OUT/gpu-real-snapshots.jsonl"
echo "rc=$?"
step "bench/gpu_verdict.py --seconds 45"
timeout 400 $PY bench/gpu_verdict.py --seconds 45 --raw "$OUT/gpu-verdict-nodes.jsonl"
echo "rc=$?"
LAB_SECONDS=${LAB_SECONDS:-35}
step "bench/lab.py --gpu --seconds $LAB_SECONDS"
timeout $((LAB_SECONDS * 4 + 200)) $PY bench/lab.py --gpu --scenarios clean,h2d,cpu,network --seconds "$LAB_SECONDS" \
  --record "$OUT/lab" | tee "$OUT/lab.md"
echo "rc=${PIPESTATUS[0]}"
step "bench/ingest_throughput.py --workers 1,2, collector on CPUs 0-1, load generator on the rest"
LAST_CPU=$(($(nproc) - 1))
timeout 420 $PY bench/ingest_throughput.py --workers 1,2 --loads 1000,1500,2000,2500,3000,3500,4000,5000 --refine 1 \
  --seconds 8 --processes 6 --collector-cpus 0,1 --loadgen-cpus "2-$LAST_CPU" | tee "$OUT/ingest-many-core.txt"
echo "rc=${PIPESTATUS[0]}"
step "done"
