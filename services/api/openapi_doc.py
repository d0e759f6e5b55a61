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
  document, REQUEST_BODIES);
- the HTTP caching and paging contract: every operation that answers 304 takes an `If-None-Match` header and
  declares the `ETag` it sends; `X-Total-Count` on the paginated lists and `Location` (with `Retry-After`)
  where an operation points at a resource to poll (RESPONSE_HEADERS);
- `servers` (relative: the service that served the document), the license and every tag used, described (TAGS);
- request-only schemas state their fields' defaults in the description, not as `default`: generators that treat
  a property with a default as always present (openapi-typescript's default mode, for responses) would make a
  client send every defaulted field (input_defaults). The service applies the defaults.
Downloads list `application/octet-stream` first among their media types (responses.download), and the
exported file keeps that order (openapi_export.canonical sorts every other object's keys).
"""
from __future__ import annotations

import json

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from .schemas import Problem

__all__ = ["LICENSE", "OPERATION_IDS", "RESPONSE_HEADERS", "SERVERS", "TAGS", "operation_id", "install"]

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


TAGS = [
    {"name": "plans", "description": "Plan a job: topology, verified schedules, compiled XML, downloads."},
    {"name": "revisions", "description": "Failure reports and the plan revisions they make."},
    {"name": "topologies", "description": "Evaluate a topology expression or edge list; the Pareto frontier."},
    {"name": "fabric", "description": "Fabrics, placements, and the panel agents' contract (config long poll, "
                                      "state reports)."},
    {"name": "cluster", "description": "Shared-cluster simulations: a job mix on direct-connect against switched "
                                       "fabrics (TopoOpt section 5.6), run in a worker."},
    {"name": "health", "description": "Liveness, readiness, statistics and Prometheus metrics."},
]
# pyproject.toml declares no license (no `license` field, no LICENSE file): the document says exactly that rather
# than inventing one; an SPDX LicenseRef- identifier is the SPDX form for a licence not on its list
LICENSE = {"name": "No license declared (pyproject.toml names none): all rights reserved",
           "identifier": "LicenseRef-fabricplan-no-license-declared"}
SERVERS = [{"url": "/", "description": "the service that served this document"}]

HEADER_SCHEMAS = {
    "ETag": ("the representation's version (a quoted string): send it back in If-None-Match",
             {"type": "string"}),
    "X-Total-Count": ("how many items match, whatever limit and offset", {"type": "integer", "minimum": 0}),
    "Location": ("the URL of the resource to poll", {"type": "string", "format": "uri"}),
    "Retry-After": ("seconds to wait before polling again", {"type": "integer", "minimum": 0}),
}
_POLL = ["Location", "Retry-After"]
# operation id -> status -> headers it sends (ETag is added to 200 and 304 of every operation that answers 304)
RESPONSE_HEADERS = {
    "create_plan": {"200": ["Location"], "202": ["Location"]},
    "report_failures": {"200": ["Location"], "202": ["Location"]},
    "evaluate_topology": {"202": _POLL},
    "get_plan_schedule": {"202": _POLL},
    "get_revision_schedule": {"202": _POLL},
    "list_plans": {"200": ["X-Total-Count"]},
    "list_fabrics": {"200": ["X-Total-Count"]},
    "list_panels": {"200": ["X-Total-Count"]},
    "list_plan_revisions": {"200": ["X-Total-Count"]},
}
IF_NONE_MATCH = {"name": "If-None-Match", "in": "header", "required": False,
                 "description": "the ETag of the representation the client holds: 304 while it is current",
                 "schema": {"type": "string"}}


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
                              routes=app.routes, openapi_version=app.openapi_version, tags=app.openapi_tags or TAGS,
                              servers=app.servers or SERVERS, license_info=LICENSE)
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
            _headers(op)
            models = bodies.get(op.get("operationId"))
            if models:
                refs = [_add_model(schemas, m) for m in models]
                media = op["requestBody"]["content"]["application/json"]
                media["schema"] = {"oneOf": refs, "title": "Body"}
                op["requestBody"]["required"] = True
    _unknown_query(doc)
    _tuple_items(doc)
    _add_model(schemas, Problem)
    for unused in ("HTTPValidationError", "ValidationError"):      # FastAPI's own 422 shape: never served
        schemas.pop(unused, None)
    _input_defaults(doc)
    if "securitySchemes" in doc["components"]:
        doc["security"] = SECURITY
    return doc


UNKNOWN_QUERY = {"description": "an unknown query parameter (services.api.query_guard): the problem names it",
                 "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}


def _unknown_query(doc: dict) -> None:
    """Every operation answers 422 to a query parameter it does not take (an app-wide dependency): declared
    where FastAPI did not (operations without parameters of their own)."""
    for ops in doc.get("paths", {}).values():
        for op in ops.values():
            op.setdefault("responses", {}).setdefault("422", dict(UNKNOWN_QUERY))


def _tuple_items(node) -> None:
    """A fixed-length tuple's schema (prefixItems with minItems = maxItems) also gets `items`, the schema its
    members share (or their anyOf): the same arrays validate, and linters and generators that read only `items`
    (spectral's array-items) see the members' type."""
    if isinstance(node, dict):
        prefix = node.get("prefixItems")
        if node.get("type") == "array" and isinstance(prefix, list) and prefix and "items" not in node:
            distinct = [x for i, x in enumerate(prefix) if x not in prefix[:i]]
            node["items"] = distinct[0] if len(distinct) == 1 else {"anyOf": distinct}
        for v in node.values():
            _tuple_items(v)
    elif isinstance(node, list):
        for v in node:
            _tuple_items(v)


def _headers(op: dict) -> None:
    """Declare If-None-Match and the response headers of RESPONSE_HEADERS (and ETag where 304 is answered)."""
    responses = op.get("responses", {})
    sent = {k: list(v) for k, v in RESPONSE_HEADERS.get(op.get("operationId"), {}).items()}
    if "304" in responses:
        params = op.setdefault("parameters", [])
        if not any(p.get("in") == "header" and p["name"].lower() == "if-none-match" for p in params):
            params.append(dict(IF_NONE_MATCH))
        for status in ("200", "304"):
            sent.setdefault(status, []).insert(0, "ETag")
    for status, names in sent.items():
        headers = responses[status].setdefault("headers", {})
        for name in names:
            description, schema = HEADER_SCHEMAS[name]
            headers.setdefault(name, {"description": description, "schema": schema})


def _refs(node, schemas: dict, seen: set[str]) -> set[str]:
    """Names of the component schemas `node` refers to, transitively."""
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        if ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name not in seen:
                seen.add(name)
                _refs(schemas.get(name), schemas, seen)
        for v in node.values():
            _refs(v, schemas, seen)
    elif isinstance(node, list):
        for v in node:
            _refs(v, schemas, seen)
    return seen


def _input_defaults(doc: dict) -> None:
    """Move `default` into the description in the schemas only request bodies use (see the module's doc)."""
    schemas = doc["components"]["schemas"]
    requests, responses = set(), set()
    for ops in doc["paths"].values():
        for op in ops.values():
            _refs(op.get("requestBody"), schemas, requests)
            _refs(op.get("responses"), schemas, responses)
    for name in sorted(requests - responses):
        _strip_defaults(schemas[name])


def _strip_defaults(node) -> None:
    if isinstance(node, dict):
        for prop in (node.get("properties") or {}).values():
            if "default" in prop:
                value = prop.pop("default")
                if value is not None:
                    note = f"default: {json.dumps(value)}"
                    prop["description"] = f"{prop['description']} ({note})" if prop.get("description") else note
        for key, v in node.items():
            if key != "properties":
                _strip_defaults(v)
            else:
                for prop in v.values():
                    _strip_defaults(prop)
    elif isinstance(node, list):
        for v in node:
            _strip_defaults(v)


def _add_model(schemas: dict, model: type[BaseModel]) -> dict:
    """`model`'s JSON schema (validation mode) and its definitions into components; a $ref to it."""
    schema = model.model_json_schema(mode="validation", ref_template="#/components/schemas/{model}")
    for name, sub in schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas.setdefault(model.__name__, schema)
    return {"$ref": f"#/components/schemas/{model.__name__}"}
