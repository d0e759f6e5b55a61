"""Property-based API testing (schemathesis) of every operation in the OpenAPI document, on SQLite and
PostgreSQL: no server error, no response outside its declared schema, no undocumented status code or media
type. Examples per operation are bounded (MAX_EXAMPLES) so the suite stays fast; bench-sized runs can raise
FABRICPLAN_SCHEMATHESIS_EXAMPLES."""
from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, given, settings as hsettings

from tests.helpers import committed_openapi

MAX_EXAMPLES = int(os.environ.get("FABRICPLAN_SCHEMATHESIS_EXAMPLES", "12"))
METHODS = ("get", "put", "post", "delete", "patch")
# the committed document names the operations (tests/api/test_openapi.py keeps it the app's); schemathesis reads
# the app's own document when a test runs, not at collection
LABELS = sorted(f"{m.upper()} {path}" for path, ops in committed_openapi()["paths"].items() for m in ops
                if m in METHODS)
# the plan fields the generated bodies can hit without starting heavy plans: nodes <= 64
SMALL_PLANS = {"POST /v1/plans"}


@functools.cache
def operations() -> dict:
    """Every operation of the app's document, as schemathesis reads it, by label."""
    import schemathesis

    from services.api.openapi_export import document

    schema = schemathesis.openapi.from_dict(document())
    return {op.label: op for op in (r.ok() for r in schema.get_all_operations())}


def checks() -> list:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                                   status_code_conformance)

    return [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def test_every_operation_is_covered():
    """Every operation of the document is one the runs below exercise (schemathesis read them all)."""
    from services.api.openapi_export import document

    documented = {f"{m.upper()} {path}" for path, ops in document()["paths"].items() for m in ops if m in METHODS}
    assert set(operations()) == documented == set(LABELS) and len(documented) >= 25, \
        sorted((documented | set(LABELS)) ^ set(operations()))


def _send(client, case):
    kw = case.as_transport_kwargs(base_url="http://testserver")
    data = kw.pop("data", None)
    if data is not None:
        kw["content"] = data if isinstance(data, (bytes, str)) else str(data)
    kw.pop("verify", None)
    kw.pop("allow_redirects", None)
    kw.pop("timeout", None)
    if kw.get("cookies"):
        kw.setdefault("headers", {})["cookie"] = "; ".join(f"{k}={v}" for k, v in kw["cookies"].items())
    return client.request(**{k: v for k, v in kw.items() if k in ("method", "url", "params", "headers", "json",
                                                                   "content")})


@pytest.mark.parametrize("label", LABELS)
def test_operation_conforms(client, label):
    op = operations()[label]
    checked = checks()

    @hsettings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy())
    def run(case):
        if label in SMALL_PLANS and isinstance(case.body, dict) and isinstance(case.body.get("nodes"), int):
            case.body["nodes"] = min(case.body["nodes"], 64)
        response = _send(client, case)
        case.validate_response(response, checks=checked)

    run()
