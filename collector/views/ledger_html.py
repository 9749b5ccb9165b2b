"""The ledger page's HTML (``/ledger``, ``/ledger?job=KEY``), rendered on the server: no script.

One stacked bar per row in inline SVG, a rectangle per category (computing first, then each
category lost, in ``split.LOST_CATEGORIES``' order) as wide as its GPU-hours at one scale for
the whole page (``data-px-per-gpu-hour``), so bars compare across rows and a bar's rectangles
add to the row's held hours. The colours are classes of the pages' one stylesheet
(``fleet.css``), whose hash the Content-Security-Policy allows; nothing else is inline.
Money per category is the row's own: computing costs ``cost - cost_lost - cost_unmeasured``,
``cost_lost`` is shared among the lost categories by their hours (a job on nodes at several
prices: at the mean price of its lost hours), and the `unmeasured` hours (held, their split
between computing and waiting not measured) cost ``cost_unmeasured``, drawn last in the bar: the
money lost is a range, ``cost_lost`` to ``cost_lost + cost_unmeasured``. Without ``[prices]``
(no row has a currency) the money is left out, cells, columns and bar titles alike, and one line
says how to set them.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from nodeagent.collector.history.split import LOST_CATEGORIES
from nodeagent.collector.ledger.prices import NO_PRICES_LINE, priced
from nodeagent.collector.ledger.read import BY
from nodeagent.collector.views.fleet_assets import head
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.collector.views.ledger_page import LedgerAsk

BAR_PX: Final = 360.0
BAR_HEIGHT: Final = 14
SPANS: Final = ("1d", "7d", "30d")
SORT_WORDS: Final = {"lost": "money lost", "held": "GPU-hours held", "name": "name", "worth": "worth fixing"}
UNMEASURED: Final = "unmeasured"
# The categories after computing, in the bar's order: the lost ones, then the unmeasured hours.
_CATEGORIES: Final = (*LOST_CATEGORIES, UNMEASURED)
UNMEASURED_WORDS: Final = (
    "unmeasured: held GPU-hours whose split between computing and waiting the GPUs' readings cannot "
    "measure (the job's nodes say why); the money lost is a range, lost to lost plus unmeasured"
)

Shards = Sequence[dict[str, Any]]


def render_ledger(asked: LedgerAsk, rows: Sequence[pb.LedgerRow], shards: Shards) -> bytes:
    shown = _shown_categories(rows)
    scale = BAR_PX / max((r.gpu_hours_held for r in rows), default=0.0) if rows else 0.0
    sorts = " · ".join(_choice(asked.link(sort=s), word, s == asked.sort) for s, word in SORT_WORDS.items())
    bys = " · ".join(_choice(asked.link(by=b, job=""), b, b == asked.by) for b in BY)
    spans = " · ".join(_choice(asked.link(since=s), s, s == asked.since) for s in SPANS)
    head_cells = "".join(f"<th>{html.escape(c)}</th>" for c in shown)
    extra = {"job": "<th>stragglers</th>", "node": "<th>GPU model</th>", "fleet": ""}.get(
        asked.by, "<th>jobs</th><th>stragglers</th>"
    )
    money = priced(r.currency for r in rows)
    worth = any(r.HasField("worth_gpu_hours_per_day") for r in rows)
    body = "".join(_row(asked, r, shown, scale, money, worth) for r in rows)
    total = sum(r.gpu_hours_held for r in rows)
    out = [
        head("ledger"), "<h1>Ledger</h1>", _banner(shards),
        f"<p class='muted' id='summary'>{_when(asked.start)} .. {_when(asked.end)} · {len(rows)} rows · "
        f"{total:.2f} GPU-hours held</p>",
        f"<p id='choices'>by {bys} &nbsp; since {spans} &nbsp; sorted by {sorts}</p>", _legend(shown),
        _no_prices(rows, money),
        f"<table id='ledger' data-by='{asked.by}' data-sort='{asked.sort}'><tr><th>{asked.by}</th>"
        f"<th>GPU-hours by category</th><th>held GPU-h</th><th>computing</th>{head_cells}"
        f"{'<th>cost</th><th>lost</th><th>cur</th>' if money else ''}{extra}"
        f"{'<th>worth fixing a day</th>' if worth else ''}</tr>{body}</table>",
        _unmeasured_line(rows),
    ]  # fmt: skip
    if not rows:
        out.append("<p class='muted' id='empty'>no GPU time held in this span</p>")
    return ("".join(out) + "</body></html>").encode()


def render_job_ledger(asked: LedgerAsk, rows: Sequence[pb.LedgerRow], shards: Shards) -> bytes:
    """One job's ledger: its bar and a line per category, in GPU-hours, share and money."""
    name = html.escape(asked.job)
    out = [
        head(f"ledger · {asked.job}"), f"<h1>Ledger of job <span class='name title'>{name}</span></h1>",
        _banner(shards), f"<p class='muted' id='summary'>{_when(asked.start)} .. {_when(asked.end)} · "
        f"<a href='/job/{urllib.parse.quote(asked.job, safe='')}'>the job now</a> · "
        f"<a href='{html.escape(asked.link(job=''))}'>every job</a></p>",
    ]  # fmt: skip
    if not rows:
        out.append("<p class='muted' id='empty'>the job held no GPU time in this span</p></body></html>")
        return "".join(out).encode()
    row = rows[0]
    shown = _shown_categories(rows)
    money = bool(row.currency)
    out.append(_legend(shown) + _no_prices(rows, money))
    out.append(f"<p id='job-bar'>{_bar(row, BAR_PX / row.gpu_hours_held if row.gpu_hours_held else 0.0)}</p>")
    lines = [("computing", row.gpu_hours_computing, _money_computing(row))]
    lines += [(c, _hours(row, c), _money_of(row, c)) for c in shown]
    held = row.gpu_hours_held
    body = "".join(
        f"<tr data-category='{c}' data-gpu-hours='{h:.6f}'><td>{_swatch(c)} {c}</td><td>{h:.3f}</td>"
        f"<td>{_share(h, held)}</td>{f'<td>{m:.2f}</td>' if money else ''}</tr>"
        for c, h, m in lines
    )
    currency = f"<th>{html.escape(row.currency)}</th>" if money else ""
    total = f"<th>{row.cost:.2f}</th>" if money else ""
    out.append(
        f"<table id='job-ledger'><tr><th>category</th><th>GPU-h</th><th>share</th>{currency}</tr>{body}"
        f"<tr class='total'><th>held</th><th>{held:.3f}</th><th></th>{total}</tr></table>"
    )
    if money:
        out.append(f"<p id='money-lost'>money lost: {_lost_range(row)} {html.escape(row.currency)}</p>")
    out.append(_unmeasured_line(rows))
    stragglers = ", ".join(f"{_node_link(s.node_id)} ({s.gpu_hours_waited:.2f} GPU-h waited)" for s in row.stragglers)
    out.append(f"<p>nodes: {', '.join(_node_link(n) for n in row.nodes)}</p>")
    if stragglers:
        out.append(f"<p id='stragglers'>its GPUs waited on: {stragglers}</p>")
    return ("".join(out) + "</body></html>").encode()


def _row(asked: LedgerAsk, row: pb.LedgerRow, shown: Sequence[str], scale: float, money: bool, worth: bool) -> str:
    key = html.escape(row.key)
    if asked.by == "job":
        link = f"<a class='job' href='{html.escape(asked.link(job=row.key))}'>{key}</a>"
    elif asked.by == "node":
        link = _node_link(row.key)
    else:
        link = key or f"<span class='muted'>(no {asked.by})</span>"
    cells = "".join(
        f"<td data-category='{c}'>{_hours(row, c):.2f} h{_money(_money_of(row, c), money)}</td>" for c in shown
    )
    if asked.by == "job":
        extra = "<td>" + (", ".join(_node_link(s.node_id) for s in row.stragglers) or "-") + "</td>"
    elif asked.by == "node":
        extra = f"<td>{html.escape(row.gpu_model)}</td>"
    elif asked.by != "fleet":  # an account's or namespace's jobs, and the nodes they waited on
        jobs = ", ".join(
            f"<a class='job' href='{html.escape(asked.link(by='job', job=j))}'>{html.escape(j)}</a>" for j in row.jobs
        )
        stragglers = ", ".join(_node_link(s.node_id) for s in row.stragglers)
        extra = f"<td>{jobs or '-'}</td><td>{stragglers or '-'}</td>"
    else:
        extra = ""
    computing = f"{row.gpu_hours_computing:.2f} h{_money(_money_computing(row), money)}"
    cost_lost = (
        f" data-cost-lost='{row.cost_lost:.6f}' data-cost-lost-max='{row.cost_lost + row.cost_unmeasured:.6f}'"
        if money
        else ""
    )
    costs = (
        f"<td class='cost'>{row.cost:.2f}</td><td class='cost-lost'>{_lost_range(row)}</td>"
        f"<td>{html.escape(row.currency or '-')}</td>"
        if money
        else ""
    )
    return (
        f"<tr class='ledger-row' data-key='{key}' data-gpu-hours-held='{row.gpu_hours_held:.6f}'{cost_lost}>"
        f"<td>{link}</td><td>{_bar(row, scale)}</td>"
        f"<td>{row.gpu_hours_held:.2f}</td><td>{computing}</td>{cells}{costs}{extra}"
        f"{_worth(row) if worth else ''}</tr>"
    )


def _worth(row: pb.LedgerRow) -> str:
    """What fixing the row's live bottleneck is worth a day: money where priced, else GPU-hours."""
    if not row.HasField("worth_gpu_hours_per_day"):
        return "<td class='worth'>-</td>"
    hours = f"{row.worth_gpu_hours_per_day:.1f} GPU-h"
    if row.HasField("worth_money_per_day"):
        said = f"{row.worth_money_per_day:.2f} {html.escape(row.currency)} ({hours})"
    else:
        said = hours
    return f"<td class='worth' data-worth-gpu-hours='{row.worth_gpu_hours_per_day:.6f}'>{said}</td>"


def _bar(row: pb.LedgerRow, scale: float) -> str:
    """The row's stacked bar: computing, then each category lost, then the unmeasured hours,
    ``scale`` pixels a GPU-hour."""
    parts = [("computing", row.gpu_hours_computing, _money_computing(row))]
    parts += [(c, _hours(row, c), _money_of(row, c)) for c in _CATEGORIES if _hours(row, c)]
    rects, x = [], 0.0
    for category, hours, money in parts:
        if hours <= 0:
            continue
        width = hours * scale
        rects.append(
            f"<rect class='cat-{category}' x='{x:.4f}' y='0' width='{width:.4f}' height='{BAR_HEIGHT}' "
            f"data-category='{category}' data-gpu-hours='{hours:.6f}'><title>{category}: {hours:.2f} GPU-h"
            f"{f', {money:.2f} {html.escape(row.currency)}' if row.currency else ''} "
            f"({_share(hours, row.gpu_hours_held)})</title></rect>"
        )
        x += width
    return (
        f"<svg class='ledger-bar' width='{BAR_PX:.0f}' height='{BAR_HEIGHT}' data-px-per-gpu-hour='{scale:.6f}' "
        f"data-gpu-hours-held='{row.gpu_hours_held:.6f}'>{''.join(rects)}</svg>"
    )


def _money(amount: float, shown: bool) -> str:
    """A cell's money after its hours (`` · 1.20``), "" without prices."""
    return f" · {amount:.2f}" if shown else ""


def _no_prices(rows: Sequence[pb.LedgerRow], money: bool) -> str:
    return f"<p class='muted' id='no-prices'>{html.escape(NO_PRICES_LINE)}</p>" if rows and not money else ""


def _legend(shown: Sequence[str]) -> str:
    items = "".join(f"<span class='legend'>{_swatch(c)} {c}</span>" for c in ("computing", *shown))
    return f"<p id='legend'>{items}</p>"


def _swatch(category: str) -> str:
    return f"<svg width='10' height='10'><rect class='cat-{category}' width='10' height='10'/></svg>"


def _banner(shards: Shards) -> str:
    """One line naming the shards (workers, collectors) that did not answer: their rows are missing."""
    silent = [s for s in shards if not s["answered"]]
    if not silent:
        return ""
    names = "; ".join(f"{s['shard']} ({s['error']})" for s in silent)
    return f"<p id='shards' class='banner'>not in this ledger, no answer from: {html.escape(names)}</p>"


def _shown_categories(rows: Sequence[pb.LedgerRow]) -> list[str]:
    return [c for c in _CATEGORIES if any(_hours(r, c) > 0 for r in rows)]


def _hours(row: pb.LedgerRow, category: str) -> float:
    """A category's GPU-hours of the row: a lost one, or the unmeasured hours."""
    return row.gpu_hours_unmeasured if category == UNMEASURED else row.gpu_hours_lost.get(category, 0.0)


def _money_of(row: pb.LedgerRow, category: str) -> float:
    if category == UNMEASURED:
        return row.cost_unmeasured
    lost = sum(row.gpu_hours_lost.values())
    return row.cost_lost * row.gpu_hours_lost.get(category, 0.0) / lost if lost > 0 else 0.0


def _money_computing(row: pb.LedgerRow) -> float:
    return row.cost - row.cost_lost - row.cost_unmeasured


def _lost_range(row: pb.LedgerRow) -> str:
    """The money lost: ``cost_lost``, or a range up to its unmeasured hours' price added."""
    if row.gpu_hours_unmeasured > 0:
        return f"{row.cost_lost:.2f} – {row.cost_lost + row.cost_unmeasured:.2f}"
    return f"{row.cost_lost:.2f}"


def _unmeasured_line(rows: Sequence[pb.LedgerRow]) -> str:
    if not any(r.gpu_hours_unmeasured > 0 for r in rows):
        return ""
    return f"<p class='muted' id='unmeasured'>{html.escape(UNMEASURED_WORDS)}</p>"


def _share(hours: float, held: float) -> str:
    return f"{hours / held * 100:.1f}%" if held > 0 else "-"


def _choice(href: str, word: str, chosen: bool) -> str:
    return f"<b>{html.escape(word)}</b>" if chosen else f"<a href='{html.escape(href)}'>{html.escape(word)}</a>"


def _node_link(node_id: str) -> str:
    return f"<a href='/node/{urllib.parse.quote(node_id, safe='')}'>{html.escape(node_id)}</a>"


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
