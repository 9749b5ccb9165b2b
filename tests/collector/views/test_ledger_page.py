"""The ledger page (``/ledger``) from a given ``Query.Ledger`` answer: each bar's rectangles add to
its row's held hours at the page's one scale, the sorts, a job's own section, a bad value is a 400
of one line, and the page runs nothing and styles itself only by the policy's hashed stylesheet."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from nodeagent.collector.views.fleet_assets import content_security_policy
from nodeagent.collector.views.ledger_page import LedgerPage
from nodeagent.v1 import nodeagent_pb2 as pb

NOW = 1_800_000_000.0


def _row(key: str, computing: float, cost_lost: float, **lost: float) -> pb.LedgerRow:
    held = computing + sum(lost.values())
    row = pb.LedgerRow(
        key=key, gpu_hours_held=held, gpu_hours_computing=computing, cost=held * 2.0, cost_lost=cost_lost,
        currency="USD", nodes=[f"{key}-n0", f"{key}-n1"],
    )  # fmt: skip
    row.gpu_hours_lost.update(lost)
    return row


ROWS = [
    _row("big-but-healthy", 40.0, 2.0, idle=1.0),
    _row("starved", 5.0, 9.0, network=3.0, interconnect=1.5),
    _row("alpha-waiting", 2.0, 4.0, waiting=2.0, unknown=0.25),
]


class _Page(HTMLParser):
    """The page's ledger rows (their keys and held hours) and each bar's rectangles."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.bars: list[dict[str, Any]] = []
        self.tags: list[str] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        self._in_style = tag == "style"
        assert "style" not in a and not any(k.startswith("on") for k in a), (tag, a)  # the policy refuses both
        if tag == "tr" and "ledger-row" in a.get("class", ""):
            self.rows.append(a)
        if tag == "svg" and "ledger-bar" in a.get("class", ""):
            self.bars.append({**a, "rects": []})
        if tag == "rect" and "data-gpu-hours" in a:
            self.bars[-1]["rects"].append(a)

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False


def _get(query: str, rows: list[pb.LedgerRow] = ROWS) -> tuple[str, str, bytes, list[pb.LedgerRequest]]:
    asked: list[pb.LedgerRequest] = []

    def ask(request: pb.LedgerRequest) -> pb.LedgerResponse:
        asked.append(request)
        return pb.LedgerResponse(rows=rows)

    reply = LedgerPage(ask, clock=lambda: NOW).route("/ledger", query)
    assert reply is not None
    return (*reply, asked)


def _parsed(body: bytes) -> _Page:
    page = _Page()
    page.feed(body.decode())
    return page


def test_each_bar_adds_up_to_its_rows_held_hours_at_one_scale() -> None:
    status, content_type, body, asked = _get("")
    assert status == "200 OK" and content_type.startswith("text/html")
    # The defaults: by job, the last 30 days to now, as the command.
    assert asked == [pb.LedgerRequest(since_unix_seconds=NOW - 30 * 86400, until_unix_seconds=NOW, by="job")]
    page = _parsed(body)
    assert len(page.bars) == len(ROWS) == len(page.rows)
    scales = {float(bar["data-px-per-gpu-hour"]) for bar in page.bars}
    assert len(scales) == 1  # one scale for the page: bars compare across rows
    (scale,) = scales
    assert scale == pytest.approx(360 / 41.0, rel=1e-5)  # the widest bar fills the column
    by_key = {r.key: r for r in ROWS}
    for row, bar in zip(page.rows, page.bars, strict=True):
        held = by_key[row["data-key"]].gpu_hours_held
        widths = [float(r["width"]) for r in bar["rects"]]
        assert sum(widths) / scale == pytest.approx(held, rel=1e-4)
        assert sum(float(r["data-gpu-hours"]) for r in bar["rects"]) == pytest.approx(held, rel=1e-5)
        # Stacked: each rectangle starts where the one before it ends, computing first.
        xs = [float(r["x"]) for r in bar["rects"]]
        assert xs == pytest.approx([sum(widths[:i]) for i in range(len(widths))], abs=1e-3)
        assert bar["rects"][0]["data-category"] == "computing"
    starved = page.bars[[r["data-key"] for r in page.rows].index("starved")]
    assert {r["data-category"]: float(r["data-gpu-hours"]) for r in starved["rects"]} == pytest.approx(
        {"computing": 5.0, "network": 3.0, "interconnect": 1.5}
    )
    # Money beside the hours: the lost money shared among the lost categories by their hours.
    text = body.decode()
    assert "network: 3.00 GPU-h, 6.00 USD" in text and "interconnect: 1.50 GPU-h, 3.00 USD" in text


def test_by_account_each_row_lists_its_jobs_linked_to_their_own_ledger() -> None:
    ml, none = _row("ml", 10.0, 1.0, waiting=1.0), _row("", 3.0, 0.0)
    ml.jobs.extend(["torch/train", "1234"])
    ml.stragglers.add(node_id="node-3", gpu_hours_waited=1.0)
    none.jobs.append("pod-uid-9")
    status, _type, body, asked = _get("by=account", [ml, none])
    assert status == "200 OK" and asked[0].by == "account"
    text = body.decode()
    assert [r["data-key"] for r in _parsed(body).rows] == ["ml", ""]
    assert "(no account)" in text  # the jobs billed to none still have their row
    assert "href='/ledger?job=torch%2Ftrain'" in text and "href='/ledger?job=pod-uid-9'" in text
    assert "href='/node/node-3'" in text
    assert "<th>jobs</th><th>stragglers</th>" in text
    reply = LedgerPage(lambda _r: pb.LedgerResponse(rows=[ml, none]), clock=lambda: NOW).route(
        "/api/ledger", "by=account"
    )
    assert reply is not None
    rows = json.loads(reply[2])["rows"]
    assert [(r["account"], r["jobs"]) for r in rows] == [("ml", ["torch/train", "1234"]), ("", ["pod-uid-9"])]


@pytest.mark.parametrize(
    ("sort", "order"),
    [
        ("", ["starved", "alpha-waiting", "big-but-healthy"]),  # the money lost first
        ("lost", ["starved", "alpha-waiting", "big-but-healthy"]),
        ("held", ["big-but-healthy", "starved", "alpha-waiting"]),
        ("name", ["alpha-waiting", "big-but-healthy", "starved"]),
    ],
)
def test_sorted_by_money_lost_held_or_name(sort: str, order: list[str]) -> None:
    _status, _type, body, _asked = _get(f"sort={sort}" if sort else "")
    assert [r["data-key"] for r in _parsed(body).rows] == order


def test_since_by_and_until_reach_the_query() -> None:
    *_, asked = _get("since=7d&by=node")
    assert asked == [pb.LedgerRequest(since_unix_seconds=NOW - 7 * 86400, until_unix_seconds=NOW, by="node")]
    *_, asked = _get("since=2027-01-01T00:00:00%2B00:00&until=1800000000")
    assert asked[0].since_unix_seconds == 1798761600.0 and asked[0].until_unix_seconds == NOW


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("sort=money", "sort: expected one of lost, held, name, worth, got 'money'"),
        ("by=rack", "by: expected one of job, node, fleet, account, namespace, got 'rack'"),
        ("since=7x", "since: '7x' is not a span (7d, 12h) nor a time"),
        ("since=-3d", "since: '-3d' is not a span (7d, 12h) nor a time"),
        ("since=yesterday", "since: 'yesterday' is not a span (7d, 12h) nor a time"),
        ("until=soon", "until: 'soon' is neither unix seconds nor ISO 8601"),
        ("since=1900000000", "since: the span starts at 1900000000, not before its end 1800000000"),
        ("job=a&by=node", "job: a job's ledger is by=job"),
        ("color=red", "unknown parameter 'color': expected one of by, since, until, sort, job"),
        ("sort=held&sort=name", "sort given twice"),
    ],
)
def test_a_bad_value_is_a_400_of_one_line(query: str, reason: str) -> None:
    status, content_type, body, asked = _get(query)
    assert status == "400 Bad Request" and content_type.startswith("text/plain")
    assert body.decode() == reason + "\n" and not asked


def test_a_jobs_own_ledger() -> None:
    status, _type, body, asked = _get("job=starved")
    assert status == "200 OK" and asked[0].by == "job"
    text = body.decode()
    page = _parsed(body)
    assert len(page.bars) == 1 and not page.rows
    (bar,) = page.bars
    assert sum(float(r["data-gpu-hours"]) for r in bar["rects"]) == pytest.approx(9.5)
    assert sum(float(r["width"]) for r in bar["rects"]) == pytest.approx(360.0, abs=1e-2)
    lines = dict(re.findall(r"<tr data-category='(\w+)' data-gpu-hours='([\d.]+)'>", text))
    assert {k: float(v) for k, v in lines.items()} == pytest.approx(
        {"computing": 5.0, "network": 3.0, "interconnect": 1.5}
    )
    assert "href='/job/starved'" in text
    _status, _type, body, _asked = _get("job=no-such-job")
    assert "the job held no GPU time in this span" in body.decode()


def test_the_api_gives_the_rows_as_the_commands_json() -> None:
    reply = LedgerPage(lambda _r: pb.LedgerResponse(rows=ROWS), clock=lambda: NOW).route("/api/ledger", "job=starved")
    assert reply is not None
    body = json.loads(reply[2])
    assert [r["job"] for r in body["rows"]] == ["starved"]
    (row,) = body["rows"]
    assert row["gpu_hours_lost"]["network"] == 3.0 and row["nodes"] == ["starved-n0", "starved-n1"]


def test_no_script_and_only_the_hashed_stylesheet() -> None:
    _status, _type, body, _asked = _get("")
    page = _parsed(body)
    assert "script" not in page.tags and page.tags.count("style") == 1
    digest = "'sha256-" + base64.b64encode(hashlib.sha256(page.style.encode()).digest()).decode() + "'"
    assert f"style-src {digest}" in content_security_policy()
    assert "<a href='/ledger'>ledger</a>" in body.decode()  # reachable from every page's navigation


def test_without_prices_the_money_is_left_out_and_one_line_says_how_to_set_them() -> None:
    """Every money cell read 0.00 with no [prices], and nothing said why."""
    unpriced = [pb.LedgerRow(key=r.key, gpu_hours_held=r.gpu_hours_held, gpu_hours_computing=r.gpu_hours_computing,
                             gpu_hours_lost=r.gpu_hours_lost, nodes=r.nodes) for r in ROWS]  # fmt: skip
    for query in ("", "job=starved"):
        _status, _type, body, _asked = _get(query, unpriced)
        text = body.decode()
        assert "<th>cost</th>" not in text and "<th>cur</th>" not in text and not re.search(r" h · \d", text)
        assert "data-cost-lost" not in text and "GPU-h, " not in text, query  # nor in the bars' titles
        assert re.search(
            r"id='no-prices'>no prices: .*set \[prices\] in collector.toml \(docs/ledger.md#prices\)", text
        )
        assert len(_parsed(body).bars) == (3 if not query else 1)  # the hours are all there
        assert not query or "<th>share</th></tr>" in text  # a job's table: no money column
    _status, _type, body, _asked = _get("")
    assert "<th>cost</th>" in body.decode() and "id='no-prices'" not in body.decode()  # priced rows keep them
    api = LedgerPage(lambda _r: pb.LedgerResponse(rows=unpriced), clock=lambda: NOW).route("/api/ledger", "")
    assert api is not None
    answer = json.loads(api[2])
    assert answer["priced"] is False and answer["no_prices"].endswith(
        "set [prices] in collector.toml (docs/ledger.md#prices)"
    )
    assert {(r["cost"], r["cost_lost"], r["currency"]) for r in answer["rows"]} == {(None, None, None)}
    priced = LedgerPage(lambda _r: pb.LedgerResponse(rows=ROWS), clock=lambda: NOW).route("/api/ledger", "")
    assert priced is not None and json.loads(priced[2])["priced"] is True and "no_prices" not in json.loads(priced[2])
