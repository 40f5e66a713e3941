"""``/v1/fleet``: the operator's fleet table (one page, filtered and sorted in SQL), the fleet summary
and one device's page. Every route answers in a bounded number of statements (:mod:`fleet_query`), in
the views' own threads (:attr:`AppState.view_threads`); the summary at default thresholds comes from
a per-worker cache at most ``fleet_summary_max_age_s`` old (:mod:`view_cache`)."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy.orm import Session

from edgedrift_cloud.dependencies import DevicePath, OperatorDep, StateDep
from edgedrift_cloud.fleet_device import DevicePage, device_page
from edgedrift_cloud.fleet_query import (
    DEFAULT_THRESHOLDS,
    FleetFilter,
    FleetPage,
    FleetSummary,
    SortKey,
    Status,
    Thresholds,
    fleet_page,
    fleet_summary,
)

router = APIRouter(prefix="/v1/fleet", tags=["fleet"])

StaleAfter = Annotated[
    float, Query(gt=0, le=86_400, description="Seconds without news before a device is stale.")
]
OfflineAfter = Annotated[
    float,
    Query(
        gt=0,
        le=30 * 86_400,
        description="Seconds without news before a device is offline (decided before stale: at or below "
        "stale_after, no device is stale).",
    ),
]


def _thresholds(stale_after: float, offline_after: float) -> Thresholds:
    """Offline is decided first: with ``offline_after`` at or below ``stale_after`` no device is stale
    (nor drifting once offline), so any pair of positive thresholds has a meaning and none is refused."""
    return Thresholds(stale_after_s=min(stale_after, offline_after), offline_after_s=offline_after)


@router.get("", response_model=FleetPage, summary="One page of the fleet table (operator)")
async def get_fleet(
    _: OperatorDep,
    state: StateDep,
    status_: Annotated[
        list[Status] | None,
        Query(alias="status", description="Keep these statuses (repeat the parameter for several)."),
    ] = None,
    drifting: Annotated[bool | None, Query(description="Only devices drifting now (true) or not.")] = None,
    task: Annotated[str | None, Query(pattern="^(classification|regression)$")] = None,
    q: Annotated[str | None, Query(max_length=64, description="A substring of the device id.")] = None,
    sort: SortKey = "device_id",
    desc: bool = False,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    stale_after: StaleAfter = Thresholds.stale_after_s,
    offline_after: OfflineAfter = Thresholds.offline_after_s,
) -> FleetPage:
    chosen = FleetFilter(statuses=tuple(status_ or ()), drifting=drifting, task=task, search=q or None)
    thresholds = _thresholds(stale_after, offline_after)

    def page(session: Session) -> FleetPage:
        return fleet_page(
            session, chosen, sort=sort, descending=desc, offset=offset, limit=limit, thresholds=thresholds
        )

    return await state.read_view(page)


@router.get("/summary", response_model=FleetSummary, summary="Fleet counts by status (operator)")
async def get_summary(
    _: OperatorDep,
    state: StateDep,
    stale_after: StaleAfter = Thresholds.stale_after_s,
    offline_after: OfflineAfter = Thresholds.offline_after_s,
) -> FleetSummary:
    thresholds = _thresholds(stale_after, offline_after)
    budget = state.settings.recompute_budget_per_minute

    def summary(session: Session) -> FleetSummary:
        return fleet_summary(session, float(budget) if budget else None, thresholds)

    if thresholds == DEFAULT_THRESHOLDS:
        return await state.summary.get(partial(state.with_session, summary), state.view_threads)
    return await state.read_view(summary)


@router.get(
    "/devices/{device_id}",
    response_model=DevicePage,
    summary="One device's page: its row, recent heartbeats and model versions (operator)",
    responses={404: {"description": "Unknown device"}},
)
async def get_device_page(
    device_id: DevicePath,
    _: OperatorDep,
    state: StateDep,
    points: Annotated[int, Query(ge=1, le=5000)] = 500,
    versions: Annotated[int, Query(ge=1, le=200)] = 100,
    stale_after: StaleAfter = Thresholds.stale_after_s,
    offline_after: OfflineAfter = Thresholds.offline_after_s,
    window_s: Annotated[
        float | None,
        Query(gt=0, le=90 * 86_400, description="Only the heartbeats of the last this many seconds."),
    ] = None,
) -> DevicePage:
    thresholds = _thresholds(stale_after, offline_after)
    page = await state.read_view(
        lambda session: device_page(session, device_id, points, versions, thresholds, window_s)
    )
    if page is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"unknown device {device_id!r}")
    return page
