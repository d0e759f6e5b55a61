"""Property-based API testing (schemathesis) of every operation in the OpenAPI document, on SQLite and
PostgreSQL: no server error, no response outside its declared schema, no undocumented status code or media
type. Examples per operation are bounded (MAX_EXAMPLES) so the suite stays fast; bench-sized runs can raise
FABRICPLAN_SCHEMATHESIS_EXAMPLES."""
from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings as hsettings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from services.api.openapi_export import document

MAX_EXAMPLES = int(os.environ.get("FABRICPLAN_SCHEMATHESIS_EXAMPLES", "12"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
SCHEMA = schemathesis.openapi.from_dict(document())
OPERATIONS = {op.label: op for op in (r.ok() for r in SCHEMA.get_all_operations())}
# the plan fields the generated bodies can hit without starting heavy plans: nodes <= 64
SMALL_PLANS = {"POST /v1/plans"}


def test_every_operation_is_covered():
    """Every operation of the document is one the runs below exercise (schemathesis read them all)."""
    methods = {"get", "put", "post", "delete", "patch"}
    documented = {f"{m.upper()} {path}" for path, ops in document()["paths"].items() for m in ops if m in methods}
    assert set(OPERATIONS) == documented and len(documented) >= 25, sorted(documented ^ set(OPERATIONS))


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


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_operation_conforms(client, label):
    op = OPERATIONS[label]

    @hsettings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy())
    def run(case):
        if label in SMALL_PLANS and isinstance(case.body, dict) and isinstance(case.body.get("nodes"), int):
            case.body["nodes"] = min(case.body["nodes"], 64)
        response = _send(client, case)
        case.validate_response(response, checks=CHECKS)

    run()
