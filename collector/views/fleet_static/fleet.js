// The fleet page's script: reads the page's JSON (/api/...) and draws tables and plain SVG from it.
// Every value that came from a node goes through esc().
const REFRESH_MS = __REFRESH__ * 1000;
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
  '"': "&quot;", "'": "&#39;"})[c]);
const pct = (r) => (r === null || r === undefined) ? "—" : Math.round(r * 100) + "%";
// A wait share that cannot be measured is "unknown", its reason on hover (never a guessed number).
const waitUnknown = (j) => (j.evidence || {}).wait_unknown_reason ?? (j.state === "slowed" ? "not measured" : null);
const waitShare = (j) => j.wait_ratio !== null && j.wait_ratio !== undefined ? pct(j.wait_ratio) :
  waitUnknown(j) === null ? "—" : `<span class="unknown" title="${esc(waitUnknown(j))}">unknown</span>`;
const nodeWait = (e) => typeof e.wait_ratio === "number" ? `, ${pct(e.wait_ratio)} of their time` :
  e.wait_unknown_reason ? `; their wait share is <span class="unknown">unknown</span>: ${esc(e.wait_unknown_reason)}` : "";
// What lifting the bottleneck is worth (if_fixed, docs/jobs.md#what-a-fix-is-worth): the speed-up,
// the GPU-hours and money a day, the target's speed-up, the assumptions; "unknown" with its reason.
function worthSection(f) {
  if (!f) return "";
  const notes = (f.notes || []).map((n) => `<li>${esc(n)}</li>`).join("");
  if (f.speedup === null || f.speedup === undefined)
    return `<h2>If fixed</h2><p id="if-fixed">Lifting the ${esc(f.bottleneck)} bottleneck: ` +
      `<span class="unknown">unknown</span></p><ul id="if-fixed-notes">${notes}</ul>`;
  const saved = f.gpu_hours_per_day === null || f.gpu_hours_per_day === undefined ? "" :
    `, ${f.gpu_hours_per_day.toFixed(1)} GPU-hours a day` +
    (f.money_per_day === null || f.money_per_day === undefined ? "" : ` (${f.money_per_day.toFixed(2)} ${esc(f.currency)})`);
  const target = f.target && f.target.speedup !== null ? `; at ${esc(f.target.highway)}: ${f.target.speedup.toFixed(2)}x` : "";
  return `<h2>If fixed</h2><p id="if-fixed">Lifting the ${esc(f.bottleneck)} bottleneck: ` +
    `${f.speedup.toFixed(2)}x the steps${saved}${target}.</p><ul id="if-fixed-notes">${notes}</ul>`;
}
const gbits = (b) => (b === null || b === undefined) ? "—" : (b * 8 / 1e9).toFixed(1) + " Gb/s";
const mbytes = (b) => (b === null || b === undefined) ? "—" : (b / 1e6).toFixed(0) + " MB/s";
// A long name (a node id may be 253 characters, a job id 256) is cut to its column, whole on hover.
const longName = (s, cls) => `<span class="name${cls ? " " + cls : ""}" title="${esc(s)}">${esc(s)}</span>`;
const clock = (t) => new Date(t * 1000).toISOString().slice(11, 16);
const badge = (s) => `<span class="badge ${esc(s)}">${esc(s)}</span>`;
const nodeLink = (n) => `<a href="/node/${encodeURIComponent(n)}">${esc(n)}</a>`;
const jobLink = (j) => `<a class="job" href="/job/${encodeURIComponent(j)}">${esc(j)}</a>`;
// Each GPU's and node's verdict (the detector's state words) in one colour everywhere: the heatmap,
// its legend, the timeline's band and the badges (fleet.css) agree.
const STATE_COLORS = {busy: "#2e7d32", starved: "#c62828", waiting: "#ef6c00", throttled: "#f9a825",
  idle: "#bdbdbd", warmup: "#90caf9", lost: "#6a1b9a", "no-gpu": "#e0e0e0"};
const GPU_STATES = [["busy", "computing"], ["starved", "waiting for data"], ["waiting", "waiting on another node"],
  ["throttled", "clocks held down"], ["idle", "nothing to do"], ["warmup", "verdict forming"], ["lost", "gone or not answering"]];
const stateColor = (s) => STATE_COLORS[s] ?? "#999";
function heatmap(gpus) {  // one square per GPU, coloured by its verdict; its busy share on hover
  const w = 14, h = 14;
  let out = `<svg class="heatmap" width="${Math.max(1, gpus.length) * (w + 2)}" height="${h}">`;
  for (const [i, g] of gpus.entries()) {
    const starved = g.state === "starved";
    out += `<rect class="gpu ${esc(g.state)}" data-state="${esc(g.state)}" x="${i * (w + 2)}" ` +
      `y="0" width="${w}" height="${h}" fill="${stateColor(g.state)}"${starved ? ' stroke="#000" stroke-width="2"' : ""}>` +
      `<title>GPU ${g.index}: ${esc(g.state)}, ${pct(g.busy_ratio)} busy (NVML)</title></rect>`;
  }
  return out + "</svg>";
}
function heatmapLegend() {  // what each colour of the heatmap says
  return `<span class="muted">GPUs by verdict:</span> ` + GPU_STATES.map(([s, said]) =>
    `<span class="legend" data-state="${s}"><svg width="12" height="12"><rect width="12" height="12" ` +
    `fill="${stateColor(s)}"${s === "starved" ? ' stroke="#000" stroke-width="2"' : ""}/></svg> ${s} ` +
    `<span class="muted">(${said})</span></span>`).join("");
}
// A chart of one timeline key: a y-axis from zero with the unit on its ticks, the time on the x-axis.
// ``floor`` is the least top of the scale, so that zeros and noise draw flat along the bottom.
const AXIS = {left: 64, right: 8, top: 8, bottom: 18};
function niceTop(value, floor) {
  const v = Math.max(value, floor);
  const step = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * step).find((t) => t >= v);
}
function series(points, key, label, fmt, floor) {
  const w = 600, h = 80, known = points.filter((p) => p[key] !== null && p[key] !== undefined);
  if (!known.length) return `<p class="muted">${esc(label)}: no data</p>`;
  const t0 = points[0].time_unix_seconds, t1 = Math.max(t0 + 1, points[points.length - 1].time_unix_seconds);
  const top = niceTop(Math.max(...known.map((p) => p[key])), floor);
  const plotW = w - AXIS.left - AXIS.right, plotH = h - AXIS.top - AXIS.bottom;
  const xy = (p) => [AXIS.left + ((p.time_unix_seconds - t0) / (t1 - t0)) * plotW,
    AXIS.top + plotH - (Math.max(0, p[key]) / top) * plotH];
  const line = known.map((p) => xy(p).map((v) => v.toFixed(1)).join(",")).join(" ");
  const dots = known.map((p) => { const [x, y] = xy(p); return `<circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="2"/>`; });
  const ticks = [0, top / 2, top].map((v) => {
    const y = (AXIS.top + plotH - (v / top) * plotH).toFixed(1);
    return `<line class="grid" x1="${AXIS.left}" x2="${w - AXIS.right}" y1="${y}" y2="${y}"/>` +
      `<text class="tick" x="${AXIS.left - 4}" y="${y}" text-anchor="end" dominant-baseline="middle">${esc(fmt(v))}</text>`;
  }).join("");
  const axes = `<line class="axis" x1="${AXIS.left}" x2="${AXIS.left}" y1="${AXIS.top}" y2="${AXIS.top + plotH}"/>` +
    `<line class="axis" x1="${AXIS.left}" x2="${w - AXIS.right}" y1="${AXIS.top + plotH}" y2="${AXIS.top + plotH}"/>`;
  return `<div class="series" data-key="${esc(key)}"><div>${esc(label)} <span class="muted">(last ${fmt(known[known.length - 1][key])})</span></div>` +
    `<svg width="${w}" height="${h}" data-top="${top}">${ticks}${axes}<polyline fill="none" stroke="#1565c0" points="${line}"/>${dots.join("")}` +
    `<text class="tick" x="${AXIS.left}" y="${h - 4}">${clock(t0)} UTC</text>` +
    `<text class="tick" x="${w - AXIS.right}" y="${h - 4}" text-anchor="end">${clock(t1)} UTC</text></svg></div>`;
}
function stateBand(points) {  // the node's state per point, above the charts and on their time axis
  const w = 600, h = 12, plotW = w - AXIS.left - AXIS.right;
  if (!points.length) return "";
  const t0 = points[0].time_unix_seconds, t1 = Math.max(t0 + 1, points[points.length - 1].time_unix_seconds);
  const at = (t) => AXIS.left + ((t - t0) / (t1 - t0)) * plotW;
  let out = `<svg class="states" width="${w}" height="${h}">`;
  points.forEach((p, i) => {
    const x = at(p.time_unix_seconds);
    const next = i + 1 < points.length ? at(points[i + 1].time_unix_seconds) : w - AXIS.right;
    out += `<rect x="${x.toFixed(1)}" y="0" width="${Math.max(1, next - x).toFixed(1)}" height="${h}" fill="${stateColor(p.state)}"><title>${esc(p.state)}</title></rect>`;
  });
  return out + "</svg>";
}
function alertTable(alerts) {
  if (!alerts.length) return `<p class="muted">no alerts</p>`;
  return `<table id="alerts-table"><tr><th>alert</th><th>node</th><th>state</th><th>severity</th><th>since</th><th>summary</th></tr>` +
    alerts.map((a) => `<tr class="${a.ends_at_unix_seconds ? "resolved" : "firing"}"><td>${esc(a.name)}</td>` +
      // A job's alert (JobStraggler) names its node in its labels, and its job.
      `<td class="node-id">${(a.node_id || a.labels?.node) ? nodeLink(a.node_id || a.labels.node) : ""}` +
      `${a.labels?.job ? " · job " + jobLink(a.labels.job) : ""}</td>` +
      `<td>${a.ends_at_unix_seconds ? "resolved" : badge("firing")}</td><td>${esc(a.severity)}</td>` +
      `<td>${new Date(a.starts_at_unix_seconds * 1000).toISOString().slice(0, 19).replace("T", " ")}</td>` +
      `<td class="summary">${esc((a.annotations || {}).summary)}</td></tr>`).join("") + "</table>";
}
async function api(path, banner = true) {  // banner: this answer says which shards answered
  const reply = await fetch(path, {cache: "no-store"});
  if (!reply.ok) {  // the page's own one line of why (a 400, a 503), else the status
    const why = await reply.json().then((body) => body.error).catch(() => "");
    throw new Error(why || `${path}: ${reply.status}`);
  }
  const data = await reply.json();
  if (banner) shardBanner(data.shards || []);
  return data;
}
function shardBanner(shards) {  // a merged page ([fleet] collectors): one line naming who did not answer
  const missing = shards.filter((s) => !s.answered);
  const banner = document.getElementById("shards");
  banner.hidden = !missing.length;
  // A front's own workers ("worker-N") are one collector's processes: name them as such.
  const kind = shards.every((s) => s.shard.startsWith("worker-")) ? "workers" : "collectors";
  banner.textContent = missing.length ? `${missing.length} of ${shards.length} ${kind} did not answer, ` +
    `their nodes are missing here: ` + missing.map((s) => `${s.shard} (${s.error})`).join("; ") : "";
}
function storeBanner(stores) {  // a store that cannot commit (a full disk): where, how long, why
  const banner = document.getElementById("stores");
  banner.hidden = !stores.length;
  banner.textContent = stores.map((s) => `store failing${s.shard ? " on " + s.shard : ""} for ` +
    `${Math.round(s.seconds)} s: ${s.error}`).join("; ") +
    (stores.length ? " — reports are held by the agents until it writes" : "");
  banner.title = banner.textContent;
}
async function drawFleet() {
  const params = new URLSearchParams(location.search);
  const data = await api("/api/fleet?" + params.toString());
  storeBanner(data.stores_failing || []);
  const options = (name, counts) => `<option value="">any ${name}</option>` + Object.keys(counts).sort().map((k) =>
    `<option value="${esc(k)}"${params.get(name) === k ? " selected" : ""}>${esc(k)} (${counts[k]})</option>`).join("");
  document.getElementById("filters").innerHTML =
    `<select id="state" name="state">${options("state", data.states)}</select> ` +
    `<select id="cause" name="cause">${options("cause", data.causes)}</select>`;
  for (const name of ["state", "cause"]) {
    document.getElementById(name).onchange = (e) => {
      if (e.target.value) params.set(name, e.target.value); else params.delete(name);
      history.replaceState(null, "", "?" + params.toString()); drawFleet();
    };
  }
  // Without a history the day's count is only what this collector saw since it started: say so.
  // Several collectors: say which holds each node (a front's own workers are one collector).
  const merged = Array.isArray(data.shards) && data.shards.some((s) => !s.shard.startsWith("worker-"));
  const lostSource = data.gpu_hours_lost_today_source === "history" ? "" :
    ` <span class="muted" id="lost-source">(${esc(data.gpu_hours_lost_today_source)})</span>`;
  document.getElementById("nodes").innerHTML =
    `<tr><th>node</th><th>state</th><th>cause</th><th>starved</th><th>GPU-h lost today${lostSource}</th>` +
    `<th>GPUs (verdict)</th><th>job</th>${merged ? "<th>collector</th>" : ""}</tr>` +
    data.nodes.map((n) => `<tr class="node ${esc(n.state)}" data-node="${esc(n.node_id)}">` +
      `<td class="node-id"><a href="/node/${encodeURIComponent(n.node_id)}">${longName(n.node_id)}</a></td>` +
      `<td>${badge(n.state)}${n.forming ? ` <span class="muted forming">${esc(n.forming)}</span>` : ""}</td>` +
      `<td class="cause">${n.cause ? esc(n.cause) : (n.waiting_on || []).length ?
        "waits on " + n.waiting_on.map(nodeLink).join(", ") : ""}</td><td>${pct(n.starvation_ratio)}</td>` +
      `<td>${n.gpu_hours_lost_today.toFixed(2)}</td><td>${heatmap(n.gpus)}</td>` +
      `<td>${(n.jobs || []).map(jobLink).join(", ")}</td>` +
      (merged ? `<td class="shard">${esc(n.shard)}${(n.stale_shards || []).length ?
        ` <span class="muted" title="${esc(n.stale_shards.join(", "))}">+${n.stale_shards.length} stale</span>` : ""}</td>` : "") +
      `</tr>`).join("");
  document.getElementById("legend").innerHTML = heatmapLegend();
  document.getElementById("summary").textContent =
    `${data.nodes.length} nodes shown · updated ${clock(data.time_unix_seconds)} UTC`;
  await fleetToday(data);
}
// The line at the top of /: the fleet's GPUs, and from the ledger's split since midnight UTC the share
// of the GPU time jobs held that was lost, its cost where prices are set, and the job that lost most.
// The ledger is read once a minute (a day of a big fleet is a second's read), not every draw.
const today = {at: 0, fleet: null, job: null, error: ""};
async function fleetToday(data) {
  const shown = !new URLSearchParams(location.search).toString();  // the whole fleet, not a filtered part
  const gpus = data.nodes.reduce((a, n) => a + (n.gpu_count || 0), 0);
  if (Date.now() - today.at > LEDGER_REFRESH_MS) {
    today.at = Date.now();
    const since = Math.floor(data.time_unix_seconds / 86400) * 86400;
    try {
      const [fleet, jobs] = await Promise.all([api(`/api/ledger?by=fleet&since=${since}`, false),
        api(`/api/ledger?by=job&since=${since}`, false)]);
      today.fleet = fleet.rows[0] ?? null; today.job = jobs.rows[0] ?? null; today.error = "";
    } catch (err) { today.error = String(err); }
  }
  const parts = [`${shown ? "Fleet" : "Shown"}: ${gpus} GPUs on ${data.nodes.length} nodes`];
  const f = today.fleet;
  if (today.error) {
    parts.push(`no ledger to say what is lost today: ${esc(today.error)}`);
  } else if (f && f.gpu_hours_held > 0) {
    const lost = Object.values(f.gpu_hours_lost).reduce((a, b) => a + b, 0);
    parts.push(`${shown ? "" : "the fleet "}lost today: <b id="lost-share">${pct(lost / f.gpu_hours_held)}</b> of the GPU time jobs held ` +
      `(${lost.toFixed(2)} of ${f.gpu_hours_held.toFixed(2)} GPU-h)`);
    // Hours nobody could measure (docs/ledger.md#unmeasured): said apart, and the money lost a range.
    const unmeasured = f.gpu_hours_unmeasured || 0;
    if (unmeasured > 0) parts.push(`<span id="unmeasured">${unmeasured.toFixed(2)} GPU-h unmeasured</span>`);
    if (f.currency) parts.push(`<span id="lost-cost">${f.cost_lost.toFixed(2)}` +
      `${unmeasured > 0 ? " – " + f.cost_lost_max.toFixed(2) : ""} ${esc(f.currency)} lost</span>`);
    const j = today.job, jobLost = j ? Object.values(j.gpu_hours_lost).reduce((a, b) => a + b, 0) : 0;
    if (j && jobLost > 0) parts.push(`loses most: ${jobLink(j.job)} <span class="muted">(${jobLost.toFixed(2)} GPU-h)</span>`);
  } else {
    parts.push("no GPU time held by a job today");
  }
  document.getElementById("today").innerHTML = parts.join(" · ");
}
async function drawNode() {
  const name = decodeURIComponent(location.pathname.slice("/node/".length));
  const n = await api("/api/node/" + encodeURIComponent(name));
  document.title = `${n.node_id} · nodeagent`;
  const why = Object.entries(n.highways).filter(([, said]) => said).map(([cause, said]) =>
    `<li><b>${esc(cause)}</b>: ${esc(said)}</li>`).join("");
  // A MIG-split GPU's instances follow it, each a row of its own.
  const gpuRow = (g, name, cls) => `<tr${cls}><td>${name}</td><td>${badge(g.state)}</td>` +
    `<td>${esc(g.cause ?? "")}${(g.evidence || {}).bad_reading ?
      ` <span class="muted bad-reading">bad ${esc(g.evidence.bad_reading)} reading</span>` : ""}</td>` +
    `<td>${pct(g.starvation_ratio)}</td><td>${pct(g.idle_ratio === null ? null : 1 - g.idle_ratio)}</td>` +
    `<td class="jobs">${longName((g.jobs || []).join(", "))}</td>` +
    `<td class="source">${g.computing_source ? `<span title="${esc(g.computing_source_reason ?? "")}">` +
      `${esc(g.computing_source)}</span>` : ""}</td></tr>`;
  const gpus = (n.verdict?.gpus ?? []).map((g) => gpuRow(g, esc(g.index), "") + (g.instances ?? []).map((i) =>
    gpuRow(i, `└ ${esc(i.mig_profile)} gi${esc(i.gpu_instance_id)}`, ' class="mig"')).join("")).join("");
  // A down node's verdict and evidence are of when it was last heard, not of now: said so.
  const why_title = n.last_known ? `Last known state, at ${clock(n.last_seen)} UTC` : "Why: the highways now";
  const last_known = n.last_known ? `<p class="last-known" id="last-known">${esc(n.last_known)}</p>` : "";
  document.getElementById("node").innerHTML =
    `<h1>${longName(n.node_id, "title")} ${badge(n.state)}</h1><p class="sentence" id="sentence">${esc(n.sentence)}</p>` +
    ((n.waiting_on || []).length ? `<p id="waiting">Its GPUs wait on ${n.waiting_on.map(nodeLink).join(", ")}` +
      `${n.waiting_job ? " of job " + jobLink(n.waiting_job) : ""}${nodeWait(n.verdict?.evidence || {})}.</p>` : "") +
    ((n.jobs || []).length ? `<p id="jobs">Jobs: ${n.jobs.map(jobLink).join(", ")}</p>` : "") +
    `<h2 id="why">${esc(why_title)}</h2>${last_known}<ul id="evidence">${why || "<li class='muted'>no node-wide evidence yet</li>"}</ul>` +
    worthSection(n.if_fixed) +
    `<h2>Timeline <span class="muted">(per minute, ${n.timeline_source === "history" ? "from the collector's history" :
      "kept in the collector's memory"})</span></h2><div id="timeline">${stateBand(n.timeline)}` +
    series(n.timeline, "starvation_ratio", "starvation ratio", pct, 1) +
    series(n.timeline, "gpu_busy_ratio", "GPU busy share", pct, 1) + `</div>` +
    `<h2>Highways beside GPU utilization</h2><div id="highways">` +
    series(n.timeline, "network_rx_bytes_per_second", "network receive", gbits, 1e9 / 8) +
    series(n.timeline, "disk_read_bytes_per_second", "disk read", mbytes, 10e6) +
    series(n.timeline, "cpu_busy_ratio", "CPU busy", pct, 1) + `</div>` +
    `<h2>GPUs${n.last_known ? " (last known)" : ""}</h2><table><tr><th>GPU</th><th>state</th><th>cause</th><th>starved</th><th>busy</th><th>jobs</th><th title="which reading tells computing from waiting">source</th></tr>${gpus}</table>` +
    `<h2>Alerts</h2>${alertTable(n.alerts)}`;
}
// GPU-hours lost per job: the ledger's split of its stored minutes over the last 24 h, the figure
// `jobs` prints (GPU-H LOST 24h) and `ledger --by job` sums; read once a minute, not every draw.
const jobsLost = {at: 0, hours: null, error: ""};
async function drawJobs() {
  const data = await api("/api/jobs");
  if (Date.now() - jobsLost.at > LEDGER_REFRESH_MS) {
    jobsLost.at = Date.now();
    try {
      const ledger = await api("/api/ledger?by=job&since=24h", false);
      jobsLost.hours = Object.fromEntries(ledger.rows.map((r) =>
        [r.job, [Object.values(r.gpu_hours_lost).reduce((a, b) => a + b, 0), r.gpu_hours_unmeasured || 0]]));
      jobsLost.error = "";
    } catch (err) { jobsLost.hours = null; jobsLost.error = String(err); }
  }
  // Where some hours are unmeasured (docs/ledger.md#unmeasured), the hours lost are a range.
  const lost = (j) => {
    if (jobsLost.hours === null) return "—";
    const [hours, unmeasured] = jobsLost.hours[j.job] ?? [0, 0];
    return unmeasured >= 0.005 ? `${hours.toFixed(2)} – ${(hours + unmeasured).toFixed(2)}` : hours.toFixed(2);
  };
  document.getElementById("jobs").innerHTML =
    `<tr><th>job</th><th>state</th><th>nodes</th><th>GPUs</th><th>straggler</th><th>cause</th>` +
    `<th>wait share</th><th title="the ledger's split of the job's stored minutes, as jobs and ledger --by job give it">` +
    `GPU-h lost (24 h)</th></tr>` +
    data.jobs.map((j) => `<tr class="job ${esc(j.state)}" data-job="${esc(j.job)}"><td>${jobLink(j.job)}</td>` +
      `<td>${badge(j.state)}</td><td>${j.nodes.length}</td><td>${j.gpus}</td>` +
      `<td class="straggler">${j.job_wide ? "job-wide" : j.straggler_nodes.map(nodeLink).join(", ")}</td>` +
      `<td class="cause">${esc(j.cause ?? "")}</td><td class="wait">${waitShare(j)}</td>` +
      `<td class="lost">${lost(j)}</td></tr>`).join("");
  document.getElementById("summary").textContent =
    `${data.jobs.length} multi-node jobs · updated ${clock(data.time_unix_seconds)} UTC` +
    (jobsLost.error ? ` · no ledger for the GPU-hours lost: ${jobsLost.error}` : "");
}
function nodeCard(n) {
  const rows = [["busy", pct(n.busy_ratio)], ["data wait", pct(n.starvation_ratio)],
    ["collective wait", pct(n.interconnect_ratio)], ["cause", esc(n.cause ?? "")]];
  if ((n.waiting_on || []).length) rows.push(["waits on", n.waiting_on.map(nodeLink).join(", ")]);
  return `<div class="card${n.straggler ? " straggler" : ""}" data-node="${esc(n.node_id)}">` +
    `<div class="card-head">${nodeLink(n.node_id)} ${badge(n.state)}` +
    `${n.straggler ? ' <span class="badge straggler">straggler</span>' : ""}</div>` +
    `<table>${rows.map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join("")}</table>` +
    heatmap(n.gpus || []) + (n.sentence ? `<p class="why">${esc(n.sentence)}</p>` : "") +
    (n.highway && !(n.sentence || "").includes(n.highway) ? `<p class="why">${esc(n.highway)}</p>` : "") + `</div>`;
}
async function drawJob() {
  const name = decodeURIComponent(location.pathname.slice("/job/".length));
  const j = await api("/api/job/" + encodeURIComponent(name));
  document.title = `${j.job} · nodeagent`;
  // In words with units (the collector's evidence_text), the raw key on hover.
  const evidence = (j.evidence_lines || []).map((e) => `<li title="${esc(e.key)}">${esc(e.text)}</li>`).join("");
  const notes = (j.notes || []).map((n) => `<li>${esc(n)}</li>`).join("");
  document.getElementById("job").innerHTML =
    `<h1>${esc(j.job)} ${badge(j.state)}</h1><p class="sentence" id="sentence">${esc(j.sentence)}</p>` +
    `<p class="muted">${esc(j.source)} · ${j.ranks_reported} of ${j.world_size || "?"} ranks reported · ` +
    `verdict at ${clock(j.time_unix_seconds)} UTC</p>` +
    `<h2>Its nodes side by side</h2><div class="cards" id="job-nodes">` +
    j.node_details.map(nodeCard).join("") + `</div>` +
    `<h2>Evidence: what sets the straggler apart</h2><ul id="evidence">` +
    `${evidence || "<li class='muted'>nothing sets a node apart</li>"}</ul>` + worthSection(j.if_fixed) +
    (notes ? `<h2>Notes</h2><ul id="notes">${notes}</ul>` : "") +
    `<h2>Alerts</h2>${alertTable(j.alerts)}` +
    `<h2>Its ledger (last 30 days)</h2><div id="job-ledger">${jobLedger.html}</div>`;
  if (Date.now() - jobLedger.at > LEDGER_REFRESH_MS) {  // a month of history: read once a minute, not every draw
    jobLedger.at = Date.now();
    jobLedger.html = await ledgerOf(name).catch((err) => `<p class="muted">${esc(String(err))}</p>`);
    document.getElementById("job-ledger").innerHTML = jobLedger.html;
  }
}
const LEDGER_REFRESH_MS = 60000;
const jobLedger = {at: 0, html: '<p class="muted">reading the ledger…</p>'};
async function ledgerOf(name) {  // the job's row of /ledger: its stacked bar and a line per category
  const data = await api("/api/ledger?job=" + encodeURIComponent(name));
  const more = `<a href="/ledger?job=${encodeURIComponent(name)}">the job's ledger</a> · <a href="/ledger">every job</a>`;
  if (!data.rows.length) return `<p class="muted">no GPU time held in the last 30 days · ${more}</p>`;
  const r = data.rows[0], held = r.gpu_hours_held, scale = held > 0 ? 360 / held : 0;
  const priced = r.currency !== null;  // no [prices]: money null, left out, and the API's line says why
  const lostHours = Object.values(r.gpu_hours_lost).reduce((a, b) => a + b, 0);
  // Computing, each category lost, then the hours whose split nothing measured (docs/ledger.md).
  const unmeasured = r.gpu_hours_unmeasured || 0, unmeasuredCost = r.cost_unmeasured || 0;
  const parts = [["computing", r.gpu_hours_computing, r.cost - r.cost_lost - unmeasuredCost]].concat(
    Object.entries(r.gpu_hours_lost).filter(([, h]) => h > 0)
      .map(([c, h]) => [c, h, lostHours > 0 ? r.cost_lost * h / lostHours : 0]),
    unmeasured > 0 ? [["unmeasured", unmeasured, unmeasuredCost]] : []);
  const money = (m, cell) => !priced ? "" : cell ? `<${cell}>${m.toFixed(2)}</${cell}>` : `, ${m.toFixed(2)} ${esc(r.currency)}`;
  let x = 0;
  const rects = parts.map(([c, h, m]) => {
    const w = h * scale, rect = `<rect class="cat-${esc(c)}" x="${x}" y="0" width="${w}" height="14" ` +
      `data-category="${esc(c)}" data-gpu-hours="${h}"><title>${esc(c)}: ${h.toFixed(2)} GPU-h${money(m)}</title></rect>`;
    x += w;
    return rect;
  }).join("");
  const lines = parts.map(([c, h, m]) => `<tr data-category="${esc(c)}"><td>${esc(c)}</td><td>${h.toFixed(3)}</td>` +
    `<td>${pct(held > 0 ? h / held : null)}</td>${money(m, "td")}</tr>`).join("");
  const note = data.no_prices ? `<p class="muted" id="no-prices">${esc(data.no_prices)}</p>` : "";
  return `<svg class="ledger-bar" width="360" height="14" data-gpu-hours-held="${held}">${rects}</svg>${note}` +
    `<table><tr><th>category</th><th>GPU-h</th><th>share</th>${priced ? `<th>${esc(r.currency)}</th>` : ""}</tr>${lines}` +
    `<tr><th>held</th><th>${held.toFixed(3)}</th><th></th>${money(r.cost, "th")}</tr></table>` +
    (priced && unmeasured > 0 ? `<p id="money-lost">money lost: ${r.cost_lost.toFixed(2)} – ` +
      `${r.cost_lost_max.toFixed(2)} ${esc(r.currency)} (unmeasured hours: computing or waiting, not measured)</p>` : "") +
    `<p>${more}</p>`;
}
async function drawAlerts() {
  const data = await api("/api/alerts");
  document.getElementById("alerts").innerHTML = alertTable(data.alerts);
}
const draw = {fleet: drawFleet, node: drawNode, jobs: drawJobs, job: drawJob, alerts: drawAlerts}[document.body.dataset.page];
const run = () => draw().catch((err) => { document.getElementById("error").textContent = String(err); });
run();
setInterval(run, REFRESH_MS);
