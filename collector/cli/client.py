"""The query commands' side of the wire: flags to reach a collector, and one call.

Several collectors (``--collector`` repeated, or ``[fleet] collectors`` of ``--config`` when no
``--collector`` is given): every one is asked at once (``collector/fleet/fanout.py``), their
streams merged page by page (``collector/fleet/stream_merge.py``; the ledger's rows by
``collector/fleet/merge.py``), a collector that did not answer said in one line on stderr; the
command fails only when none answered. One collector: one call, as ever."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import grpc

from nodeagent.collector.config import CollectorConfigError, load_collector_config
from nodeagent.collector.fleet.answer_pages import KINDS, PAGE_BYTES
from nodeagent.collector.fleet.config import FleetConfig
from nodeagent.collector.fleet.fanout import Answer, Shard, ShardClients, ask_all_sync, ask_stream_sync
from nodeagent.collector.fleet.merge import merge_ledger
from nodeagent.collector.fleet.stream_merge import merged_pages
from nodeagent.collector.query import worker_port
from nodeagent.core.program.command_line import RuntimeFailure
from nodeagent.core.transport.channel import ClientSecurity, open_channel, parse_target
from nodeagent.core.transport.diagnosis import unreachable_reason
from nodeagent.core.transport.security import check_token_transport
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_COLLECTOR = "127.0.0.1:50051"

_REQUESTS: dict[str, Any] = {
    "LatestReport": pb.LatestReportRequest,
    "StreamHistory": pb.HistoryRequest,
    "Ledger": pb.LedgerRequest,
    "ForgetNode": pb.ForgetNodeRequest,
    "StreamNodes": pb.ListNodesRequest,
    "StreamAlerts": pb.ListAlertsRequest,
    "StreamJobs": pb.ListJobsRequest,
    "StreamJobTotals": pb.JobsRequest,
}
# How several collectors' answers to a unary method are made one.
_MERGES: dict[str, Callable[[list[Answer]], Any]] = {"Ledger": merge_ledger}


def client_options(func: F) -> F:
    """``--collector`` and how to reach it (TLS, token), for commands that query a collector."""
    decorators = [
        click.option(
            "--collector",
            multiple=True,
            help=f"Collector HOST:PORT (default: {DEFAULT_COLLECTOR}, or the [fleet] collectors of --config); "
            "repeat it to ask several and merge their answers.",
        ),
        click.option(
            "--config",
            "config_path",
            type=click.Path(path_type=Path, dir_okay=False),
            help="collector.toml: without --collector, ask its [fleet] collectors (with its [fleet] TLS and token).",
        ),
        click.option("--tls-ca", type=click.Path(path_type=Path), help="CA of the collector's certificate: use TLS."),
        click.option("--tls-cert", type=click.Path(path_type=Path), help="Operator client certificate (mutual TLS)."),
        click.option("--tls-key", type=click.Path(path_type=Path), help="Operator client key (mutual TLS)."),
        click.option("--tls-server-name", help="Name to check the collector's certificate against."),
        click.option("--token-file", type=click.Path(path_type=Path), help="File holding the operator's bearer token."),
        click.option(
            "--insecure", is_flag=True, help="Send the token to a non-loopback collector without TLS (warns)."
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0.1),
            default=5.0,
            show_default=True,
            help="Seconds to wait for the collector's answer.",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def query(options: dict[str, Any], method: str, **fields: Any) -> Any:
    """Call one unary Query method; a one-line ``ClickException`` when the collector cannot answer.
    Several collectors: the merged answer (``Ledger``; its ``shards`` say who answered)."""
    if len(collectors(options)) > 1:
        return _MERGES[method](ask_each(options, method, **fields))
    target, security = _reach(options)
    response = fetch(target, security, method, timeout=float(options["timeout"]), **fields)
    _say_missing_workers(target, response)
    return response


def _say_missing_workers(target: str, response: Any) -> None:
    """A front (serve --workers N) merges its workers: one that did not answer is said, as a
    collector of several is, and its nodes are missing from what is shown."""
    for shard in getattr(response, "shards", ()):
        if not shard.answered:
            click.echo(
                f"nodeagent-collector: {shard.shard} of the collector at {target} did not answer: {shard.error}; "
                "its nodes are missing here",
                err=True,
            )


def query_whole(options: dict[str, Any], method: str, **fields: Any) -> Any:
    """A streaming Query method (``StreamNodes``, ``StreamAlerts``, ``StreamJobs``,
    ``StreamJobTotals``) read page by page into one answer of its page's type, however large:
    no answer is bounded by one message. Several collectors: their streams merged page by page
    (``fleet/stream_merge.py``), one line on stderr for each that did not answer,
    ``RuntimeFailure`` when none did."""
    kind = KINDS[method]
    whole: Any = kind.page()
    if not several(options):
        query_pages(options, method, whole.MergeFrom, **fields)
        _say_missing_workers(_reach(options)[0], whole)
        return whole
    shards = _shards(options)
    request = _REQUESTS[method](**fields)

    async def run() -> None:
        clients = ShardClients(shards)
        try:
            pages = merged_pages(clients, kind, request, float(options["timeout"]), PAGE_BYTES)
            async for page in pages:
                whole.MergeFrom(page)
        finally:
            await clients.close()

    asyncio.run(run())
    _reported([Answer(s.shard, None, s.error) for s in whole.shards], method)
    return whole


def several(options: dict[str, Any]) -> bool:
    return len(collectors(options)) > 1


def collectors(options: dict[str, Any]) -> list[str]:
    """The collectors to ask: ``--collector`` as given, else ``[fleet] collectors`` of
    ``--config``, else the default one."""
    given = list(options.get("collector") or ())
    if given:
        return list(dict.fromkeys(given))
    fleet = _fleet(options)
    return list(fleet.collectors) if fleet is not None and fleet.collectors else [DEFAULT_COLLECTOR]


def ask_each(options: dict[str, Any], method: str, *, report: bool = True, **fields: Any) -> list[Answer]:
    """``method`` on every collector at once: one line on stderr for each that did not answer,
    ``RuntimeFailure`` (exit 1) when none did (``report=False``: the answers as they are)."""
    shards = _shards(options)
    answers = ask_all_sync(shards, method, _REQUESTS[method](**fields), float(options["timeout"]))
    return _reported(answers, method) if report else answers


def ask_each_pages(options: dict[str, Any], method: str, **fields: Any) -> list[Answer]:
    """A streaming method on every collector at once (each answer holds its pages)."""
    answers = ask_stream_sync(_shards(options), method, _REQUESTS[method](**fields), float(options["timeout"]))
    return _reported(answers, method)


def _reported(answers: list[Answer], method: str) -> list[Answer]:
    workers = [a for a in answers if worker_port.is_refusal(a.error)]
    if workers:  # the operator's input: a worker's port given for a collector's
        why = workers[0].error.partition(": ")[2]
        raise click.ClickException(f"the collector at {workers[0].shard} refused {method}: {why}")
    for answer in answers:
        if answer.error:
            click.echo(f"nodeagent-collector: collector {answer.shard} did not answer: {answer.error}", err=True)
    if not any(a.answered for a in answers):
        raise RuntimeFailure(f"no collector answered {method} ({', '.join(a.shard for a in answers)})")
    return answers


def _shards(options: dict[str, Any]) -> list[Shard]:
    targets = collectors(options)
    security = _security(options)
    insecure = bool(options["insecure"])
    fleet = _fleet(options)
    if not options.get("collector") and fleet is not None and not _security_flags(options):
        security, insecure = fleet.security, insecure or fleet.insecure
    try:
        for target in targets:
            parse_target(target)
        security.check()
        check_token_transport(targets, security, insecure=insecure)
    except ValueError as err:
        raise click.UsageError(str(err)) from err
    return [Shard(t, t, security) for t in targets]


def query_pages(options: dict[str, Any], method: str, on_page: Callable[[Any], None], **fields: Any) -> None:
    """Call one streaming Query method, ``on_page`` for each message as it comes; ``--timeout``
    bounds the wait for each message, not the whole stream. The same one-line failures as ``query``."""
    target, security = _reach(options)
    read_pages(target, security, method, on_page, timeout=float(options["timeout"]), **fields)


def read_pages(
    target: str, security: ClientSecurity, method: str, on_page: Callable[[Any], None], *, timeout: float = 5.0,
    **fields: Any,
) -> None:  # fmt: skip
    """A streaming Query method on one collector, ``on_page`` for each message; ``RuntimeFailure``
    (one line, exit 1) when the collector cannot answer."""
    request = _REQUESTS[method](**fields)
    try:
        asyncio.run(_pages(target, security, method, request, timeout, on_page))
    except grpc.aio.AioRpcError as err:
        raise _failure(target, security, method, err) from err


def fetch_whole(target: str, security: ClientSecurity, method: str, *, timeout: float = 5.0, **fields: Any) -> Any:
    """A streaming Query method on one collector, its pages read into one answer."""
    whole = KINDS[method].page()
    read_pages(target, security, method, whole.MergeFrom, timeout=timeout, **fields)
    return whole


def _reach(options: dict[str, Any]) -> tuple[str, ClientSecurity]:
    (target,) = collectors(options)
    security = _security(options)
    fleet = _fleet(options)
    if not options.get("collector") and fleet is not None and fleet.collectors and not _security_flags(options):
        security = fleet.security
    try:
        parse_target(target)
        security.check()
        check_token_transport([target], security, insecure=bool(options["insecure"]))
    except ValueError as err:
        raise click.UsageError(str(err)) from err
    return target, security


def _security(options: dict[str, Any]) -> ClientSecurity:
    return ClientSecurity(
        ca_file=options["tls_ca"], cert_file=options["tls_cert"], key_file=options["tls_key"],
        token_file=options["token_file"], server_name=options["tls_server_name"],
    )  # fmt: skip


def _security_flags(options: dict[str, Any]) -> bool:
    return any(options[k] for k in ("tls_ca", "tls_cert", "tls_key", "token_file", "tls_server_name"))


def _fleet(options: dict[str, Any]) -> FleetConfig | None:
    """``[fleet]`` of ``--config`` (None without one)."""
    path = options.get("config_path")
    return None if path is None else _fleet_of(str(path))


@functools.cache
def _fleet_of(path: str) -> FleetConfig:
    try:
        return load_collector_config(Path(path)).fleet
    except CollectorConfigError as err:
        raise click.UsageError(str(err)) from err


def fetch(target: str, security: ClientSecurity, method: str, *, timeout: float = 5.0, **fields: Any) -> Any:
    """One Query call; ``RuntimeFailure`` (one line, exit 1) when the collector cannot answer."""
    request = _REQUESTS[method](**fields)
    try:
        return asyncio.run(_call(target, security, method, request, timeout))
    except grpc.aio.AioRpcError as err:
        raise _failure(target, security, method, err) from err


def _failure(target: str, security: ClientSecurity, method: str, err: grpc.aio.AioRpcError) -> click.ClickException:
    """The one line a failed call ends with: exit 1 for the world, 2 for a worker's port given
    for a collector's (the operator's input)."""
    status = f"{err.code().name}: {err.details()}"
    if worker_port.is_refusal(status):
        front = worker_port.front_target(target, err)
        where = f" (--collector {front})" if front is not None and front not in str(err.details()) else ""
        return click.ClickException(f"the collector at {target} refused {method}: {err.details()}{where}")
    if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        reason = unreachable_reason(target, security, str(err.details()), probe=True)
        if reason is None:  # gRPC's own words: what failed, not what to check
            reason = f"{status}; {_serve_hint(target)}"
        return RuntimeFailure(f"cannot reach the collector at {target}: {reason}")
    return RuntimeFailure(f"the collector at {target} refused {method}: {status}")


def _serve_hint(target: str) -> str:
    return f"is `nodeagent-collector serve` running there, and is {target} its --listen?"


async def _call(target: str, security: ClientSecurity, method: str, request: Any, timeout: float) -> Any:
    async with open_channel(target, security) as channel:
        stub = pb_grpc.QueryStub(channel)
        return await getattr(stub, method)(request, timeout=timeout, metadata=security.metadata())


async def _pages(
    target: str, security: ClientSecurity, method: str, request: Any, timeout: float, on_page: Callable[[Any], None]
) -> None:
    async with open_channel(target, security) as channel:
        call = getattr(pb_grpc.QueryStub(channel), method)(request, metadata=security.metadata())
        while True:
            try:
                page = await asyncio.wait_for(call.read(), timeout)
            except TimeoutError:
                call.cancel()
                raise RuntimeFailure(
                    f"cannot reach the collector at {target}: no answer to {method} within {timeout:g} s"
                ) from None
            if page is grpc.aio.EOF:
                return
            on_page(page)
