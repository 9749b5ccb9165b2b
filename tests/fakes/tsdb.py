"""Real remote-write receivers on loopback for the live tests and the bench: Debian's Prometheus
(``--web.enable-remote-write-receiver``) and Debian's VictoriaMetrics (with its ``vmalert`` for
recording rules), one interface: start, stop, the write URL, instant queries, the samples a
node has stored and the samples the receiver took in all (its own counter).

Both can evaluate recording rules: Prometheus loads them itself, VictoriaMetrics through
``vmalert``, which reads and writes back to it (as operators run it)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.fleet import free_port, wait_for


class Receiver:
    """What a test asks of either kind."""

    name = ""
    binaries: tuple[str, ...] = ()

    def __init__(self, tmp: Path, rule_files: tuple[Path, ...] = ()) -> None:
        self.port = free_port()
        self.tmp = tmp
        self.rule_files = rule_files
        self.procs: list[subprocess.Popen[bytes]] = []
        tmp.mkdir(parents=True, exist_ok=True)

    @classmethod
    def available(cls) -> bool:
        return all(shutil.which(b) is not None for b in cls.binaries)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def write_url(self) -> str:
        return f"{self.base}/api/v1/write"

    def start(self) -> Receiver:
        raise NotImplementedError

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self.procs.clear()

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        body = self._get_json("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def names(self) -> set[str]:
        """Every metric name stored."""
        return set(self._get_json("/api/v1/label/__name__/values", {})["data"])

    def stored_samples(self, node: str, at: float) -> int:
        """Every sample of the node's series (each series' raw samples, over two hours), less
        what recording rules made of them (a colon in the name)."""
        return sum(len(series["values"]) for series in self.query(f"{_node_selector(node)}[2h]", at))

    def samples_received(self) -> float:
        """The receiver's own count of samples taken by remote write."""
        raise NotImplementedError

    def _get_json(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            return dict(json.loads(answer.read()))

    def _metrics(self, base: str | None = None) -> str:
        with urllib.request.urlopen(f"{base or self.base}/metrics", timeout=10) as answer:
            return str(answer.read().decode())

    def _spawn(self, command: list[str], log: str) -> None:
        self.procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=(self.tmp / log).open("ab")))

    def _ready(self, url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False


def _node_selector(node: str) -> str:
    return '{node="' + node + '",__name__!~".*:.*"}'


def recording_only(rule_files: tuple[Path, ...], tmp: Path) -> list[Path]:
    """The recording rules of each file (vmalert wants an Alertmanager for alerting rules)."""
    out = []
    for path in rule_files:
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            group["rules"] = [rule for rule in group["rules"] if "record" in rule]
            group["interval"] = "1s"
        doc["groups"] = [group for group in doc["groups"] if group["rules"]]
        target = tmp / f"recording-{path.name}"
        target.write_text(yaml.safe_dump(doc))
        out.append(target)
    return out


class Prometheus(Receiver):
    name = "prometheus"
    binaries = ("prometheus",)

    def __init__(self, tmp: Path, rule_files: tuple[Path, ...] = (), *, out_of_order_window: str = "") -> None:
        super().__init__(tmp, rule_files)
        # A shard that died re-sends reports older than what it had written: Prometheus refuses
        # them (the whole request) unless it accepts samples this far out of order.
        self.out_of_order_window = out_of_order_window

    def start(self) -> Prometheus:
        config: dict[str, Any] = {"global": {"scrape_interval": "1h", "evaluation_interval": "1s"}}
        if self.out_of_order_window:
            config["storage"] = {"tsdb": {"out_of_order_time_window": self.out_of_order_window}}
        if self.rule_files:
            config["rule_files"] = [str(p) for p in recording_only(self.rule_files, self.tmp)]
        (self.tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self._spawn(
            [shutil.which("prometheus") or "prometheus", f"--config.file={self.tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.tmp / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--web.enable-remote-write-receiver"],
            "prometheus.log",
        )  # fmt: skip
        assert wait_for(lambda: self._ready(f"{self.base}/-/ready"), 60, interval=0.2), self.log_tail()
        return self

    def samples_received(self) -> float:
        # Appended to the head: what remote write stored (no scrapes here: the interval is an hour).
        lines = self._metrics().splitlines()
        return sum(float(x.split()[-1]) for x in lines if x.startswith("prometheus_tsdb_head_samples_appended_total"))

    def log_tail(self) -> str:
        return (self.tmp / "prometheus.log").read_text()[-2000:]


class VictoriaMetrics(Receiver):
    name = "victoria-metrics"
    binaries = ("victoria-metrics", "vmalert")

    def start(self) -> VictoriaMetrics:
        self._spawn(
            [shutil.which("victoria-metrics") or "victoria-metrics", f"-storageDataPath={self.tmp / 'vm-data'}",
             f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=1y",
             # Queries see a sample at once (the default hides the last 30 s), and are not cached.
             "-search.latencyOffset=0s", "-search.disableCache"],
            "victoria-metrics.log",
        )  # fmt: skip
        assert wait_for(lambda: self._ready(f"{self.base}/health"), 60, interval=0.2), self.log_tail()
        if self.rule_files:
            self.vmalert_port = free_port()
            rules = [f"-rule={p}" for p in recording_only(self.rule_files, self.tmp)]
            self._spawn(
                [shutil.which("vmalert") or "vmalert", *rules, f"-datasource.url={self.base}",
                 f"-remoteWrite.url={self.base}", "-evaluationInterval=1s",
                 f"-httpListenAddr=127.0.0.1:{self.vmalert_port}"],
                "vmalert.log",
            )  # fmt: skip
            ready = f"http://127.0.0.1:{self.vmalert_port}/health"
            assert wait_for(lambda: self._ready(ready), 60, interval=0.2), (self.tmp / "vmalert.log").read_text()
        return self

    def stored_samples(self, node: str, at: float) -> int:
        # /api/v1/export gives every raw sample of every series, one JSON line a series.
        url = f"{self.base}/api/v1/export?{urllib.parse.urlencode({'match[]': _node_selector(node)})}"
        with urllib.request.urlopen(url, timeout=60) as answer:
            return sum(len(json.loads(line)["values"]) for line in answer.read().splitlines() if line.strip())

    def flush(self) -> None:
        """Make what was just written searchable (VictoriaMetrics buffers it for about a second)."""
        with urllib.request.urlopen(f"{self.base}/internal/force_flush", timeout=30):
            pass

    def samples_received(self) -> float:
        total = 0.0
        for line in self._metrics().splitlines():
            if line.startswith('vm_rows_inserted_total{type="promremotewrite"}'):
                total += float(line.split()[-1])
        return total

    def log_tail(self) -> str:
        return (self.tmp / "victoria-metrics.log").read_text()[-2000:]


RECEIVERS: dict[str, type[Receiver]] = {"prometheus": Prometheus, "victoria-metrics": VictoriaMetrics}
