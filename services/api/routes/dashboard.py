"""The web dashboard at `/` and the API documentation at /docs (Swagger UI) and /redoc (ReDoc), all served
from files in services/api/dashboard/ - the dashboard's ES modules and the vendored libraries under
vendor/ (pinned, with their licences, see vendor/VENDOR.json) - so nothing is loaded from a CDN and the
pages work on an air-gapped cluster. The dashboard reads only the public REST API."""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

DASHBOARD_DIR = Path(__file__).resolve().parents[1] / "dashboard"
STATIC_PREFIX = "/dashboard"

router = APIRouter(include_in_schema=False)


def _static(request: Request, path: str) -> str:
    return f"{request.scope.get('root_path', '')}{STATIC_PREFIX}/{path}"


@router.get("/")
def dashboard():
    """The single page; its views live in the URL fragment (#/plans, #/frontier, ...)."""
    return FileResponse(DASHBOARD_DIR / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/docs")
def swagger_ui(request: Request):
    return get_swagger_ui_html(
        openapi_url=request.scope.get("root_path", "") + request.app.openapi_url,
        title=f"{request.app.title} - API (Swagger UI)",
        swagger_js_url=_static(request, "vendor/swagger-ui/swagger-ui-bundle.js"),
        swagger_css_url=_static(request, "vendor/swagger-ui/swagger-ui.css"),
        swagger_favicon_url=_static(request, "vendor/swagger-ui/favicon-32x32.png"),
        swagger_ui_parameters={"validatorUrl": None})


@router.get("/redoc")
def redoc(request: Request):
    return get_redoc_html(
        openapi_url=request.scope.get("root_path", "") + request.app.openapi_url,
        title=f"{request.app.title} - API (ReDoc)",
        redoc_js_url=_static(request, "vendor/redoc/redoc.standalone.js"),
        redoc_favicon_url=_static(request, "favicon.svg"), with_google_fonts=False)


def mount(app: FastAPI) -> None:
    """The routes above and the static files (ETag and Last-Modified from StaticFiles)."""
    app.include_router(router)
    app.mount(STATIC_PREFIX, StaticFiles(directory=DASHBOARD_DIR), name="dashboard")
