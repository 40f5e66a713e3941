// EdgeDrift operator dashboard: reads GET /v1/fleet with the operator token and draws small SVG charts.
//
// No dependencies, no network access other than /v1/fleet on the serving host. Data from the
// server (device ids, reasons, ...) only ever reaches the DOM through textContent or attribute
// setters, never through innerHTML.
//
// URL parameters: ?refresh=<seconds> (default 5), ?points=<n> (default 500, the series length),
// #token=<operator token> (moved to sessionStorage and removed from the address bar).
//
// DOM hooks (used by tests/integration/test_dashboard.py):
//   [data-total="recomputes"|"devices"|...]   fleet totals, raw number in data-value
//   article[data-device="<id>"]               one card per device
//   [data-counter="<name>"]                   counters in a card, raw number in data-value
//   svg[data-series="recomputes"|"accuracy"]  the two charts of a card
//   circle.point                              one per recompute / per heartbeat with an accuracy
//   line.event                                one recompute marker on the accuracy chart
//   [data-updated], [data-status], [data-error], form[data-login]
"use strict";

(() => {
  const TOKEN_KEY = "edgedrift.operatorToken";
  const SVG_NS = "http://www.w3.org/2000/svg";

  const params = new URLSearchParams(location.search);
  const refreshSeconds = positiveNumber(params.get("refresh"), 5);
  const points = Math.min(5000, Math.max(1, Math.round(positiveNumber(params.get("points"), 500))));

  const $ = (selector) => document.querySelector(selector);
  const ui = {
    status: $("[data-status]"),
    updated: $("[data-updated]"),
    refresh: $("[data-refresh]"),
    forget: $("[data-action=forget]"),
    error: $("[data-error]"),
    login: $("[data-login]"),
    totals: $("[data-totals]"),
    devices: $("[data-devices]"),
    template: $("#device-card"),
  };
  const cards = new Map(); // device id -> <article>
  let timer = null;
  let generation = 0; // drops answers of superseded requests

  // ---------------------------------------------------------------- formatting

  function positiveNumber(text, fallback) {
    const value = Number(text);
    return text !== null && Number.isFinite(value) && value > 0 ? value : fallback;
  }

  function formatCount(n) {
    return Number(n).toLocaleString("en-US");
  }

  function formatBytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let value = Number(n);
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
  }

  function formatDuration(ms) {
    if (ms < 1000) return `${ms.toFixed(ms < 10 ? 2 : 0)} ms`;
    if (ms < 60_000) return `${(ms / 1000).toFixed(2)} s`;
    const minutes = Math.floor(ms / 60_000);
    return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
  }

  function formatTime(date, withDate, withMs = false) {
    let time = date.toLocaleTimeString("en-GB", { hour12: false });
    if (withMs) time += `.${String(date.getMilliseconds()).padStart(3, "0")}`;
    return withDate ? `${date.toLocaleDateString("en-CA")} ${time}` : time;
  }

  function formatPercent(x) {
    return `${(100 * x).toFixed(1)}%`;
  }

  // ---------------------------------------------------------------- token and messages

  function takeTokenFromFragment() {
    const parts = location.hash.replace(/^#/, "").split("&").filter(Boolean);
    const rest = parts.filter((part) => !part.startsWith("token="));
    const given = parts.find((part) => part.startsWith("token="));
    if (given === undefined) return;
    try {
      const token = decodeURIComponent(given.slice("token=".length));
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
    } catch {
      showError("The token in the address (#token=…) is not valid URL encoding.");
    }
    // Keep the secret out of the address bar, the history and copied links.
    const hash = rest.length ? `#${rest.join("&")}` : "";
    history.replaceState(null, "", location.pathname + location.search + hash);
  }

  function showError(message) {
    ui.error.textContent = message;
    ui.error.hidden = false;
  }

  function clearError() {
    ui.error.textContent = "";
    ui.error.hidden = true;
  }

  /** Without a valid token nothing of the fleet stays on screen. */
  function showLogin() {
    ui.totals.hidden = true;
    ui.devices.replaceChildren();
    cards.clear();
    ui.updated.removeAttribute("datetime");
    ui.updated.textContent = "never";
    ui.login.hidden = false;
    ui.forget.hidden = true;
    ui.login.elements.token.focus();
  }

  async function detailOf(response) {
    try {
      const body = await response.json();
      return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    } catch {
      return response.statusText;
    }
  }

  // ---------------------------------------------------------------- refresh loop

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, refreshSeconds * 1000);
  }

  async function refresh() {
    clearTimeout(timer);
    const mine = ++generation;
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) {
      ui.status.textContent = "Waiting for the operator token.";
      showLogin();
      return;
    }
    let response;
    let fleet;
    try {
      response = await fetch(`/v1/fleet?points=${points}`, {
        headers: { Authorization: `Bearer ${token}`, Accept: "application/json" },
        cache: "no-store",
      });
      if (response.ok) fleet = await response.json();
    } catch (err) {
      if (mine !== generation) return;
      ui.status.textContent = "Update failed; showing the last data.";
      showError(`Cannot reach the cloud trainer (${err.message}). Retrying in ${refreshSeconds} s.`);
      schedule();
      return;
    }
    if (mine !== generation) return;
    if (response.status === 401 || response.status === 403) {
      const detail = await detailOf(response);
      if (mine !== generation) return;
      sessionStorage.removeItem(TOKEN_KEY);
      ui.status.textContent = "Not signed in.";
      showError(
        response.status === 401
          ? `The operator token was rejected (401 Unauthorized: ${detail}). Enter a valid operator token.`
          : `This token is not the operator's (403 Forbidden: ${detail}). The dashboard needs the operator token.`,
      );
      showLogin();
      return; // no retry with a token the server refused
    }
    if (!response.ok) {
      const detail = await detailOf(response);
      if (mine !== generation) return;
      ui.status.textContent = "Update failed; showing the last data.";
      showError(`The cloud trainer answered ${response.status}: ${detail}. Retrying in ${refreshSeconds} s.`);
      schedule();
      return;
    }
    clearError();
    ui.login.hidden = true;
    ui.forget.hidden = false;
    render(fleet);
    const now = new Date();
    ui.updated.dateTime = now.toISOString();
    ui.updated.textContent = formatTime(now, false);
    ui.status.textContent = "Live.";
    schedule();
  }

  // ---------------------------------------------------------------- rendering

  function setValue(node, raw, text) {
    node.dataset.value = String(raw ?? "");
    node.textContent = text;
  }

  function render(fleet) {
    const t = fleet.totals;
    ui.totals.hidden = false;
    const totals = (name) => ui.totals.querySelector(`[data-total="${name}"]`);
    setValue(totals("devices"), t.devices, formatCount(t.devices));
    setValue(totals("recomputes"), t.recomputes, formatCount(t.recomputes));
    setValue(totals("bytes_in"), t.bytes_in, formatBytes(t.bytes_in));
    setValue(totals("bytes_out"), t.bytes_out, formatBytes(t.bytes_out));
    setValue(totals("train_ms_total"), t.train_ms_total, formatDuration(t.train_ms_total));
    setValue(totals("heartbeats"), t.heartbeats, formatCount(t.heartbeats));

    const seen = new Set();
    for (const device of fleet.devices) {
      seen.add(device.device_id);
      let card = cards.get(device.device_id);
      if (card === undefined) {
        card = ui.template.content.firstElementChild.cloneNode(true);
        card.dataset.device = device.device_id;
        cards.set(device.device_id, card);
      }
      renderCard(card, device);
      ui.devices.append(card); // also keeps the server's order
    }
    for (const [id, card] of cards) {
      if (!seen.has(id)) {
        card.remove();
        cards.delete(id);
      }
    }
    let empty = ui.devices.querySelector(".empty-fleet");
    if (fleet.devices.length === 0 && empty === null) {
      empty = document.createElement("p");
      empty.className = "empty-fleet muted";
      empty.textContent = "No devices registered yet.";
      ui.devices.append(empty);
    } else if (fleet.devices.length > 0 && empty !== null) {
      empty.remove();
    }
  }

  function renderCard(card, d) {
    const field = (name) => card.querySelector(`[data-field="${name}"]`);
    const counter = (name) => card.querySelector(`[data-counter="${name}"]`);
    field("device_id").textContent = d.device_id;
    const lastSeen = field("last_seen");
    lastSeen.textContent = d.last_seen ? formatTime(new Date(d.last_seen), true) : "never";
    lastSeen.dateTime = d.last_seen ?? "";
    setValue(counter("recomputes"), d.recomputes, formatCount(d.recomputes));
    setValue(counter("latest_version"), d.latest_version, d.latest_version ?? "–");
    setValue(counter("last_reason"), d.last_reason, d.last_reason ?? "–");
    setValue(counter("bytes"), `${d.bytes_in}/${d.bytes_out}`, `${formatBytes(d.bytes_in)} / ${formatBytes(d.bytes_out)}`);
    setValue(counter("train_ms_total"), d.train_ms_total, formatDuration(d.train_ms_total));
    setValue(counter("heartbeats"), d.heartbeats, formatCount(d.heartbeats));
    const reasons = Object.entries(d.reasons).sort((a, b) => b[1] - a[1]);
    field("reasons").textContent = reasons.length
      ? `Reasons: ${reasons.map(([reason, n]) => `${reason} ×${n}`).join(", ")}`
      : "No recomputes yet.";

    // Both charts share one time axis so recompute markers line up with the heartbeats.
    const recomputes = d.recompute_series.map((p) => ({ ...p, time: Date.parse(p.t) }));
    const beats = d.accuracy_series.map((p) => ({ ...p, time: Date.parse(p.t) }));
    const axis = timeAxis([...recomputes, ...beats].map((p) => p.time));
    card.querySelector('[data-chart="recomputes"]').replaceChildren(recomputeChart(d, recomputes, axis));
    card.querySelector('[data-chart="accuracy"]').replaceChildren(accuracyChart(d, beats, recomputes, axis));
  }

  // ---------------------------------------------------------------- SVG charts

  const W = 640;
  const H = 190;
  const M = { left: 46, right: 14, top: 12, bottom: 26 }; // plot margins, in viewBox units

  function svg(tag, attrs = {}, parent = null) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    if (parent) parent.append(node);
    return node;
  }

  function tooltip(node, text) {
    svg("title", {}, node).textContent = text;
    return node;
  }

  /** Time range of the points, padded so that the first and last points sit inside the plot. */
  function timeAxis(times) {
    if (times.length === 0) return null;
    const first = Math.min(...times);
    const last = Math.max(...times);
    const pad = last > first ? (last - first) * 0.05 : 30_000; // a single instant sits in the middle
    const lo = first - pad;
    const hi = last + pad;
    const x = (t) => M.left + ((t - lo) / (hi - lo)) * (W - M.left - M.right);
    return { lo, hi, x, withDate: hi - lo > 86_400_000, withMs: hi - lo < 10_000 };
  }

  function frame(series, label) {
    const root = svg("svg", {
      viewBox: `0 0 ${W} ${H}`,
      class: `chart chart-${series}`,
      role: "img",
      "aria-label": label,
      "data-series": series,
    });
    svg("rect", { class: "plot", x: M.left, y: M.top, width: W - M.left - M.right, height: H - M.top - M.bottom }, root);
    return root;
  }

  function yGrid(root, ticks, y, format) {
    for (const value of ticks) {
      svg("line", { class: "grid", x1: M.left, x2: W - M.right, y1: y(value), y2: y(value) }, root);
      svg("text", { class: "tick tick-y", x: M.left - 6, y: y(value) + 4 }, root).textContent = format(value);
    }
  }

  /** Times at both ends and in the middle of the plot (the ends of the axis, not of the data). */
  function xTicks(root, axis) {
    const baseline = H - M.bottom + 16;
    for (const [t, anchor] of [[axis.lo, "start"], [(axis.lo + axis.hi) / 2, "middle"], [axis.hi, "end"]]) {
      svg("text", { class: "tick tick-x", x: axis.x(t), y: baseline, "text-anchor": anchor }, root)
        .textContent = formatTime(new Date(t), axis.withDate, axis.withMs);
    }
  }

  function emptyMessage(root, text) {
    svg("text", { class: "empty", x: (M.left + W - M.right) / 2, y: (M.top + H - M.bottom) / 2 + 4 }, root).textContent = text;
  }

  /** Integer ticks from 0 to at least max, with a step of 1, 2 or 5 × 10^k (at most 5 ticks). */
  function countTicks(max) {
    const magnitude = 10 ** Math.max(0, Math.floor(Math.log10(max)) - 1);
    const step = [1, 2, 5, 10, 20, 50].map((m) => m * magnitude).find((s) => max / s <= 4);
    const ticks = [];
    for (let v = 0; v < max + step; v += step) ticks.push(v);
    return ticks;
  }

  function recomputeChart(device, recomputes, axis) {
    const root = frame("recomputes", `Cumulative recomputes of ${device.device_id}: ${device.recomputes}`);
    if (recomputes.length === 0 || axis === null) {
      emptyMessage(root, "No recomputes yet");
      return root;
    }
    // The series may be truncated to the last `points` recomputes: count up from the ones before it.
    const before = device.recomputes - recomputes.length;
    const ticks = countTicks(Math.max(device.recomputes, 1));
    const top = ticks[ticks.length - 1];
    const y = (n) => H - M.bottom - (n / top) * (H - M.top - M.bottom);
    yGrid(root, ticks, y, String);
    xTicks(root, axis);

    let path = `M ${M.left} ${y(before)}`;
    recomputes.forEach((p, i) => {
      path += ` H ${axis.x(p.time)} V ${y(before + i + 1)}`;
    });
    path += ` H ${W - M.right}`;
    svg("path", { class: "line", d: path }, root);

    recomputes.forEach((p, i) => {
      const circle = svg("circle", { class: "point", r: 4, cx: axis.x(p.time), cy: y(before + i + 1), "data-reason": p.reason }, root);
      tooltip(
        circle,
        `Recompute #${before + i + 1} (model v${p.version}) at ${formatTime(new Date(p.time), true)}\n` +
          `reason: ${p.reason}\nlearner: ${p.learner}\ntraining: ${formatDuration(p.train_ms)}`,
      );
    });
    return root;
  }

  function accuracyChart(device, beats, recomputes, axis) {
    const root = frame("accuracy", `Accuracy of ${device.device_id} over ${beats.length} heartbeats`);
    const measured = beats.filter((p) => p.accuracy !== null);
    if (axis === null) {
      emptyMessage(root, "No heartbeats yet");
      return root;
    }
    // Three fixed scales, all up to 100 %: 80-100 %, 50-100 % or 0-100 %, whichever holds every point.
    const lowest = measured.length ? Math.min(...measured.map((p) => p.accuracy)) : 0;
    const [floor, step] = lowest >= 0.82 ? [80, 5] : lowest >= 0.52 ? [50, 10] : [0, 25]; // percent
    const y = (a) => H - M.bottom - ((100 * a - floor) / (100 - floor)) * (H - M.top - M.bottom);
    const ticks = [];
    for (let v = floor; v <= 100; v += step) ticks.push(v / 100);
    yGrid(root, ticks, y, (v) => `${Math.round(v * 100)}%`);
    xTicks(root, axis);

    for (const p of recomputes) {
      const x = axis.x(p.time);
      const line = svg("line", { class: "event", x1: x, x2: x, y1: M.top, y2: H - M.bottom, "data-reason": p.reason }, root);
      tooltip(line, `Recompute → model v${p.version} at ${formatTime(new Date(p.time), true)}\nreason: ${p.reason}`);
    }

    if (measured.length === 0) {
      emptyMessage(root, beats.length ? "No accuracy reported yet" : "No heartbeats yet");
      return root;
    }
    // Heartbeats without an accuracy break the line instead of being drawn at 0.
    let path = "";
    let pen = "M";
    for (const p of beats) {
      if (p.accuracy === null) {
        pen = "M";
        continue;
      }
      path += `${pen} ${axis.x(p.time)} ${y(p.accuracy)} `;
      pen = "L";
    }
    svg("path", { class: "line", d: path.trim() }, root);
    for (const p of measured) {
      const circle = svg("circle", { class: "point", r: 4, cx: axis.x(p.time), cy: y(p.accuracy), "data-accuracy": p.accuracy }, root);
      tooltip(
        circle,
        `Accuracy ${formatPercent(p.accuracy)} at ${formatTime(new Date(p.time), true)}\n` +
          `samples: ${formatCount(p.samples)}, warnings: ${formatCount(p.warnings)}, model: ${p.model_version === null ? "none" : `v${p.model_version}`}`,
      );
    }
    return root;
  }

  // ---------------------------------------------------------------- start

  ui.refresh.textContent = String(refreshSeconds);
  ui.login.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = ui.login.elements.token.value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    ui.login.reset();
    clearError();
    ui.status.textContent = "Loading…";
    refresh();
  });
  ui.forget.addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(timer);
    generation += 1;
    refresh();
  });
  window.addEventListener("hashchange", () => {
    takeTokenFromFragment();
    refresh();
  });
  takeTokenFromFragment();
  refresh();
})();
