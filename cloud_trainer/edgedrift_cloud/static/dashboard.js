// EdgeDrift operations dashboard: the fleet table (one server-side page of /v1/fleet, sorted, filtered and
// searched by the server) with the fleet summary, and a device page (/v1/fleet/devices/{id}) whose charts
// share one time axis (uPlot, vendored beside this file) over the chosen time range: a gap in the
// heartbeats stays a gap (no line across it), the model version is a step that holds until the next one,
// and the quality chart marks every recompute. No network access other than this server.
// The operator token comes from the URL fragment (#token=..., never sent to the server) or the form, and
// is kept in this tab's sessionStorage only.
"use strict";

const TOKEN_KEY = "edgedrift.operatorToken";
const $ = (selector) => document.querySelector(selector);
const params = new URLSearchParams(location.search);
const REFRESH_S = Math.max(1, Number(params.get("refresh")) || 5);
const PAGE = Math.min(500, Math.max(1, Number(params.get("limit")) || 50));
// Optional status thresholds in seconds (?stale_after=&offline_after=), passed on to the API.
const THRESHOLDS = new URLSearchParams([...params].filter(([k]) => k === "stale_after" || k === "offline_after"));
const withThresholds = (path) => (THRESHOLDS.toString() ? `${path}${path.includes("?") ? "&" : "?"}${THRESHOLDS}` : path);
const table = { q: "", status: "", task: "", drifting: false, sort: "device_id", desc: false, offset: 0 };
let timer = null;
let generation = 0;

function hashParams() {
  return new URLSearchParams(location.hash.replace(/^#/, ""));
}

function takeTokenFromHash() {
  const h = hashParams();
  if (!h.has("token")) return;
  sessionStorage.setItem(TOKEN_KEY, h.get("token"));
  h.delete("token");
  const rest = h.toString();
  history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
}

function showError(text) {
  const node = $("[data-error]");
  node.textContent = text || "";
  node.hidden = !text;
}

function showLogin(visible) {
  $("[data-login]").hidden = !visible;
  $("[data-action=forget]").hidden = visible;
  $("[data-summary]").hidden = visible;
  for (const view of document.querySelectorAll("main[data-view]")) view.hidden = true;
  if (visible) $("[data-rows]").replaceChildren();
}

class Refused extends Error {}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const response = await fetch(path, { headers: { Authorization: `Bearer ${token}` }, cache: "no-store" });
  if (response.status === 401 || response.status === 403) {
    sessionStorage.removeItem(TOKEN_KEY);
    throw new Refused(response.status === 401
      ? "401: the operator token was rejected. Enter the operator token."
      : "403: this credential is valid, but it is not the operator's. Enter the operator token.");
  }
  if (!response.ok) throw new Error(`${response.status} from ${path.split("?")[0]}: ${await response.text()}`);
  return response.json();
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v === true ? "" : String(v));
    else node.setAttribute(k, String(v));
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

const pct = (x) => `${(100 * x).toFixed(1)}%`;
const when = (t) => (t ? new Date(t).toLocaleString() : "never");
const LIVE = new Set(["online", "degraded"]);

function metric(row) {
  if (row.task === "regression" || (row.rmse !== null && row.accuracy === null)) {
    return row.rmse === null ? "no RMSE yet" : `RMSE ${row.rmse.toPrecision(3)}`;
  }
  if (row.accuracy === null) return "no accuracy yet";
  // a device configured with classes also reports the macro-F1 of its recent window
  return row.macro_f1 === null || row.macro_f1 === undefined
    ? pct(row.accuracy) : `${pct(row.accuracy)} · macro-F1 ${row.macro_f1.toFixed(3)}`;
}

// ------------------------------------------------------------------------------------------ fleet table

function fleetQuery() {
  const q = new URLSearchParams({ sort: table.sort, desc: table.desc, offset: table.offset, limit: PAGE });
  if (table.q) q.set("q", table.q);
  if (table.status) q.set("status", table.status);
  if (table.task) q.set("task", table.task);
  if (table.drifting) q.set("drifting", "true");
  return q.toString();
}

function renderSummary(s) {
  for (const node of document.querySelectorAll("[data-total]")) {
    const key = node.dataset.total;
    const value = s[key];
    node.dataset.value = value === null || value === undefined ? "" : String(value);
    node.textContent = key === "budget_use" ? (value === null ? "no" : pct(value)) : String(value);
  }
  // "no recompute budget" when none is set, else "12.0% of the recompute budget" (used this minute)
  $("[data-budget-label]").textContent = s.budget_use === null ? "recompute budget" : "of the recompute budget";
  $("[data-summary]").hidden = false;
}

function renderRows(page) {
  const rows = page.devices.map((d) => {
    const old = !LIVE.has(d.status);
    return el("tr", { "data-device": d.device_id, "data-status": d.status, class: `st-${d.status}` },
      el("td", { "data-col": "device_id" }, el("a", { href: `#device=${encodeURIComponent(d.device_id)}` }, d.device_id)),
      el("td", { "data-col": "status" }, el("span", { class: `badge st-${d.status}` }, d.status)),
      el("td", { "data-col": "drifting", "data-value": d.drifting }, d.drifting ? "drifting" : ""),
      el("td", { "data-col": "metric", class: old ? "old" : null, title: old ? "last known value" : null }, metric(d)),
      el("td", { "data-col": "recomputes", class: "num" }, String(d.recomputes)),
      el("td", { "data-col": "recent", class: "num" }, String(d.recomputes_last_hour)),
      el("td", { "data-col": "version", class: "num" },
        d.running_version === null ? "–" : `v${d.running_version}`,
        d.latest_version !== null && d.latest_version !== d.running_version
          ? el("span", { class: "muted" }, ` (latest v${d.latest_version})`) : null),
      el("td", { "data-col": "last_reason" }, d.last_reason || "–"),
      el("td", { "data-col": "last_seen" }, when(d.last_seen)));
  });
  $("[data-rows]").replaceChildren(...rows);
  const last = Math.min(page.total, page.offset + page.devices.length);
  const info = $("[data-page-info]");
  info.textContent = page.total ? `${page.offset + 1}–${last} of ${page.total}` : "no device matches";
  info.dataset.total = page.total;
  $("[data-action=prev]").disabled = page.offset === 0;
  $("[data-action=next]").disabled = last >= page.total;
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.dataset.active = th.dataset.sort === table.sort ? (table.desc ? "desc" : "asc") : "";
  }
}

async function showFleet(mine, withSummary) {
  // A filter, sort or page change asks for the table only; the timer refreshes the summary too.
  const [summary, page] = await Promise.all([
    withSummary ? api(withThresholds("/v1/fleet/summary")) : null,
    api(withThresholds(`/v1/fleet?${fleetQuery()}`))]);
  if (mine !== generation) return;
  if (summary) renderSummary(summary);
  renderRows(page);
  $("main[data-view=fleet]").hidden = false;
  $("main[data-view=device]").hidden = true;
  if (!document.body.dataset.firstRenderMs) document.body.dataset.firstRenderMs = performance.now().toFixed(0);
  document.body.dataset.rendered = `fleet ${fleetQuery()}`;
  document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
}

// ------------------------------------------------------------------------------------------ device page

const charts = [];
const pad2 = (n) => String(n).padStart(2, "0");

// Axis labels on one line, as short as the shown span allows; uPlot keeps `space` px between ticks, so
// labels never overlap, also on a phone.
const measure = document.createElement("canvas").getContext("2d");
measure.font = '12px system-ui, -apple-system, "Segoe UI", sans-serif';

function timeLabels(u, ticks) {
  const span = u.scales.x.max - u.scales.x.min;
  const labels = ticks.map((t) => {
    const d = new Date(t * 1000);
    const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
    if (span <= 2 * 86400) return span <= 600 ? `${hm}:${pad2(d.getSeconds())}` : hm;
    return `${d.getMonth() + 1}/${d.getDate()}${span <= 14 * 86400 ? " " + hm : ""}`;
  });
  // The chart records how many neighbouring labels would overlap (the dashboard test expects none).
  const boxes = ticks.map((t, i) => {
    const x = u.valToPos(t, "x");
    const w = measure.measureText(labels[i]).width;
    return [x - w / 2, x + w / 2];
  });
  const overlaps = boxes.slice(1).filter((b, i) => b[0] < boxes[i][1] + 4).length;
  if (u.root.parentNode) u.root.parentNode.dataset.overlaps = overlaps;
  u.root.dataset.overlaps = overlaps;
  u.root.dataset.ticks = ticks.length;
  return labels;
}

// Heartbeats more than 3 times the usual interval apart (and 90 s at least) are a gap: a null point in
// every series between them, so that no line is drawn across the silence.
function withGaps(xs, columns) {
  const steps = xs.slice(1).map((x, i) => x - xs[i]).sort((a, b) => a - b);
  const limit = Math.max(90, 3 * (steps[Math.floor(steps.length / 2)] || 0));
  const outX = [];
  const outCols = columns.map(() => []);
  let gaps = 0;
  xs.forEach((x, i) => {
    if (i > 0 && x - xs[i - 1] > limit) {
      outX.push((x + xs[i - 1]) / 2);
      outCols.forEach((c) => c.push(null));
      gaps += 1;
    }
    outX.push(x);
    columns.forEach((c, k) => outCols[k].push(c[i]));
  });
  return { xs: outX, columns: outCols, gaps };
}

// Dashed vertical lines at the recomputes' times, drawn over the chart.
function markersPlugin(times) {
  return {
    hooks: {
      draw: (u) => {
        const { ctx } = u;
        const { top, height } = u.bbox;
        ctx.save();
        ctx.strokeStyle = "#6a3fb5";
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = Math.max(1, devicePixelRatio);
        for (const t of times) {
          if (t < u.scales.x.min || t > u.scales.x.max) continue;
          const x = Math.round(u.valToPos(t, "x", true));
          ctx.beginPath();
          ctx.moveTo(x, top);
          ctx.lineTo(x, top + height);
          ctx.stroke();
        }
        ctx.restore();
      },
    },
  };
}

function chart(name, title, xs, series, range, extra = {}) {
  const gapped = extra.gaps === false ? { xs, columns: series.map((s) => s.values), gaps: 0 }
    : withGaps(xs, series.map((s) => s.values));
  const holder = el("figure", { "data-chart": name, "data-points": xs.length, "data-gaps": gapped.gaps,
    "data-markers": (extra.markers || []).length }, el("figcaption", {}, title));
  $("[data-charts]").append(holder);
  const opts = {
    width: Math.max(280, Math.min(1200, document.body.clientWidth - 40)), height: 150,
    cursor: { sync: { key: "device" } },
    scales: { x: { time: true, range: () => range } },
    axes: [{ space: 90, values: timeLabels }, { size: 56 }],
    legend: { show: true },
    plugins: extra.markers ? [markersPlugin(extra.markers)] : [],
    // the shown range, once drawn (uPlot draws after construction)
    hooks: { draw: [(u) => { holder.dataset.xmin = u.scales.x.min; holder.dataset.xmax = u.scales.x.max; }] },
    series: [{}, ...series.map(({ values, ...style }) => ({ spanGaps: false, ...style }))],
  };
  charts.push(new uPlot(opts, [gapped.xs, ...gapped.columns], holder));
  return holder;
}

function rangeSeconds() {
  const value = $("[data-range]").value;
  return value ? Number(value) : null;
}

async function showDevice(id, mine, withSummary) {
  const span = rangeSeconds();
  const query = `points=2000${span ? `&window_s=${span}` : ""}`;
  const [summary, page] = await Promise.all([
    withSummary ? api(withThresholds("/v1/fleet/summary")) : null,
    api(withThresholds(`/v1/fleet/devices/${encodeURIComponent(id)}?${query}`))]);
  if (mine !== generation) return;
  if (summary) renderSummary(summary);
  const d = page.device;
  const beats = page.heartbeats;
  const versions = page.versions;
  $("[data-device-title]").textContent = d.device_id;
  const facts = [["status", d.status], ["drifting now", d.drifting ? "yes" : "no"], ["task", d.task || "unknown"],
    [d.task === "regression" ? "RMSE" : "accuracy", metric(d)],
    ...(d.n_classes ? [["classes", d.n_classes]] : []), ["recomputes", d.recomputes],
    ["running", d.running_version === null ? "–" : `v${d.running_version}`],
    ["latest", d.latest_version === null ? "–" : `v${d.latest_version}`], ["last seen", when(d.last_seen)]];
  $("[data-facts]").replaceChildren(...facts.flatMap(([k, v]) =>
    [el("dt", {}, k), el("dd", { "data-fact": k, class: k === "status" ? `st-${d.status}` : null }, String(v))]));
  for (const u of charts.splice(0)) u.destroy();
  $("[data-charts]").replaceChildren();
  const t = (iso) => new Date(iso).getTime() / 1000;
  const xs = beats.map((b) => t(b.t));
  const now = Date.now() / 1000;
  // The versions in the range, and the one running at its start (the step enters from the left).
  const before = span ? versions.filter((v) => t(v.created_at) < now - span) : [];
  const shown = versions.filter((v) => !span || t(v.created_at) >= now - span);
  const entering = before.length ? [before[before.length - 1]] : [];
  const vx = shown.map((v) => t(v.created_at));
  const all = [...xs, ...vx];
  const range = span ? [now - span, now]
    : all.length ? [Math.min(...all), Math.max(...all, Math.min(...all) + 1)] : [0, 1];
  // Steps: each version holds until the next one and to the end of the range.
  const stepX = [...entering.map(() => range[0]), ...vx];
  const stepY = [...entering, ...shown].map((v) => v.version);
  if (stepY.length) { stepX.push(Math.max(range[1], stepX[stepX.length - 1])); stepY.push(stepY[stepY.length - 1]); }
  const regression = d.task === "regression";
  const quality = regression ? [{ label: "RMSE", stroke: "#b5401f", values: beats.map((b) => b.rmse) }]
    : [{ label: "accuracy", stroke: "#1f6fb5", values: beats.map((b) => b.accuracy) }];
  if (!regression && beats.some((b) => b.macro_f1 !== null && b.macro_f1 !== undefined)) {
    quality.push({ label: "macro-F1", stroke: "#2a8a3e", values: beats.map((b) => b.macro_f1 ?? null) });
  }
  chart("metric", `${regression ? "RMSE" : "accuracy"} (dashed: recomputes)`, xs, quality, range, { markers: vx });
  const recomputes = chart("recomputes", "model version", stepX,
    [{ label: "version", stroke: "#6a3fb5", width: 2, paths: uPlot.paths.stepped({ align: 1 }),
      points: { show: false }, values: stepY }], range, { gaps: false });
  recomputes.dataset.versionCount = vx.length;
  recomputes.dataset.stepped = "true";
  chart("warnings", "drift warnings and events", xs,
    [{ label: "warning", stroke: "#d08a00", values: beats.map((b) => b.warnings) },
     { label: "drift events", stroke: "#b5401f", values: beats.map((b) => b.drift_events) }], range);
  chart("throughput", "throughput (samples/s)", xs,
    [{ label: "samples/s", stroke: "#2a8a3e", values: beats.map((b) => b.throughput) }], range);
  chart("drops", "drops and rejections (cumulative)", xs,
    [{ label: "dropped", stroke: "#777", values: beats.map((b) => b.dropped) },
     { label: "rejected", stroke: "#b5401f", values: beats.map((b) => b.rejected) }], range);
  $("[data-versions]").replaceChildren(...versions.slice().reverse().map((v) =>
    el("tr", { "data-version": v.version },
      el("td", { class: "num" }, `v${v.version}`), el("td", {}, when(v.created_at)), el("td", { "data-col": "reason" }, v.reason),
      el("td", {}, v.requested_by), el("td", {}, v.chosen ? `${v.learner} (${v.chosen})` : v.learner),
      el("td", { class: "num" }, `${v.n} × ${v.d}`), el("td", { class: "num" }, v.train_ms.toFixed(1)),
      el("td", { "data-col": "monitor" }, Object.entries(v.monitor)
        .map(([k, x]) => `${k}=${typeof x === "number" ? Number(x.toPrecision(4)) : x}`).join(", ") || "–"))));
  $("main[data-view=device]").hidden = false;
  $("main[data-view=fleet]").hidden = true;
  document.body.dataset.rendered = `device ${d.device_id} ${beats.length} ${versions.length} ${span || "all"}`;
  document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
}

// ------------------------------------------------------------------------------------------ wiring

async function refresh(withSummary = true) {
  clearTimeout(timer);
  const mine = ++generation;
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    showLogin(true);
    return;
  }
  $("[data-login]").hidden = true;
  $("[data-action=forget]").hidden = false;
  try {
    const device = hashParams().get("device");
    if (device) await showDevice(device, mine, withSummary || $("[data-summary]").hidden);
    else await showFleet(mine, withSummary || $("[data-summary]").hidden);
    if (mine !== generation) return;
    showError(null);
    const now = new Date();
    const updated = $("[data-updated]");
    updated.setAttribute("datetime", now.toISOString());
    updated.textContent = now.toLocaleTimeString();
  } catch (error) {
    if (mine !== generation) return;
    if (error instanceof Refused) showLogin(true);
    showError(error.message);
    if (error instanceof Refused) return;
  }
  timer = setTimeout(() => refresh(true), REFRESH_S * 1000);
}

function wire() {
  $("[data-refresh]").textContent = String(REFRESH_S);
  $("[data-login]").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, event.target.elements.token.value.trim());
    event.target.reset();
    refresh();
  });
  $("[data-action=forget]").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showError(null);
    refresh();
  });
  const filters = $("[data-filters]");
  let typing = null;
  const apply = () => {
    const f = filters.elements;
    Object.assign(table, { q: f.q.value.trim(), status: f.status.value, task: f.task.value,
      drifting: f.drifting.checked, offset: 0 });
    refresh(false);
  };
  filters.addEventListener("submit", (event) => { event.preventDefault(); apply(); });
  filters.addEventListener("change", apply);
  filters.elements.q.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(apply, 150); });
  $("[data-action=prev]").addEventListener("click", () => {
    table.offset = Math.max(0, table.offset - PAGE);
    refresh(false);
  });
  $("[data-action=next]").addEventListener("click", () => { table.offset += PAGE; refresh(false); });
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      table.desc = table.sort === th.dataset.sort ? !table.desc : false;
      table.sort = th.dataset.sort;
      table.offset = 0;
      refresh(false);
    });
  }
  $("[data-range]").addEventListener("change", () => refresh(false));
  $("[data-range-form]").addEventListener("submit", (event) => event.preventDefault());
  window.addEventListener("hashchange", () => { takeTokenFromHash(); refresh(); });
}

takeTokenFromHash();
wire();
refresh();
