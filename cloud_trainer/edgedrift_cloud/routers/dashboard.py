"""``/dashboard``: the operator page. It is static (HTML, CSS, JS, all vendored, no CDN) and reads
``/v1/fleet`` with the operator token taken from the URL fragment (never sent to the server)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC = Path(__file__).resolve().parent.parent / "static"
router = APIRouter(tags=["dashboard"])


@router.get("/dashboard", response_class=FileResponse, summary="Operator dashboard (HTML)")
def dashboard() -> FileResponse:
    return FileResponse(
        STATIC / "dashboard.html", media_type="text/html", headers={"Cache-Control": "no-cache"}
    )
