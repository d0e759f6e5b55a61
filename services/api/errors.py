"""Every error answers as an RFC 9457 problem (`application/problem+json`), the same shape for every status
(400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 503):

    {"type": "urn:fabricplan:problem:<kind>", "title": <the status's phrase>, "status": <code>,
     "detail": <what happened, for a person>, "instance": <the request's path>,
     "field": <the field at fault, dotted, or null>, "reason": <why>, "errors": [{loc, field, msg, type}, ...]}

`field` and `reason` name the first field at fault and why (a 422 naming the field and the reason); `errors`
lists every field error (`loc`: where - body, query, path or header - then the field's path; `field`: loc
without its first part, dotted; `msg`; `type`). A 503 with Retry-After answers when the database does not
answer, a lock was not free within services.store.db.LOCK_TIMEOUT_S, or a commit failed (the transaction is
rolled back: nothing was changed). Routes that write commit before they answer, so a failed commit is this
503, never a 2xx."""
from __future__ import annotations

import re
from http import HTTPStatus

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["PROBLEM_JSON", "RETRY_AFTER_S", "field_error", "unprocessable", "problem", "error_response", "install"]

RETRY_AFTER_S = 5
PROBLEM_JSON = "application/problem+json"
_LITERAL = re.compile(r"\.(literal\[.*?\]|function-[a-z-]+\[.*?\]|tagged-union\[.*?\]|[a-z]+-union\[.*?\])")
_KINDS = {400: "invalid-json", 401: "unauthorized", 403: "forbidden", 404: "not-found", 405: "method-not-allowed",
          409: "conflict", 413: "too-large", 415: "unsupported-media-type", 422: "invalid-field",
          429: "too-many-jobs", 503: "unavailable"}


class ProblemResponse(JSONResponse):
    media_type = PROBLEM_JSON


def _plain(part) -> int | str:
    """A location part as a person reads it: pydantic's union and literal tags (`literal['a100',...]`,
    `function-after[...]`) are not fields."""
    return part if isinstance(part, int) else str(part)


def field_error(loc, msg: str, type: str = "value_error") -> dict:
    """One entry of `errors`: loc (where), field (loc without its first part, dotted), msg, type. Pydantic's
    union and literal tags in the location are dropped: a device typo names `workload.training.device`."""
    loc = [_plain(x) for x in loc]
    loc = [x for i, x in enumerate(loc) if i == len(loc) - 1 or not (isinstance(x, str) and _LITERAL.fullmatch("." + x))]
    return {"loc": loc, "field": ".".join(str(x) for x in loc[1:]), "msg": msg, "type": type}


_TAG = re.compile(r"(literal\[.*\]|function-[a-z-]+\[.*\]|[a-z-]*union\[.*\]|str|int|float|bool|none|"
                  r"list\[.*\]|dict\[.*\]|tuple\[.*\]|[A-Z][A-Za-z0-9]*)")


def merge_union_errors(errors: list[dict]) -> list[dict]:
    """Errors of one field that are the members of a union it failed (pydantic reports one per member, its
    location ending in the member's tag: `device.literal[...]`, `device.DeviceProfile`) as one error of the
    field itself, the members' messages joined with "or"."""
    out: list[dict] = []
    groups: dict[tuple, dict] = {}
    for e in errors:
        loc = e["loc"]
        tail = loc[-1] if loc else None
        if isinstance(tail, str) and len(loc) > 1 and _TAG.fullmatch(tail):
            key = tuple(loc[:-1])
            if key in groups:
                g = groups[key]
                g["msg"] += "; or " + e["msg"][:1].lower() + e["msg"][1:]
                continue
            g = groups[key] = {**field_error(list(key), e["msg"], e["type"]), "type": e["type"]}
            out.append(g)
        else:
            out.append(e)
    return out


def unprocessable(loc, msg: str, type: str = "value_error", status: int = 422) -> HTTPException:
    """An HTTPException in the standard shape (raise it)."""
    return HTTPException(status, [field_error(loc, msg, type)])


def problem(status: int, detail, instance: str | None = None, headers: dict | None = None,
            kind: str | None = None) -> ProblemResponse:
    """The problem response of `status`: `detail` a text, or a list of field errors (field_error)."""
    errors = detail if isinstance(detail, list) else []
    first = errors[0] if errors else None
    if first is not None:
        text = "; ".join(f"{e['field'] or e['loc'][0] if e['loc'] else 'body'}: {e['msg']}" for e in errors[:5])
        if len(errors) > 5:
            text += f" (and {len(errors) - 5} more)"
    else:
        text = str(detail) if detail is not None else HTTPStatus(status).phrase
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    body = {"type": f"urn:fabricplan:problem:{kind or (first['type'] if first else _KINDS.get(status, status))}",
            "title": title, "status": status, "detail": text, "instance": instance,
            "field": first["field"] if first else None, "reason": first["msg"] if first else text,
            "errors": errors}
    return ProblemResponse(body, status_code=status, headers=headers)


def error_response(status: int, loc, msg: str, type: str, headers: dict | None = None,
                   instance: str | None = None) -> ProblemResponse:
    """A problem with one field error (the input guard's refusals, before routing)."""
    return problem(status, [field_error(loc, msg, type)], instance, headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        errors = merge_union_errors([field_error(e.get("loc", ()), str(e.get("msg")), str(e.get("type")))
                                     for e in exc.errors()])
        status = 400 if any(e["type"] == "json_invalid" for e in errors) else 422
        if status == 400:
            errors = [{**e, "msg": f"the body is not valid JSON: {e['msg']}"} for e in errors]
        return problem(status, errors, request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail
        if exc.status_code in (400, 422) and isinstance(detail, str):     # e.g. an undecodable body
            detail = [field_error(["body"], detail, "body_invalid")]
        return problem(exc.status_code, detail, request.url.path, getattr(exc, "headers", None))

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def database_down(request: Request, exc: Exception):
        return problem(503, "the database is not answering or is busy; nothing was changed: retry later",
                       request.url.path, {"Retry-After": str(RETRY_AFTER_S)})
