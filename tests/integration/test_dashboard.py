"""The operations dashboard and ``/docs`` in a real headless Chromium (:mod:`support.browser`) against a
real cloud trainer holding 10,000 devices (seeded through SQL by :mod:`edgedrift_harness.fleet_seed`,
plus dev-a's real recomputes and heartbeats through the API).

The page must stay offline (every request to 127.0.0.1), render the first page of the fleet table within
2 s of navigation and apply a filter within 500 ms (both timed inside the page), show stopped devices as
stale/offline (never as healthy), RMSE for regression devices, and a device page whose charts share one
time axis over a chosen time range, with a silence drawn as a gap, the model version as steps, the
recomputes marked on the quality chart and axis labels that do not overlap. Screenshots go to
``test-artifacts/`` (gitignored): ``dashboard-fleet.png``, ``dashboard-device.png``,
``dashboard-refused.png``, ``docs.png``; the fleet and device pages at 1,400 and 420 px also to
``docs/img/`` (``dashboard-{fleet,device}-{1400,420}.png``, shown in docs/cloud-trainer.md).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from support.browser import Browser, Page, only_local
from support.cloud import DEVICES, OPERATOR, CloudServer

from edgedrift_harness.fleet_seed import KINDS, device_id, seed_fleet

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
WIDTHS = (1400, 420)
#: Heartbeats of device 1 deleted from the middle of its 300 (10 s apart): a 10-minute silence.
SILENCE = (100, 60)
SEEDED = 10_000
PER_KIND = SEEDED // len(KINDS)
#: Status thresholds for the test's lifetime: the seeded "online" devices stay online for 5 minutes.
DASHBOARD = "/dashboard?refresh=30&stale_after=300&offline_after=3600"

#: The fleet table as the page shows it.
TABLE_JS = """(() => ({
  rendered: document.body.dataset.rendered || "",
  firstRenderMs: Number(document.body.dataset.firstRenderMs || 0),
  info: document.querySelector("[data-page-info]").textContent,
  total: Number(document.querySelector("[data-page-info]").dataset.total),
  totals: Object.fromEntries([...document.querySelectorAll("[data-total]")]
    .map((n) => [n.dataset.total, n.dataset.value])),
  rows: [...document.querySelectorAll("tr[data-device]")].map((tr) => ({
    id: tr.dataset.device, status: tr.dataset.status,
    drifting: tr.querySelector("[data-col=drifting]").textContent,
    metric: tr.querySelector("[data-col=metric]").textContent,
    old: tr.querySelector("[data-col=metric]").classList.contains("old"),
    version: tr.querySelector("[data-col=version]").textContent })),
  error: document.querySelector("[data-error]").hidden ? null
    : document.querySelector("[data-error]").textContent,
  login: !document.querySelector("[data-login]").hidden,
  stored: sessionStorage.getItem("edgedrift.operatorToken"),
  hash: location.hash,
}))()"""

#: Changes the table from inside the page and resolves with the ms until the new page is rendered.
TIMED_JS = """new Promise((resolve) => {
  const before = document.body.dataset.rendered;
  const started = performance.now();
  const seen = new MutationObserver(() => {
    if (document.body.dataset.rendered === before) return;
    seen.disconnect();
    resolve(performance.now() - started);
  });
  seen.observe(document.body, { attributes: true, attributeFilter: ["data-rendered"] });
  setTimeout(() => { seen.disconnect(); resolve(-1); }, 10000);
  (() => { %s })();
})"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = Browser()
    try:
        yield chromium
    finally:
        chromium.stop()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (so a fresh sessionStorage) for each test."""
    with browser.new_page() as tab:
        yield tab


@pytest.fixture(scope="module")
def fleet_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """A cloud on SQLite with 10,000 seeded devices and dev-a's real history."""
    workdir = tmp_path_factory.mktemp("fleet")
    url = f"sqlite:///{workdir / 'registry.db'}"
    server = CloudServer(url, workdir).start()
    try:
        seed_fleet(url, SEEDED, history_devices=200, beats_each=300, versions=3, stale_age_s=900)
        with sqlite3.connect(workdir / "registry.db") as db:
            offset, count = SILENCE
            db.execute(
                "DELETE FROM heartbeats WHERE id IN (SELECT id FROM heartbeats WHERE device_id = ?"
                " ORDER BY received_at LIMIT ? OFFSET ?)",
                (device_id(1), count, offset),
            )
        history: list[float | str] = [0.92, "druid", 0.64, "ddm", 0.88]
        for i, item in enumerate(history):
            if isinstance(item, str):
                recompute(server, "dev-a", item, seed=i)
            else:
                heartbeat(server, "dev-a", item, i)
        yield server
    finally:
        server.stop()


def recompute(cloud: CloudServer, device: str, reason: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 3))
    y = np.where(X @ np.array([1.0, -0.5, 0.25]) > 0, 1.0, -1.0)
    body = {
        "task": "classification",
        "learner": "logistic",
        "X": X.tolist(),
        "y": y.tolist(),
        "reason": reason,
    }
    with cloud.client(DEVICES[device]) as c:
        r = c.post(f"/v1/devices/{device}/models", json=body)
    assert r.status_code == 201, r.text


def heartbeat(cloud: CloudServer, device: str, accuracy: float, i: int) -> None:
    beat = {"samples": 500 * (i + 1), "accuracy": accuracy, "warnings": int(accuracy < 0.8)}
    with cloud.client(DEVICES[device]) as c:
        r = c.post(f"/v1/devices/{device}/stats", json=beat)
    assert r.status_code == 201, r.text


def table(page: Page) -> dict[str, Any]:
    snap: dict[str, Any] = page.evaluate(TABLE_JS)
    return snap


def timed(page: Page, action: str) -> float:
    """Milliseconds from the action to the next rendered page, measured in the page."""
    ms = float(page.evaluate(TIMED_JS % action))
    assert ms >= 0, f"nothing rendered within 10 s of {action}: {table(page)['error']} {page.errors()}"
    return ms


def set_filter(name: str, value: str) -> str:
    """JavaScript that sets one filter control and fires its change event."""
    return (
        f"{{ const f = document.querySelector('[data-filters]').elements[{json.dumps(name)}];"
        f" f.value = {json.dumps(value)}; f.dispatchEvent(new Event('change', {{bubbles: true}})); }}"
    )


def test_fleet_table_with_10000_devices(fleet_cloud: CloudServer, page: Page) -> None:
    page.goto(f"{fleet_cloud.url}{DASHBOARD}#token={OPERATOR}")
    page.wait_js("document.body.dataset.rendered", "the fleet table")
    snap = table(page)
    first_render_ms = snap["firstRenderMs"]
    assert 0 < first_render_ms <= 2000, f"first render {first_render_ms:.0f} ms"
    assert snap["hash"] == "" and snap["stored"] == OPERATOR and snap["error"] is None
    total = SEEDED + len(DEVICES)
    assert snap["total"] == total and snap["info"] == f"1–50 of {total}" and len(snap["rows"]) == 50
    totals = snap["totals"]
    assert totals["devices"] == str(total) and totals["unauthorized"] == str(PER_KIND)
    assert totals["degraded"] == str(PER_KIND) and totals["drifting"] == str(PER_KIND)
    rows = {r["id"]: r for r in snap["rows"]}
    # dev-a: real heartbeats and two recomputes; its latest heartbeat reports a warning.
    assert rows["dev-a"]["status"] == "online" and rows["dev-a"]["metric"] == "88.0%"
    assert "v2" in rows["dev-a"]["version"]
    page.screenshot(ARTIFACTS / "dashboard-fleet.png")
    assert totals["budget_use"] == "" and page.evaluate(BUDGET_JS) == "no recompute budget"
    for width in WIDTHS:
        page.screenshot(DOCS_IMG / f"dashboard-fleet-{width}.png", width=width)
    page.set_width(1280)

    # Search: a stopped device (silent for two hours) and a never-seen one are offline, greyed, not healthy.
    ms = timed(page, "const q = document.querySelector('[data-filters]').elements.q;"
               " q.value = 'fleet-0000'; q.form.requestSubmit();")  # fmt: skip
    rows = {r["id"]: r for r in table(page)["rows"]}
    assert set(rows) == {device_id(i) for i in range(10)}, rows
    assert rows[device_id(6)]["status"] == "offline" and rows[device_id(6)]["old"]
    assert rows[device_id(4)]["status"] == "stale" and rows[device_id(4)]["old"]
    assert rows[device_id(7)]["status"] == "offline" and rows[device_id(7)]["metric"] == "no accuracy yet"
    assert rows[device_id(1)]["drifting"] == "drifting" and rows[device_id(2)]["drifting"] == ""
    assert rows[device_id(0)]["metric"].startswith("RMSE "), rows[device_id(0)]  # a regression device
    print(f"search rendered in {ms:.0f} ms")

    # A status filter over the 10,000 devices, within 500 ms from the change to the rendered page.
    timed(page, set_filter("q", ""))
    ms = timed(page, set_filter("status", "degraded"))
    snap = table(page)
    assert snap["total"] == PER_KIND and {r["status"] for r in snap["rows"]} == {"degraded"}
    assert ms <= 500, f"filter took {ms:.0f} ms"

    # Sorted by accuracy, highest first, by the server; then the next page.
    timed(page, set_filter("status", "") + "document.querySelector('th[data-sort=accuracy]').click();"
          " document.querySelector('th[data-sort=accuracy]').click();")  # fmt: skip
    shown = [float(r["metric"].rstrip("%")) for r in table(page)["rows"] if r["metric"].endswith("%")]
    assert shown == sorted(shown, reverse=True) and len(shown) == 50
    timed(page, "document.querySelector('[data-action=next]').click();")
    assert table(page)["info"] == f"51–100 of {total}"
    print(f"first render {first_render_ms:.0f} ms, degraded filter {ms:.0f} ms")

    requests = page.requests()
    assert only_local(requests) == [], only_local(requests)
    api = [r for r in requests if urlsplit(r["url"]).path.startswith("/v1/")]
    assert api and all(r["headers"].get("Authorization") == f"Bearer {OPERATOR}" for r in api)
    assert not [r for r in requests if OPERATOR in r["url"]], "the token must never be in a URL"
    assert page.errors() == []


BUDGET_JS = "document.querySelector('[data-card=budget]').textContent.replace(/\\s+/g, ' ').trim()"

CHARTS_JS = """(() => ({
  rendered: document.body.dataset.rendered || "",
  totals: Object.fromEntries([...document.querySelectorAll("[data-total]")]
    .map((n) => [n.dataset.total, n.textContent])),
  facts: Object.fromEntries([...document.querySelectorAll("[data-fact]")]
    .map((n) => [n.dataset.fact, n.textContent])),
  charts: [...document.querySelectorAll("figure[data-chart]")].map((f) => ({
    name: f.dataset.chart, points: Number(f.dataset.points), xmin: f.dataset.xmin, xmax: f.dataset.xmax,
    caption: f.querySelector("figcaption").textContent, canvas: !!f.querySelector("canvas"),
    gaps: Number(f.dataset.gaps), markers: Number(f.dataset.markers), stepped: f.dataset.stepped === "true",
    versions: Number(f.dataset.versionCount || 0),
    overlaps: Number(f.querySelector(".uplot").dataset.overlaps),
    ticks: Number(f.querySelector(".uplot").dataset.ticks) })),
  versions: [...document.querySelectorAll("tr[data-version]")].map((tr) => ({
    version: tr.dataset.version, reason: tr.querySelector("[data-col=reason]").textContent,
    monitor: tr.querySelector("[data-col=monitor]").textContent })),
}))()"""


def test_device_page_shares_one_time_axis(fleet_cloud: CloudServer, page: Page) -> None:
    page.goto(f"{fleet_cloud.url}{DASHBOARD}#token={OPERATOR}")
    page.wait_js("document.body.dataset.rendered", "the fleet table")
    timed(page, f"location.hash = 'device={device_id(1)}';")
    snap = page.evaluate(CHARTS_JS)
    kept = 300 - SILENCE[1]
    assert snap["rendered"] == f"device {device_id(1)} {kept} 3 all"
    assert snap["facts"]["status"] == "online" and snap["facts"]["drifting now"] == "yes"
    # the summary cards are filled on the device page too (opened directly or from the fleet)
    assert snap["totals"]["devices"] == str(SEEDED + len(DEVICES)) and "–" not in snap["totals"].values()
    names = [c["name"] for c in snap["charts"]]
    assert names == ["metric", "recomputes", "warnings", "throughput", "drops"]
    assert all(c["canvas"] for c in snap["charts"])
    assert {(c["xmin"], c["xmax"]) for c in snap["charts"]} == {
        (snap["charts"][0]["xmin"], snap["charts"][0]["xmax"])
    }
    charts = {c["name"]: c for c in snap["charts"]}
    metric = charts["metric"]
    assert metric["caption"].startswith("accuracy") and metric["points"] == kept
    assert metric["gaps"] == 1 and charts["throughput"]["gaps"] == 1, "the silence must stay a gap"
    assert metric["markers"] == 3, "every recompute is marked on the quality chart"
    assert charts["recomputes"]["stepped"] and charts["recomputes"]["versions"] == 3
    assert all(c["overlaps"] == 0 and c["ticks"] >= 2 for c in snap["charts"]), snap["charts"]
    assert [v["version"] for v in snap["versions"]] == ["3", "2", "1"]
    assert all("threshold=0.5" in v["monitor"] for v in snap["versions"]) and snap["versions"][0]["reason"]
    page.screenshot(ARTIFACTS / "dashboard-device.png")
    for width in WIDTHS:  # charts are sized when drawn: draw them again at each width
        page.set_width(width)
        renders = int(page.evaluate("Number(document.body.dataset.renders)"))
        page.evaluate("window.dispatchEvent(new HashChangeEvent('hashchange'))")
        page.wait_js(f"Number(document.body.dataset.renders) > {renders}", f"the device page at {width} px")
        at_width = page.evaluate(CHARTS_JS)["charts"]
        assert all(c["overlaps"] == 0 and c["ticks"] >= 2 for c in at_width), (width, at_width)
        page.screenshot(DOCS_IMG / f"dashboard-device-{width}.png", width=width)
    page.set_width(1280)

    # The time range: the last 15 minutes of a device whose newest heartbeat is fresh.
    timed(page, "const r = document.querySelector('[data-range]'); r.value = '900';"
          " r.dispatchEvent(new Event('change'));")  # fmt: skip
    snap = page.evaluate(CHARTS_JS)
    points = snap["charts"][0]["points"]
    assert snap["rendered"].endswith(" 900") and 0 < points < kept, snap["rendered"]
    assert float(snap["charts"][0]["xmax"]) - float(snap["charts"][0]["xmin"]) == pytest.approx(900, abs=1)
    timed(page, "const r = document.querySelector('[data-range]'); r.value = '';"
          " r.dispatchEvent(new Event('change'));")  # fmt: skip

    # Opened directly on a device: the summary cards are filled all the same (they showed "–").
    page.evaluate(f"location.hash = 'device={device_id(2)}'; location.reload();")
    page.wait_js(
        "document.readyState === 'complete'"
        f" && document.body.dataset.rendered?.startsWith('device {device_id(2)}')",
        "the device page after a reload",
    )
    assert page.evaluate("Number(document.body.dataset.renders)") == 1, "a fresh page, opened on the device"
    totals = page.evaluate(CHARTS_JS)["totals"]
    assert totals["devices"] == str(SEEDED + len(DEVICES)) and "–" not in totals.values(), totals
    timed(page, f"location.hash = 'device={device_id(5)}';")  # a regression device
    snap = page.evaluate(CHARTS_JS)
    assert snap["charts"][0]["caption"].startswith("RMSE") and snap["facts"]["RMSE"].startswith("RMSE ")
    timed(page, f"location.hash = 'device={device_id(6)}';")  # stopped two hours ago
    assert page.evaluate(CHARTS_JS)["facts"]["status"] == "offline"
    assert only_local(page.requests()) == [] and page.errors() == []


def test_without_token_asks_for_it_and_explains_refusals(fleet_cloud: CloudServer, page: Page) -> None:
    page.goto(f"{fleet_cloud.url}{DASHBOARD}")
    page.wait_js("!document.querySelector('[data-login]').hidden", "the token form")
    assert not [r for r in page.requests() if "/v1/" in r["url"]], "no token, so no API request"

    def submit(token: str) -> None:
        page.evaluate(
            "(() => { const f = document.querySelector('[data-login]');"
            f" f.elements.token.value = {json.dumps(token)}; f.requestSubmit(); }})()"
        )

    submit("not-the-operator-token-0123456789")
    error = page.wait_js("document.querySelector('[data-error]').textContent", "the 401 message")
    assert "401" in error and "operator token was rejected" in error
    assert table(page)["login"] and table(page)["stored"] is None

    submit(DEVICES["dev-a"])  # a valid credential, but a device's, not the operator's
    error = page.wait_js(
        "document.querySelector('[data-error]').textContent.includes('403')"
        " && document.querySelector('[data-error]').textContent", "the 403 message"
    )  # fmt: skip
    assert "not the operator's" in error and table(page)["login"]
    page.screenshot(ARTIFACTS / "dashboard-refused.png")

    submit(OPERATOR)
    page.wait_js("document.body.dataset.rendered", "the fleet table")
    assert not table(page)["login"] and table(page)["stored"] == OPERATOR
    page.evaluate("document.querySelector('[data-action=forget]').click()")
    page.wait_js("!document.querySelector('[data-login]').hidden", "the token form after 'Forget token'")
    assert table(page)["stored"] is None and table(page)["rows"] == []
    assert only_local(page.requests()) == []


def test_docs_renders_offline(fleet_cloud: CloudServer, page: Page) -> None:
    page.goto(f"{fleet_cloud.url}/docs")
    title = page.wait_js("document.querySelector('.swagger-ui .info .title')?.textContent", "Swagger UI")
    assert "EdgeDrift cloud trainer" in title
    operations = page.wait_js(
        "document.querySelectorAll('.opblock-summary-path').length", "the operations", timeout=10
    )
    assert operations > 10
    page.screenshot(ARTIFACTS / "docs.png")
    assert only_local(page.requests()) == []


def test_page_refreshes_itself(fleet_cloud: CloudServer, page: Page) -> None:
    page.goto(f"{fleet_cloud.url}{DASHBOARD.replace('refresh=30', 'refresh=1')}#token={OPERATOR}")
    page.wait_js("document.body.dataset.rendered", "the fleet table")
    cell = "document.querySelector('tr[data-device=dev-b] [data-col=recomputes]').textContent"
    assert page.evaluate(cell) == "0"
    recompute(fleet_cloud, "dev-b", "ddm", seed=7)
    page.wait_js(f"{cell} === '1'", "dev-b's recompute after a refresh", timeout=10)
    assert page.evaluate("document.querySelector('tr[data-device=dev-b]').dataset.status") == "online"
    assert page.errors() == []
