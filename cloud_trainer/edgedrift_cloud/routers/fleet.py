"""``GET /v1/fleet``: every device's counters and time series, for the operator dashboard."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from edgedrift.wire import Fleet
from edgedrift_cloud import registry
from edgedrift_cloud.dependencies import OperatorDep, SessionDep

router = APIRouter(prefix="/v1/fleet", tags=["fleet"])


@router.get("", response_model=Fleet, summary="Fleet totals and per-device series (operator)")
def get_fleet(
    _: OperatorDep, session: SessionDep, points: Annotated[int, Query(ge=1, le=5000)] = 500
) -> Fleet:
    return registry.fleet(session, points)
