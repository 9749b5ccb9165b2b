"""The node and job pages' "If fixed" section (``fleet.js`` ``worthSection``), run in node: the
speed-up with the GPU-hours and money a day and the target's speed-up; without prices no money;
an unknown speed-up says unknown and its reason, never a number."""

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
const body = src.slice(src.indexOf("function worthSection"), src.indexOf("const gbits"));
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
const worthSection = new Function("esc", body + "; return worthSection;")(esc);
const priced = {speedup: 1.5113, bottleneck: "network", target: {highway: "50G + nvlink", speedup: 1.7232},
  gpu_hours_per_day: 64.957, money_per_day: 71.45, currency: "USD", notes: ["the link runs at 95% of its rating"]};
const unpriced = {...priced, money_per_day: null, currency: null, target: null};
const unknown = {speedup: null, bottleneck: "network", target: null, gpu_hours_per_day: null, money_per_day: null,
  currency: null, notes: ["unknown: no GPM, and power does not tell"]};
console.log(JSON.stringify([worthSection(priced), worthSection(unpriced), worthSection(unknown), worthSection(null)]));
"""


def test_the_pages_say_what_a_fix_is_worth(tmp_path: Path) -> None:
    require(shutil.which("node") is not None, "needs node (Debian package nodejs)")
    harness = tmp_path / "worth.mjs"
    harness.write_text(_HARNESS)
    script = REPO / "collector" / "views" / "fleet_static" / "fleet.js"
    done = subprocess.run(["node", str(harness), str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    priced, unpriced, unknown, absent = json.loads(done.stdout)
    assert (
        "Lifting the network bottleneck: 1.51x the steps, 65.0 GPU-hours a day (71.45 USD); at 50G + nvlink: 1.72x."
        in priced
    )
    assert "<li>the link runs at 95% of its rating</li>" in priced
    assert "1.51x the steps, 65.0 GPU-hours a day." in unpriced and "USD" not in unpriced and "null" not in unpriced
    assert '<span class="unknown">unknown</span>' in unknown and "unknown: no GPM" in unknown
    assert "NaN" not in unknown and "null" not in unknown and "x the steps" not in unknown
    assert absent == ""
