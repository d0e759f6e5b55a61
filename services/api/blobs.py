"""Stored blobs as HTTP responses: content-addressed ETags answered before the blob is read, large files
streamed.

An artifact's ETag is its digest (plus a suffix for a view rendered from it, e.g. a schedule's JSON), so a
conditional GET that matches answers 304 without loading the blob at all. A blob whose content is larger
than STREAM_BYTES goes out as a chunked stream decompressed piece by piece (`repo.iter_blob`): a 250 MB
MSCCL file of a 1024-rank plan is never held whole in the API process.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable

from fastapi import HTTPException, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from services.store import repo

__all__ = ["blob_response", "served_type", "STREAM_BYTES", "NPZ", "OCTET"]

STREAM_BYTES = 1 << 20
OCTET = "application/octet-stream"
NPZ = "application/x-npz"        # how npz blobs are stored; no registered type, so served as OCTET
IMMUTABLE = "private, max-age=31536000, immutable"


def served_type(request: Request, media_type: str) -> str:
    """The Content-Type a blob goes out with: application/octet-stream for npz (no registered type) and for a
    request whose Accept lists application/octet-stream (generated clients read bytes), else `media_type`."""
    if media_type == NPZ or OCTET in request.headers.get("accept", ""):
        return OCTET
    return media_type


def blob_response(request: Request, s: Session, digest: str, media_type: str | None = None,
                  filename: str | None = None, *, render: Callable[[bytes], bytes] | None = None,
                  etag_suffix: str = "") -> Response:
    """The blob `digest` (or `render(content)` of it, under ETag digest + etag_suffix) as a response of
    `media_type` (default: the type it was stored with); 304 when If-None-Match names it, 404 when it is
    not stored."""
    etag = f'"{digest}{etag_suffix}"'
    headers = {"ETag": etag, "Cache-Control": IMMUTABLE}
    if filename is not None:
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    if request.headers.get("if-none-match") == etag:
        if not repo.blob_exists(s, digest):
            raise HTTPException(404, f"artifact {digest} not found")
        return Response(status_code=304, headers={"ETag": etag})
    found = repo.read_stored(s, digest)
    if found is None:
        raise HTTPException(404, f"artifact {digest} not found")
    stored, stored_type = found
    media_type = served_type(request, media_type or stored_type.removesuffix("+zlib"))
    if render is not None:
        content = zlib.decompress(stored) if stored_type.endswith("+zlib") else stored
        return Response(render(content), media_type=media_type, headers=headers)
    if len(stored) <= STREAM_BYTES // 16:          # small even once decompressed: one body
        content = zlib.decompress(stored) if stored_type.endswith("+zlib") else stored
        if len(content) <= STREAM_BYTES:
            return Response(content, media_type=media_type, headers=headers)
    return StreamingResponse(repo.iter_blob(stored, stored_type), media_type=media_type, headers=headers)
