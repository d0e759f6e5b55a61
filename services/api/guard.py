"""Checks every request before routing (a plain ASGI middleware):

- a request with a body is authenticated before its body is read: with FABRICPLAN_API_KEYS_REQUIRED a request
  without a key, and always one with an unknown or revoked key, is a 401 at once, its body never read (an
  unauthenticated client cannot make the API read and scan megabytes);
- a body larger than MAX_BODY_BYTES: 413 (read no further);  these three and the NUL scan of the body apply
  to POST, PUT and PATCH, the methods whose bodies the API reads;
- a body that is not JSON (a Content-Type other than application/json or +json): 415, "send JSON";
- a JSON body nested deeper than MAX_JSON_DEPTH arrays and objects: 422 naming the limit, found by one
  vectorised scan of the raw bytes (`json_depth`) before anything parses it (a parser recursing 1000 levels
  deep is a RecursionError, a 500, not an answer); no body the API takes is nested more than 8 deep;
- a NUL character anywhere - the path, the query string, a header, a JSON string or key: 422. PostgreSQL
  text cannot hold NUL, so it is refused here, the same on every backend, before any field reaches a query.

JSON can carry NUL only as the escape \\u0000 (raw control characters are not valid JSON), so one scan of the
raw body finds it; the body is parsed only then, to name the field. The scans of a body above INLINE_SCAN_BYTES
run in the thread pool, never on the event loop (the routes parse JSON bodies there too: services.api.bodies),
so /healthz and every other request keep answering while large bodies arrive.
"""
from __future__ import annotations

import json
import re

import numpy as np
from starlette.concurrency import run_in_threadpool

from .auth import CHALLENGE, KEY_REQUIRED, KEY_UNKNOWN, resolve, secret_of
from .errors import error_response, problem

__all__ = ["InputGuard", "MAX_BODY_BYTES", "MAX_JSON_DEPTH", "json_depth"]

MAX_BODY_BYTES = 8 << 20
MAX_JSON_DEPTH = 32                              # arrays and objects inside one another
BODY_METHODS = ("POST", "PUT", "PATCH")          # the only requests whose body is read (and refused)
INLINE_SCAN_BYTES = 64 << 10                     # larger bodies are scanned in the thread pool
_NUL_ESCAPE = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u0000")


def _refusal(scope, status: int, loc, msg: str, type: str):
    """The problem answering a refused request (its instance: the request's path)."""
    return error_response(status, loc, msg, type, instance=scope.get("path"))


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def json_depth(body: bytes) -> int:
    """How deeply arrays and objects nest in the JSON text `body` (brackets inside strings do not count; an
    escaped quote does not end a string). Vectorised: O(len(body)) with no recursion, on any bytes, valid
    JSON or not.

    >>> json_depth(b'{"a": [[1], "[[[", {"b": "\\\\"}]}')
    3
    """
    a = np.frombuffer(body, dtype=np.uint8)
    idx = np.arange(a.size, dtype=np.int64)
    last_plain = np.maximum.accumulate(np.where(a != 0x5C, idx, -1))     # the last byte that is not a backslash
    quotes = np.flatnonzero(a == 0x22)
    before = quotes - 1
    run = np.where(before >= 0, before - last_plain[np.maximum(before, 0)], 0)   # backslashes just before it
    real = quotes[run % 2 == 0]                                          # quotes that open or close a string
    toggles = np.zeros(a.size, dtype=np.int8)
    toggles[real] = 1
    inside = (np.cumsum(toggles, dtype=np.int64) & 1).astype(bool)
    inside[real] = True
    step = (((a == 0x5B) | (a == 0x7B)) & ~inside).astype(np.int64) - (((a == 0x5D) | (a == 0x7D)) & ~inside)
    return int(np.cumsum(step).max(initial=0))


def _nul_path(value, path: list):
    """The path to the first string (or key) containing NUL in parsed JSON, or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        if isinstance(k, str) and "\x00" in k:
            return path + [k]
        found = _nul_path(v, path + [k])
        if found is not None:
            return found
    return None


class InputGuard:
    def __init__(self, app, max_body_bytes: int = MAX_BODY_BYTES):
        self.app, self.max_body = app, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = self._refuse_head(scope)
        if refusal is not None:
            return await refusal(scope, receive, send)
        if scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        refusal = await self._authenticate(scope)
        if refusal is not None:
            return await refusal(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return await _refusal(scope, 413, ["body"], f"the body exceeds {self.max_body} bytes",
                                            "too_large")(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if len(body) > INLINE_SCAN_BYTES:
            refusal = await run_in_threadpool(self._refuse_body, scope, body)
        else:
            refusal = self._refuse_body(scope, body)
        if refusal is not None:
            return await refusal(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        return await self.app(scope, replay, send)

    @staticmethod
    async def _authenticate(scope):
        """401 before the body is read: no key where keys are required, or a key that is not valid."""
        app = scope.get("app")
        state = getattr(app, "state", None)
        if state is None or not hasattr(state, "key_cache"):
            return None
        secret = secret_of(scope["headers"])
        if secret is None:
            if state.settings.api_keys_required:
                return problem(401, KEY_REQUIRED, scope.get("path"), CHALLENGE)
            return None
        if await resolve(app, secret) is None:
            return problem(401, KEY_UNKNOWN, scope.get("path"), CHALLENGE)
        return None

    def _refuse_head(self, scope):
        if "\x00" in scope["path"]:
            return _refusal(scope, 422, ["path"], "the path contains a NUL character", "nul_character")
        qs = scope.get("query_string", b"")
        if b"%00" in qs or b"\x00" in qs:
            return _refusal(scope, 422, ["query"], "the query string contains a NUL character", "nul_character")
        for name, value in scope["headers"]:
            if b"\x00" in value:
                return _refusal(scope, 422, ["header", name.decode("latin-1")], "the header contains a NUL "
                                      "character", "nul_character")
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body \
                    and scope["method"] in BODY_METHODS:       # other methods' bodies are never read
                return _refusal(scope, 413, ["body"], f"the body exceeds {self.max_body} bytes", "too_large")
        return None

    def _refuse_body(self, scope, body: bytes):
        if not body:
            return None
        ctype = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"content-type"), None)
        if ctype is not None and not _is_json(ctype):
            return _refusal(scope, 415, ["header", "content-type"], f"send JSON: the body must be "
                                  f"application/json, not {ctype[:100]!r}", "unsupported_media_type")
        if json_depth(body) > MAX_JSON_DEPTH:
            return _refusal(scope, 422, ["body"], f"the body nests arrays and objects more than {MAX_JSON_DEPTH} "
                                  "deep", "too_deep")
        if _NUL_ESCAPE.search(body):
            try:
                where = _nul_path(json.loads(body), ["body"]) or ["body"]
            except ValueError:
                where = ["body"]
            return _refusal(scope, 422, where, "text may not contain a NUL character (\\u0000)", "nul_character")
        return None
