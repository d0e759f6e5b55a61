"""Stored blobs over HTTP (services.api.blobs): a matching If-None-Match answers 304 without reading the
blob, and a large blob is streamed (chunked) and arrives whole. On SQLite and PostgreSQL."""
from __future__ import annotations

import os

import pytest

from services.api import blobs
from services.store import repo
from services.store.db import session_scope

from tests.conftest import MINIMAL, unique_job, wait_done


def _unreadable(*_a, **_k):
    raise AssertionError("the blob was read for a conditional GET that matches its ETag")


def test_conditional_gets_do_not_read_the_blob(client, monkeypatch):
    p = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()
    assert wait_done(client, p["id"])["status"] == "done"
    base = f"/v1/plans/{p['id']}"
    urls = [f"{base}/topology", f"{base}/topology?format=graphml", f"{base}/schedules/allgather?format=npz",
            f"{base}/schedules/allgather", f"{base}/revisions/0/schedules/allreduce",
            f"{base}/schedules/allreduce?format=msccl"]
    for url in urls:
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code, r.text[:200])
        etag = r.headers["etag"]
        with monkeypatch.context() as m:
            m.setattr(repo, "read_stored", _unreadable)
            m.setattr(repo, "get_blob", _unreadable)
            again = client.get(url, headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.headers["etag"] == etag and again.content == b"", url
        assert client.get(url, headers={"If-None-Match": '"other"'}).content == r.content, url
    digest = client.get(f"{base}/topology").headers["etag"].strip('"')
    with monkeypatch.context() as m:
        m.setattr(repo, "read_stored", _unreadable)
        m.setattr(repo, "get_blob", _unreadable)
        assert client.get(f"/v1/artifacts/{digest}", headers={"If-None-Match": f'"{digest}"'}).status_code == 304
    assert client.get("/v1/artifacts/" + "0" * 64, headers={"If-None-Match": '"' + "0" * 64 + '"'}).status_code == 404


@pytest.mark.parametrize("compress", [True, False])
def test_large_blobs_are_streamed_whole(client, settings, compress):
    data = os.urandom(1 << 16) * 40 + b"tail"                 # 2.5 MiB, compressible: its zlib form is small
    with session_scope(settings.sqlalchemy_url) as s:
        digest = repo.put_blob(s, data, "xml", "application/xml", compress=compress)
    r = client.get(f"/v1/artifacts/{digest}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/xml")
    assert "content-length" not in r.headers               # a stream: no length known up front
    assert r.content == data


def test_iter_blob_pieces_add_up():
    import zlib

    data = bytes(range(256)) * 20_000
    for stored, media in ((zlib.compress(data, 1), "application/xml+zlib"), (data, "application/xml")):
        pieces = list(repo.iter_blob(stored, media, chunk=1 << 16))
        assert b"".join(pieces) == data and len(pieces) > 1
    assert blobs.STREAM_BYTES == 1 << 20
