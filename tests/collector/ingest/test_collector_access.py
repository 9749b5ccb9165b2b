"""Who may do what on a collector: nodes stream, operators query, scrapers read /metrics.

Each case here was a hole: a node's certificate or token read every node's reports, /metrics and
reflection answered anyone, a certificate's common name beat its SANs, the database was readable
by all, and a token crossed the network in plaintext.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
import structlog.testing
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.core.transport.channel import ClientSecurity
from nodeagent.core.transport.security import (
    ServerSecurity,
    certificate_names,
    check_token_transport,
    http_certificate_names,
)
from nodeagent.core.wire.framing import frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.certs import Authority, Pem
from tests.fakes.fleet import Collector, free_port, processes
from tests.fakes.ingest_client import hello_message, send_messages, small_report, tls_channel
from tests.fakes.trees import REPO

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

Metadata = Sequence[tuple[str, str]]


def _stream(channel: grpc.Channel, node: str, metadata: Metadata = ()) -> grpc.StatusCode:
    return send_messages(
        channel, [hello_message(node), frame_report(small_report(node, 1).SerializeToString())], metadata
    )


def _reads(channel: grpc.Channel, metadata: Metadata = ()) -> dict[str, grpc.StatusCode]:
    """The status of every reading call: the four queries and reflection."""
    query = pb_grpc.QueryStub(channel)
    calls = {
        "StreamNodes": lambda: list(query.StreamNodes(pb.ListNodesRequest(), timeout=10, metadata=metadata)),
        "StreamAlerts": lambda: list(query.StreamAlerts(pb.ListAlertsRequest(), timeout=10, metadata=metadata)),
        "StreamJobs": lambda: list(query.StreamJobs(pb.ListJobsRequest(), timeout=10, metadata=metadata)),
        "LatestReport": lambda: query.LatestReport(
            pb.LatestReportRequest(node_id="node-a"), timeout=10, metadata=metadata
        ),
        "reflection": lambda: list(
            reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10, metadata=metadata
            )
        ),
    }
    seen = {}
    for name, call in calls.items():
        try:
            call()
            seen[name] = grpc.StatusCode.OK
        except grpc.RpcError as err:
            seen[name] = err.code()
    return seen


def _all(code: grpc.StatusCode) -> dict[str, grpc.StatusCode]:
    return dict.fromkeys(("StreamNodes", "StreamAlerts", "StreamJobs", "LatestReport", "reflection"), code)


def _health(channel: grpc.Channel) -> int:
    return int(health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status)


def _tls_args(server: Pem, ca: Authority) -> list[str]:
    return ["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.cert_file)]


def _collector_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", *args], cwd=REPO, capture_output=True, text=True, timeout=30,
        check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_a_node_certificate_streams_but_only_an_operator_certificate_reads(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "fleet")
    server = ca.issue("collector", dns=("localhost",), ips=("127.0.0.1",), server=True)
    node = ca.issue("node-a", dns=("node-a",), server=False)
    operator = ca.issue("ops-console", dns=("ops-console",), server=False)
    collector = Collector(
        workers=ONE_PROCESS,
        db=tmp_path / "c.db",
        port=free_port(),
        args=[*_tls_args(server, ca), "--operator-identity", "ops-console"],
    )
    # The CLI takes the operator's credentials from the settings file too ([command.nodes]).
    settings = tmp_path / "collector.toml"
    settings.write_text(
        f'[command.nodes]\ntls_ca = "{ca.cert_file}"\ntls_cert = "{operator.cert}"\ntls_key = "{operator.key}"\n'
    )
    with processes() as started:
        started.append(collector.start())
        with tls_channel(collector.address, ca.cert_file, node.cert, node.key) as channel:
            streamed = _stream(channel, "node-a")
            as_node = _reads(channel)
            health_as_node = _health(channel)
        with tls_channel(collector.address, ca.cert_file, operator.cert, operator.key) as channel:
            as_operator = _reads(channel)
            operator_streaming = _stream(channel, "ops-console")
        listed = _collector_cli(
            "nodes", "--json", "--collector", collector.address, env={"NODEAGENT_CONFIG": str(settings)}
        )
        refused = _collector_cli(
            "nodes", "--collector", collector.address, "--tls-ca", str(ca.cert_file), "--tls-cert", str(node.cert),
            "--tls-key", str(node.key),
        )  # fmt: skip
    assert streamed == grpc.StatusCode.OK
    assert as_node == _all(grpc.StatusCode.PERMISSION_DENIED)
    assert health_as_node == health_pb2.HealthCheckResponse.SERVING
    assert as_operator == _all(grpc.StatusCode.OK)
    assert operator_streaming == grpc.StatusCode.PERMISSION_DENIED  # an operator is not a node
    assert listed.returncode == 0, listed.stderr
    assert '"node_id": "node-a"' in listed.stdout
    assert refused.returncode == 1  # a refusal is a runtime failure, not bad input
    assert "PERMISSION_DENIED" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_tokens_split_nodes_operators_and_scrapers(tmp_path: Path) -> None:
    tokens = {}
    for role in ("node", "operator", "scrape"):
        tokens[role] = tmp_path / f"{role}.token"
        tokens[role].write_text(f"{role}-secret\n")
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(),
        args=["--token-file", str(tokens["node"]), "--operator-token-file", str(tokens["operator"]),
              "--scrape-token-file", str(tokens["scrape"])],
    )  # fmt: skip

    def bearer(role: str) -> Metadata:
        return [("authorization", f"Bearer {role}-secret")]

    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            streamed = _stream(channel, "node-a", bearer("node"))
            reads = {
                "none": _reads(channel),
                "wrong": _reads(channel, bearer("nobody")),
                "node": _reads(channel, bearer("node")),
                "scrape": _reads(channel, bearer("scrape")),
                "operator": _reads(channel, bearer("operator")),
            }
            health_open = _health(channel)
        scrapes = {role: _get(f"http://{collector.http_address}/metrics", token=f"{role}-secret") for role in tokens}
        scrapes["none"] = _get(f"http://{collector.http_address}/metrics")
        healthz = _get(f"http://{collector.http_address}/healthz")
        listed = collector.nodes("--token-file", str(tokens["operator"]))
        log = collector.log.read_text() if collector.log else ""
    assert streamed == grpc.StatusCode.OK
    assert reads == {
        "none": _all(grpc.StatusCode.UNAUTHENTICATED),
        "wrong": _all(grpc.StatusCode.UNAUTHENTICATED),
        "node": _all(grpc.StatusCode.PERMISSION_DENIED),
        "scrape": _all(grpc.StatusCode.PERMISSION_DENIED),
        "operator": _all(grpc.StatusCode.OK),
    }
    assert health_open == health_pb2.HealthCheckResponse.SERVING
    assert {role: status for role, (status, _body) in scrapes.items()} == {
        "none": 401, "node": 403, "scrape": 200, "operator": 200,
    }  # fmt: skip
    assert "nodeagent_ingest_reports_total 1.0" in scrapes["scrape"][1]
    assert "node-a" not in scrapes["node"][1]
    assert healthz == (200, "ok\n")
    assert [n["node_id"] for n in listed] == ["node-a"]
    assert not any(f"{role}-secret" in log for role in tokens)


def test_the_node_token_alone_reads_nothing(tmp_path: Path) -> None:
    """The setup of a site that had only --token-file: its node token no longer reads."""
    token = tmp_path / "node.token"
    token.write_text("node-secret\n")
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(), args=["--token-file", str(token)]
    )
    node: Metadata = [("authorization", "Bearer node-secret")]
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            streamed = _stream(channel, "node-a", node)
            reads = {"none": _reads(channel), "node": _reads(channel, node)}
            health_open = _health(channel)
        scrapes = {
            "none": _get(f"http://{collector.http_address}/metrics")[0],
            "node": _get(f"http://{collector.http_address}/metrics", token="node-secret")[0],
        }
        log = collector.log.read_text() if collector.log else ""
    assert streamed == grpc.StatusCode.OK
    assert reads == {"none": _all(grpc.StatusCode.UNAUTHENTICATED), "node": _all(grpc.StatusCode.PERMISSION_DENIED)}
    assert health_open == health_pb2.HealthCheckResponse.SERVING
    assert scrapes == {"none": 401, "node": 403}
    assert "no operator (--operator-identity, --operator-token-file): every query is refused" in log


def test_metrics_over_mutual_tls_need_a_scraper_certificate(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "fleet")
    pem = ca.issue("collector", dns=("localhost",), ips=("127.0.0.1",), server=True)
    node = ca.issue("node-a", dns=("node-a",), server=False)
    scraper = ca.issue("prometheus", dns=("prometheus",), server=False)
    operator = ca.issue("ops", dns=("ops",), server=False)
    security = ServerSecurity(
        cert_file=pem.cert, key_file=pem.key, client_ca_file=ca.cert_file,
        operator_identities=("ops",), scrape_identities=("prometheus",),
    )  # fmt: skip

    def client(cert: Pem | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(ca.cert_file))
        if cert is not None:
            context.load_cert_chain(cert.cert, cert.key)
        return context

    async def scenario() -> dict[str, tuple[int, str]]:
        config = ServerConfig(
            listen="127.0.0.1:0", db_path=tmp_path / "c.db", security=security, http_listen="127.0.0.1:0"
        )
        server = CollectorServer(config)
        await server.start()
        assert server.http is not None
        base = f"https://{server.http.address}"
        seen = {}
        try:
            for name, cert in (("none", None), ("node", node), ("scraper", scraper), ("operator", operator)):
                seen[name] = await asyncio.to_thread(_get, f"{base}/metrics", client(cert))
            seen["healthz"] = await asyncio.to_thread(_get, f"{base}/healthz", client(None))
        finally:
            await server.stop(0.1)
        return seen

    seen = asyncio.run(scenario())
    assert {name: status for name, (status, _body) in seen.items()} == {
        "none": 401, "node": 403, "scraper": 200, "operator": 200, "healthz": 200,
    }  # fmt: skip
    assert "nodeagent_build_info" in seen["scraper"][1]


def test_a_certificate_names_its_node_by_its_sans_not_its_common_name(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "fleet")
    server = ca.issue("collector", dns=("localhost",), ips=("127.0.0.1",), server=True)
    mixed = ca.issue("node-b", dns=("node-a",), server=False)  # SAN node-a, CN node-b
    cn_only = ca.issue("node-c", server=False)
    ip_only = ca.issue("node-d", ips=("10.0.0.4",), server=False)  # no DNS/URI SAN: the CN names it
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(), args=_tls_args(server, ca))
    seen = {}
    with processes() as started:
        started.append(collector.start())
        for label, pem, node in (
            ("SAN node-a, CN node-b, as node-b", mixed, "node-b"),
            ("SAN node-a, CN node-b, as node-a", mixed, "node-a"),
            ("CN only", cn_only, "node-c"),
            ("IP SAN only, CN", ip_only, "node-d"),
        ):
            with tls_channel(collector.address, ca.cert_file, pem.cert, pem.key) as channel:
                seen[label] = _stream(channel, node)
        with tls_channel(collector.address, ca.cert_file, cn_only.cert, cn_only.key) as channel:
            node_reads = _reads(channel)  # mutual TLS and no operator named: a node certificate reads nothing
    assert seen == {
        "SAN node-a, CN node-b, as node-b": grpc.StatusCode.PERMISSION_DENIED,
        "SAN node-a, CN node-b, as node-a": grpc.StatusCode.OK,
        "CN only": grpc.StatusCode.OK,
        "IP SAN only, CN": grpc.StatusCode.OK,
    }
    assert node_reads == _all(grpc.StatusCode.PERMISSION_DENIED)


def test_certificate_name_rule_is_the_same_for_grpc_and_https() -> None:
    grpc_peer = {
        "peer_uri": [b"spiffe://fleet/node-u"], "x509_common_name": [b"cn-name"], "peer_ip": [b"10.0.0.1"],
    }  # fmt: skip
    assert certificate_names(grpc_peer) == {"spiffe://fleet/node-u"}
    assert certificate_names({"x509_common_name": [b"cn-name"], "peer_ip": [b"10.0.0.1"]}) == {"cn-name"}
    https_peer = {
        "subject": ((("commonName", "cn-name"),),),
        "subjectAltName": (("DNS", "node-a"), ("URI", "spiffe://fleet/node-u"), ("IP Address", "10.0.0.1")),
    }
    assert http_certificate_names(https_peer) == {"node-a", "spiffe://fleet/node-u"}
    assert http_certificate_names(
        {"subject": https_peer["subject"], "subjectAltName": (("IP Address", "1.2.3.4"),)}
    ) == {"cn-name"}
    assert http_certificate_names(None) == frozenset()


def test_database_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    old = tmp_path / "old.db"
    old.write_bytes(b"")
    old.chmod(0o644)  # what an older collector left behind under umask 022

    async def scenario(path: Path) -> dict[str, int]:
        server = CollectorServer(ServerConfig(listen="127.0.0.1:0", db_path=path))
        await server.start()
        try:
            await server.ingest.flusher.flush()
            return {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir() if p.name.startswith(path.name)}
        finally:
            await server.stop(0.1)

    previous = os.umask(0o022)
    try:
        fresh = asyncio.run(scenario(db))
        tightened = asyncio.run(scenario(old))
    finally:
        os.umask(previous)
    # The lock and the generation files beside it (collector/store/generation.py) too.
    beside = (".lock", ".generation")
    assert fresh == {"c.db": 0o600, "c.db-wal": 0o600, "c.db-shm": 0o600, **{"c.db" + s: 0o600 for s in beside}}
    assert tightened == {
        "old.db": 0o600, "old.db-wal": 0o600, "old.db-shm": 0o600, **{"old.db" + s: 0o600 for s in beside}
    }  # fmt: skip


def test_a_token_is_not_sent_in_plaintext_beyond_loopback(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("node-secret\n")
    remote = "collector.example.net:50051"
    agent = subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "run", "--collector", remote, "--token-file", str(token)],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    query = _collector_cli("nodes", "--collector", "10.1.2.3:50051", "--token-file", str(token))
    for done in (agent, query):
        assert done.returncode == 2
        assert "refusing to send the bearer token in plaintext to" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    plain = ClientSecurity(token_file=token)
    check_token_transport(["127.0.0.1:50051", "localhost:50051", "[::1]:50051"], plain, insecure=False)
    check_token_transport(
        ["collector.example.net:50051"], ClientSecurity(token_file=token, ca_file=token), insecure=False
    )
    with structlog.testing.capture_logs() as logs:
        check_token_transport(["collector.example.net:50051"], plain, insecure=True)
    assert [entry["log_level"] for entry in logs] == ["warning"]
    assert "without TLS (--insecure)" in logs[0]["event"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--operator-identity", "ops"], "--operator-identity needs --tls-client-ca"),
        (["--scrape-identity", "prometheus"], "--scrape-identity needs --tls-client-ca"),
        (["--token-file", "{node}", "--operator-token-file", "{node}"], "--operator-token-file holds the node token"),
        (["--token-file", "{node}", "--scrape-token-file", "{node}"], "--scrape-token-file holds the node token"),
    ],
)
def test_serve_refuses_role_settings_that_cannot_work(tmp_path: Path, extra: list[str], needle: str) -> None:
    node = tmp_path / "node.token"
    node.write_text("node-secret\n")
    args = [a.format(node=node) for a in extra]
    done = _collector_cli("serve", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "c.db"), *args)
    assert done.returncode == 2
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _get(url: str, context: ssl.SSLContext | None = None, *, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status), str(response.read().decode())
    except urllib.error.HTTPError as err:
        return int(err.code), str(err.read().decode())
