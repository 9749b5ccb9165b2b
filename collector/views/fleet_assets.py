"""The fleet page's HTML, CSS and script: shipped inside the package, nothing fetched at run time.

One shell per page with ``fleet_static/fleet.css`` and ``fleet_static/fleet.js`` inlined (package
data); the script reads the page's JSON (``/api/...``) and draws tables and plain
SVG (the heatmap, the timeline, the highways' series) from it, then does so again every
``REFRESH_SECONDS``. No charting library: a few rectangles and polylines say what is needed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
from importlib import resources
from typing import Final

REFRESH_SECONDS: Final = 5

_STATIC: Final = resources.files("nodeagent.collector.views") / "fleet_static"


@functools.cache
def _asset(name: str) -> str:
    return (_STATIC / name).read_text(encoding="utf-8")


_BODIES: Final = {
    "fleet": (
        '<h1>Fleet</h1><p id="stores" class="banner" hidden></p>'
        '<p id="today" class="today"></p><p id="summary" class="muted"></p><div id="filters"></div>'
        '<p id="legend"></p><table id="nodes"></table>'
    ),
    "node": '<div id="node"></div>',
    "jobs": '<h1>Jobs</h1><p id="summary" class="muted"></p><table id="jobs"></table>',
    "job": '<div id="job"></div>',
    "alerts": '<h1>Alerts</h1><div id="alerts"></div>',
}


def shell_for(path: str) -> bytes | None:
    """The HTML shell that answers ``path`` (``/``, ``/alerts``, ``/node/X``, ``/jobs``, ``/job/X``), else None."""
    if path == "/":
        return page("fleet")
    if path in ("/alerts", "/jobs"):
        return page(path[1:])
    for prefix, name in (("/node/", "node"), ("/job/", "job")):
        if path.startswith(prefix) and len(path) > len(prefix):
            return page(name)
    return None


@functools.cache
def page(name: str) -> bytes:
    """The HTML shell of ``name`` (``fleet``, ``node``, ``jobs``, ``job``, ``alerts``)."""
    script = _script()
    return (
        f"{head(name)}<p id='error'></p><p id='shards' class='banner' hidden></p>"
        f"{_BODIES[name]}<script>{script}</script></body></html>"
    ).encode()


def head(name: str) -> str:
    """A page's start, to its navigation: the one inline style (hashed in the policy), no script."""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>nodeagent · {html.escape(name)}</title><style>{_asset('fleet.css')}</style></head>"
        f"<body data-page='{html.escape(name)}'><nav><a href='/'>fleet</a><a href='/jobs'>jobs</a>"
        "<a href='/ledger'>ledger</a><a href='/alerts'>alerts</a><a href='/metrics'>metrics</a></nav>"
    )


def _script() -> str:
    return _asset("fleet.js").replace("__REFRESH__", str(REFRESH_SECONDS))


def _sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@functools.cache
def content_security_policy() -> str:
    """The pages' Content-Security-Policy: their one inline script and one inline style, allowed by
    hash (CSP Level 2), and nothing else run or loaded; the script fetches its JSON from this
    origin (``connect-src 'self'``); no other site may frame a page (clickjacking). An attribute
    style or an event handler in the HTML would be refused: the page has none, and the script
    draws with classes and SVG attributes only."""
    return (
        f"default-src 'none'; script-src {_sha256_source(_script())}; style-src {_sha256_source(_asset('fleet.css'))}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
