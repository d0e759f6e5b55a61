"""What the OpenAPI document says beyond what FastAPI derives from the routes, so that generated clients
(openapi-python-client, tests/api/test_generated_client.py) work without hand edits:

- operation ids named for what they do (`create_plan`, `get_plan_schedule`, ...: OPERATION_IDS), not
  FastAPI's `<function>_<path>_<method>`;
- authentication declared once, at the top level, as optional: `[{}, HTTPBearer, APIKeyHeader]` (a
  service with FABRICPLAN_API_KEYS_REQUIRED answers 401 without a key; each operation documents its 401
  and 403). Per-operation security would make generators demand an authenticated client even where no
  key is needed;
- errors as RFC 9457 problems: every 4xx and 5xx response is `application/problem+json` with the Problem
  schema (services.api.errors), FastAPI's own 422 shape left out;
- typed request bodies the route validates itself (the fabric registration: a layout shortcut or the full
  document, REQUEST_BODIES).
Downloads list `application/octet-stream` first among their media types (responses.download), and the
exported file keeps that order (openapi_export.canonical sorts every other object's keys).
"""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from .schemas import Problem

__all__ = ["OPERATION_IDS", "operation_id", "install"]

# route function name -> operation id (names that already say what they do are kept: create_plan, ...)
OPERATION_IDS = {
    "plan_events": "list_plan_events",
    "plan_topology": "get_plan_topology",
    "plan_schedule": "get_plan_schedule",
    "plan_link_loads": "get_plan_link_loads",
    "release_fabric": "release_plan_fabric",
    "activate": "activate_plan",
    "list_revisions": "list_plan_revisions",
    "get_revision": "get_plan_revision",
    "revision_topology": "get_revision_topology",
    "revision_schedule": "get_revision_schedule",
    "fabric_capital_cost": "get_fabric_cost",
    "panel_config": "get_panel_config",
    "panel_state": "report_panel_state",
    "evaluate": "evaluate_topology",
    "stats": "get_stats",
    "metrics": "get_metrics",
    "healthz": "get_health",
    "readyz": "get_readiness",
}


def operation_id(route: APIRoute) -> str:
    """FastAPI's generate_unique_id_function: the route's operation id (tests check they are unique)."""
    return OPERATION_IDS.get(route.name, route.name)


def _request_bodies() -> dict[str, list[type[BaseModel]]]:
    from .schemas import FabricDocument, FabricLayout

    return {"register_fabric": [FabricLayout, FabricDocument]}


OCTET = "application/octet-stream"
PROBLEM_JSON = "application/problem+json"
SECURITY = [{}, {"HTTPBearer": []}, {"APIKeyHeader": []}]


def install(app: FastAPI) -> None:
    """Replace app.openapi with the generator above (cached like FastAPI's)."""
    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description,
                              routes=app.routes, openapi_version=app.openapi_version, tags=app.openapi_tags,
                              servers=app.servers)
            app.openapi_schema = _customise(doc)
        return app.openapi_schema

    app.openapi = openapi


def _customise(doc: dict) -> dict:
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    bodies = _request_bodies()
    for ops in doc.get("paths", {}).values():
        for op in ops.values():
            op.pop("security", None)
            for status, response in op.get("responses", {}).items():
                media = response.get("content", {})
                ref = media.get("application/json", {}).get("schema", {}).get("$ref", "")
                if status[:1] in "45" and ref.rsplit("/", 1)[-1] in ("Problem", "HTTPValidationError"):
                    response["content"] = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
                    continue
                if OCTET in media:          # FastAPI puts the route's default (JSON) first: binary first
                    response["content"] = {OCTET: media[OCTET], **{k: v for k, v in media.items() if k != OCTET}}
            models = bodies.get(op.get("operationId"))
            if models:
                refs = [_add_model(schemas, m) for m in models]
                media = op["requestBody"]["content"]["application/json"]
                media["schema"] = {"oneOf": refs, "title": "Body"}
                op["requestBody"]["required"] = True
    _add_model(schemas, Problem)
    for unused in ("HTTPValidationError", "ValidationError"):      # FastAPI's own 422 shape: never served
        schemas.pop(unused, None)
    if "securitySchemes" in doc["components"]:
        doc["security"] = SECURITY
    return doc


def _add_model(schemas: dict, model: type[BaseModel]) -> dict:
    """`model`'s JSON schema (validation mode) and its definitions into components; a $ref to it."""
    schema = model.model_json_schema(mode="validation", ref_template="#/components/schemas/{model}")
    for name, sub in schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas.setdefault(model.__name__, schema)
    return {"$ref": f"#/components/schemas/{model.__name__}"}
