"""The job page's ledger section (``fleet.js`` ``ledgerOf``) with and without ``[prices]``, run in
node: without prices ``/api/ledger`` gives the money as null, which the script used to format
(``null.toFixed``) and so drew nothing but the error."""

from __future__ import annotations

import json
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
