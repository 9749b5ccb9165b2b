"""The job page's ledger section (``fleet.js`` ``ledgerOf``) with and without ``[prices]``, run in
node: without prices ``/api/ledger`` gives the money as null, which the script used to format
(``null.toFixed``) and so drew nothing but the error."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import require
from tests.fakes.trees import REPO

_HARNESS = """
import fs from "fs";
const src = fs.readFileSync(process.argv[2], "utf8");
const body = src.slice(src.indexOf("async function ledgerOf"), src.indexOf("async function drawAlerts"));
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
const pct = (x) => x === null ? "-" : (x * 100).toFixed(1) + "%";
const out = {};
for (const priced of [true, false]) {
  const row = {gpu_hours_held: 2, gpu_hours_computing: 1.5, gpu_hours_lost: {network: 0.5},
    cost: priced ? 4 : null, cost_lost: priced ? 1 : null, currency: priced ? "USD" : null};
  const data = {rows: [row], priced, ...(priced ? {} : {no_prices: "no prices: set [prices]"})};
  const ledgerOf = new Function("api", "esc", "pct", body + "; return ledgerOf;")(async () => data, esc, pct);
  out[priced] = await ledgerOf("job-1");
}
console.log(JSON.stringify(out));
"""


def test_the_job_pages_ledger_leaves_money_out_without_prices(tmp_path: Path) -> None:
    require(shutil.which("node") is not None, "needs node (Debian package nodejs)")
    harness = tmp_path / "ledger.mjs"
    harness.write_text(_HARNESS)
    script = REPO / "collector" / "views" / "fleet_static" / "fleet.js"
    done = subprocess.run(["node", str(harness), str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    drawn = json.loads(done.stdout)
    assert "<th>USD</th>" in drawn["true"] and "<th>4.00</th>" in drawn["true"] and "1.00 USD" in drawn["true"]
    unpriced = drawn["false"]
    assert '<p class="muted" id="no-prices">no prices: set [prices]</p>' in unpriced
    assert "null" not in unpriced and "NaN" not in unpriced and "USD" not in unpriced
    assert "<th>share</th></tr>" in unpriced and "<td>75.0%</td></tr>" in unpriced  # no money column


_UNMEASURED_HARNESS = """
import fs from "fs";
const src = fs.readFileSync(process.argv[2], "utf8");
const body = src.slice(src.indexOf("async function ledgerOf"), src.indexOf("async function drawAlerts"));
const helpers = src.slice(src.indexOf("// A wait share that cannot be measured"), src.indexOf("const gbits"));
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
const pct = (x) => x === null || x === undefined ? "-" : Math.round(x * 100) + "%";
const row = {gpu_hours_held: 4, gpu_hours_computing: 1, gpu_hours_lost: {network: 0.5}, gpu_hours_unmeasured: 2.5,
  cost: 8, cost_lost: 1, cost_unmeasured: 5, cost_lost_max: 6, currency: "USD"};
const ledgerOf = new Function("api", "esc", "pct", body + "; return ledgerOf;")(async () => ({rows: [row]}), esc, pct);
const waits = new Function("esc", "pct", helpers + "; return [waitShare, nodeWait];")(esc, pct);
const [waitShare, nodeWait] = waits;
console.log(JSON.stringify({
  ledger: await ledgerOf("job-1"),
  unknown: waitShare({wait_ratio: null, state: "slowed", evidence: {wait_unknown_reason: "power is a 1 s mean"}}),
  measured: waitShare({wait_ratio: 0.38, state: "slowed", evidence: {}}),
  idle: waitShare({wait_ratio: null, state: "idle", evidence: {}}),
  node: nodeWait({wait_unknown_reason: "power is a 1 s mean"}),
  nodeMeasured: nodeWait({wait_ratio: 0.4}),
}));
"""


def test_the_pages_draw_unmeasured_hours_the_money_range_and_an_unknown_wait_share(tmp_path: Path) -> None:
    require(shutil.which("node") is not None, "needs node (Debian package nodejs)")
    harness = tmp_path / "unmeasured.mjs"
    harness.write_text(_UNMEASURED_HARNESS)
    script = REPO / "collector" / "views" / "fleet_static" / "fleet.js"
    done = subprocess.run(["node", str(harness), str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    drawn = json.loads(done.stdout)
    ledger = drawn["ledger"]
    hours = [float(h) for h in re.findall(r'data-gpu-hours="([\d.]+)"', ledger)]
    assert re.findall(r'<rect class="cat-(\w+)"', ledger) == ["computing", "network", "unmeasured"]
    assert sum(hours) == 4.0  # the parts add up to held, the unmeasured hours last
    assert "<td>2.00</td>" in ledger  # computing's money: cost less lost less unmeasured
    assert 'id="money-lost">money lost: 1.00 – 6.00 USD' in ledger
    assert drawn["unknown"] == '<span class="unknown" title="power is a 1 s mean">unknown</span>'
    assert drawn["measured"] == "38%" and drawn["idle"] == "—"
    assert "their wait share is <span" in drawn["node"] and "power is a 1 s mean" in drawn["node"]
    assert drawn["nodeMeasured"] == ", 40% of their time"
