"""Every error is an RFC 9457 problem (application/problem+json) of the same shape, whatever the status:
type, title, status, detail, instance, and the field at fault with the reason."""
from __future__ import annotations

from tests.conftest import MINIMAL, unique_job

KEYS = {"type", "title", "status", "detail", "instance", "field", "reason", "errors"}


def _problem(r, status: int, instance: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json", r.headers
    body = r.json()
    assert KEYS <= body.keys(), body
    assert body["status"] == status and body["title"] and body["detail"] and body["reason"]
    assert body["type"].startswith("urn:fabricplan:problem:") and body["instance"] == instance
    return body


def test_every_status_answers_the_same_problem_shape(client):
    missing = _problem(client.get("/v1/plans/0123456789abcdef0123456789abcdef"), 404,
                       "/v1/plans/0123456789abcdef0123456789abcdef")
    assert missing["type"].endswith("not-found") and missing["field"] is None and missing["errors"] == []
    _problem(client.delete("/healthz"), 405, "/healthz")
    _problem(client.get("/no/such/route"), 404, "/no/such/route")
    body = {**MINIMAL, "job_id": unique_job()}
    assert client.post("/v1/plans", json=body, headers={"Idempotency-Key": "k1"}).status_code == 202
    clash = _problem(client.post("/v1/plans", json={**body, "job_id": unique_job()},
                                 headers={"Idempotency-Key": "k1"}), 409, "/v1/plans")
    assert "different request" in clash["reason"]
    bad = _problem(client.post("/v1/plans", json={**MINIMAL, "degree": 0}), 422, "/v1/plans")
    assert bad["field"] == "degree" and bad["errors"][0]["field"] == "degree" and "degree" in bad["detail"]
    typo = _problem(client.post("/v1/plans", json={**MINIMAL, "workload": {"training": {
        "model": "gpt3-175b", "device": "a10"}}}), 422, "/v1/plans")
    assert typo["field"] == "workload.training.device" and "'a100'" in typo["reason"], typo
    nul = _problem(client.get("/v1/plans", params={"job_id": "a\x00b"}), 422, "/v1/plans")
    assert nul["errors"][0]["type"] == "nul_character"
    unknown = _problem(client.get("/v1/plans", params={"stauts": "done"}), 422, "/v1/plans")
    assert unknown["field"] == "stauts"
