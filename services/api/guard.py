"""Checks every request before routing (a plain ASGI middleware):

- a body larger than MAX_BODY_BYTES: 413 (read no further);  these two and the NUL scan of the body apply
  to POST, PUT and PATCH, the methods whose bodies the API reads;
- a body that is not JSON (a Content-Type other than application/json or +json): 415, "send JSON";
- a NUL character anywhere - the path, the query string, a header, a JSON string or key: 422. PostgreSQL
  text cannot hold NUL, so it is refused here, the same on every backend, before any field reaches a query.

JSON can carry NUL only as the escape \\u0000 (raw control characters are not valid JSON), so one scan of the
raw body finds it; the body is parsed only then, to name the field.
"""
from __future__ import annotations

import json
import re

from .errors import error_response

MAX_BODY_BYTES = 8 << 20
BODY_METHODS = ("POST", "PUT", "PATCH")          # the only requests whose body is read (and refused)
_NUL_ESCAPE = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u0000")


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


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
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return await error_response(413, ["body"], f"the body exceeds {self.max_body} bytes",
                                            "too_large")(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
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

    def _refuse_head(self, scope):
        if "\x00" in scope["path"]:
            return error_response(422, ["path"], "the path contains a NUL character", "nul_character")
        qs = scope.get("query_string", b"")
        if b"%00" in qs or b"\x00" in qs:
            return error_response(422, ["query"], "the query string contains a NUL character", "nul_character")
        for name, value in scope["headers"]:
            if b"\x00" in value:
                return error_response(422, ["header", name.decode("latin-1")], "the header contains a NUL "
                                      "character", "nul_character")
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body \
                    and scope["method"] in BODY_METHODS:       # other methods' bodies are never read
                return error_response(413, ["body"], f"the body exceeds {self.max_body} bytes", "too_large")
        return None

    def _refuse_body(self, scope, body: bytes):
        if not body:
            return None
        ctype = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"content-type"), None)
        if ctype is not None and not _is_json(ctype):
            return error_response(415, ["header", "content-type"], f"send JSON: the body must be "
                                  f"application/json, not {ctype[:100]!r}", "unsupported_media_type")
        if _NUL_ESCAPE.search(body):
            try:
                where = _nul_path(json.loads(body), ["body"]) or ["body"]
            except ValueError:
                where = ["body"]
            return error_response(422, where, "text may not contain a NUL character (\\u0000)", "nul_character")
        return None
