"""One error shape for every 400 and 422 (`{"detail": [{"loc", "field", "msg", "type"}]}`), and 503 with
Retry-After when the database does not answer, a lock was not free within services.store.db.LOCK_TIMEOUT_S,
or a commit failed (the transaction is rolled back: nothing was changed). Routes that write commit before
they answer, so a failed commit is this 503, never a 2xx."""
from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

RETRY_AFTER_S = 5


def field_error(loc, msg: str, type: str = "value_error") -> dict:
    """One entry of `detail`: loc (where), field (loc without its first part, dotted), msg, type."""
    loc = [x if isinstance(x, int) else str(x) for x in loc]
    return {"loc": loc, "field": ".".join(str(x) for x in loc[1:]), "msg": msg, "type": type}


def unprocessable(loc, msg: str, type: str = "value_error", status: int = 422) -> HTTPException:
    """An HTTPException in the standard shape (raise it)."""
    return HTTPException(status, [field_error(loc, msg, type)])


def error_response(status: int, loc, msg: str, type: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": [field_error(loc, msg, type)]}, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        errors = [field_error(e.get("loc", ()), str(e.get("msg")), str(e.get("type"))) for e in exc.errors()]
        status = 400 if any(e["type"] == "json_invalid" for e in errors) else 422
        if status == 400:
            errors = [{**e, "msg": f"the body is not valid JSON: {e['msg']}"} for e in errors]
        return JSONResponse({"detail": errors}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail
        if exc.status_code in (400, 422) and isinstance(detail, str):     # e.g. an undecodable body
            detail = [field_error(["body"], detail, "body_invalid")]
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def database_down(request: Request, exc: Exception):
        return JSONResponse({"detail": "the database is not answering or is busy; nothing was changed: retry "
                                       "later"}, status_code=503,
                            headers={"Retry-After": str(RETRY_AFTER_S)})
