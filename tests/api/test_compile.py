"""Compiled XML over the API: the plan compiles its runtimes' files in the worker, GET serves the stored file,
other options answer 202 and compile in a worker, refusals are kept and answered 422 naming the limit, and
invalid options get 422 with the field. Parametrised over SQLite and PostgreSQL (when available)."""
from __future__ import annotations

import re

from services.compiler.api import check_xml

from tests.conftest import MINIMAL, poll_xml, unique_job, wait_done


def test_plan_compiles_its_runtimes(client):
    body = {**MINIMAL, "job_id": unique_job(), "runtimes": ["rccl", "legacy", "oneccl"]}
    pid = client.post("/v1/plans", json=body).json()["id"]
    p = wait_done(client, pid)
    assert p["status"] == "done", p["reason"]
    assert set(p["compiled"]) == {"rccl", "legacy", "oneccl"}
    assert "compile" in [e["stage"] for e in client.get(f"/v1/plans/{pid}/events").json()]
    for runtime, per in p["compiled"].items():
        for c in ("allgather", "reducescatter", "allreduce"):
            summary = per[c]
            assert summary["status"] == "done", summary
            assert p["links"][f"xml:{runtime}:{c}"] == summary["url"]
            r = client.get(summary["url"])                      # stored at plan time: no 202
            assert r.status_code == 200, r.text
            fmt = "oneccl" if runtime == "oneccl" else "msccl"
            rep = check_xml(r.text, fmt, runtime=None if fmt == "oneccl" else runtime)
            assert rep.ok and rep.comm_steps == p["schedules"][c]["steps"]
            if fmt == "msccl":
                assert summary["xml_steps"] == rep.xml_steps and summary["predicted_time_us"]


def test_default_plan_compiles_the_executor(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    p = wait_done(client, pid)
    assert list(p["compiled"]) == ["executor"]
    r = client.get(f"/v1/plans/{pid}/schedules/allgather", params={"format": "msccl"})
    assert r.status_code == 200 and 'coll="allgather"' in r.text and 'outofplace="1"' in r.text


def test_other_options_compile_in_a_worker(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    wait_done(client, pid)
    url = f"/v1/plans/{pid}/schedules/allreduce"
    params = {"format": "msccl", "runtime": "rccl", "proto": "LL128", "inplace": "out", "instances": 2,
              "channels": 2, "min_bytes": 4096, "max_bytes": 1 << 30}
    first = client.get(url, params=params)
    assert first.status_code in (200, 202)
    r = poll_xml(client, url, params)
    assert r.status_code == 200
    assert 'proto="LL128"' in r.text and 'minBytes="4096"' in r.text and 'inplace="0" outofplace="1"' in r.text
    assert f'maxBytes="{1 << 30}"' in r.text
    nchannels = int(re.search(r' nchannels="(\d+)"', r.text).group(1))
    assert nchannels % 4 == 0                  # each link's messages on 2 channels, in each of 2 instances
    assert check_xml(r.text, runtime="rccl").ok
    assert client.get(url, params=params).headers["etag"] == r.headers["etag"]


def test_invalid_options_are_422_with_the_field(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    wait_done(client, pid)
    url = f"/v1/plans/{pid}/schedules/allreduce"
    for params, field in (({"format": "msccl", "runtime": "legacy", "max_bytes": 0}, "max_bytes"),
                          ({"format": "msccl", "runtime": "legacy", "inplace": "both"}, "inplace"),
                          ({"format": "msccl", "channels": 0}, "channels"),
                          ({"format": "msccl", "runtime": "nope"}, "runtime"),
                          ({"format": "oneccl", "runtime": "rccl"}, "runtime"),
                          ({"format": "msccl", "proto": "Fast"}, "proto")):
        r = client.get(url, params=params)
        assert r.status_code == 422, (params, r.text)
        detail = r.json()["errors"]
        assert detail[0]["field"] == field and detail[0]["loc"] == ["query", field] and detail[0]["msg"]


def test_refusal_is_kept_and_names_the_limit(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    wait_done(client, pid)
    url = f"/v1/plans/{pid}/schedules/allreduce"
    params = {"format": "msccl", "runtime": "rccl", "max_steps": 1, "channels": 1, "consolidate": "no",
              "max_chunks": 1}
    r = poll_xml(client, url, params)
    assert r.status_code == 422
    d = r.json()["errors"][0]
    assert d["type"] == "compile_refused.max_steps" and "MSCCL_MAX_NUM_STEPS" in d["msg"]
    again = client.get(url, params=params)                     # answered from the store
    assert again.status_code == 422 and again.json() == r.json()
