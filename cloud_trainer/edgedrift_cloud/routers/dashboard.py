"""``/dashboard``: the operator page, and ``/docs``: Swagger UI for the OpenAPI schema. Both work offline:
the dashboard is static (HTML, CSS, JS and the vendored uPlot, no CDN) and reads the fleet API with the
operator token taken from the URL fragment (never sent to the server); Swagger UI's assets come from the
``swagger-ui-bundle-v2`` package."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

STATIC = Path(__file__).resolve().parent.parent / "static"
SWAGGER = Path(str(swagger_ui_path))
router = APIRouter(tags=["dashboard"])


@router.get("/dashboard", response_class=FileResponse, summary="Operator dashboard (HTML)")
def dashboard() -> FileResponse:
    return FileResponse(
        STATIC / "dashboard.html", media_type="text/html", headers={"Cache-Control": "no-cache"}
    )


@router.get("/docs", response_class=HTMLResponse, include_in_schema=False)
def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="EdgeDrift cloud trainer API",
        swagger_js_url="/docs/assets/swagger-ui-bundle.js",
        swagger_css_url="/docs/assets/swagger-ui.css",
        swagger_favicon_url="/docs/assets/favicon-32x32.png",
    )


@router.get("/docs/assets/{name}", response_class=FileResponse, include_in_schema=False)
def docs_asset(
    name: Literal["swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"],
) -> FileResponse:
    return FileResponse(SWAGGER / name, headers={"Cache-Control": "public, max-age=86400"})
