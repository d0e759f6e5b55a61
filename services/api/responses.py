"""OpenAPI response declarations shared by the routers: every status an operation can answer is documented
with its real media type (tests/api/test_schemathesis.py checks that nothing undocumented comes back)."""
from __future__ import annotations

from .schemas import ErrorOut, ValidationErrorOut

AUTH = {401: {"model": ErrorOut, "description": "missing or unknown API key"},
        403: {"model": ErrorOut, "description": "the key's role may not do this"}}
INVALID = {422: {"model": ValidationErrorOut, "description": "a field is invalid (or a NUL character was sent): "
                                                              "each error names the field and the reason"}}
DATABASE = {503: {"model": ErrorOut, "description": "the database is not answering, a lock the request needs "
                                                    "was not free within 5 s, or the commit failed: nothing was "
                                                    "changed (Retry-After says when to try again)",
                  "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}}}
BODY = {400: {"model": ValidationErrorOut, "description": "the body is not valid JSON"},
        413: {"model": ValidationErrorOut, "description": "the body is too large"},
        415: {"model": ValidationErrorOut, "description": "the body is not JSON: send JSON"}}
TOO_MANY = {429: {"model": ErrorOut, "description": "the API key already has its bound of unfinished jobs (plans, "
                                                    "evaluations, compiles, revisions; services.api.budget): retry "
                                                    "once some finish",
                  "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}}}
COMMON = {**INVALID, **DATABASE}


COMPILE_REFUSED = {422: {"model": ValidationErrorOut, "description": "an invalid option, or nothing fits the runtime: "
                                                                   "`type` compile_refused.<limit> names the limit"}}

# served as application/octet-stream when the request's Accept lists it (blobs.blob_response), and npz always
OCTET = "application/octet-stream"


def download(description: str, *media_types: str) -> dict:
    """A 200 download: application/octet-stream first (generated clients then return the bytes whatever
    the format), then the media types the route serves by default. The exported document keeps this order."""
    return content(description + ". Any format is served as application/octet-stream to a request whose "
                   "Accept lists it", OCTET, *[m for m in media_types if m != OCTET])


def content(description: str, *media_types: str) -> dict:
    """A 200 response in one of `media_types` (JSON an object, anything else a string)."""
    return {"description": description,
            "content": {m: {"schema": {"type": "object"} if m == "application/json" else
                            {"type": "string", "format": "binary"}} for m in media_types}}
