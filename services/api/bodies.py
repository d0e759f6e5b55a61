"""JSON request bodies parsed in the thread pool, not on the event loop.

FastAPI reads a route's JSON body with `await request.json()` on the event loop: an 8 MiB body is tens of
milliseconds of json.loads during which no other request is answered. `OffLoopRoute` parses it first in the
thread pool and leaves the result where Starlette's Request keeps it (`_json`), so FastAPI finds it parsed;
an undecodable body is the same 400 FastAPI gives (type json_invalid at its position). The body itself was
read, bounded and checked by services.api.guard."""
from __future__ import annotations

import json

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

__all__ = ["OffLoopRoute"]

INLINE_PARSE_BYTES = 16 << 10        # smaller bodies parse faster than a hop to the thread pool


class OffLoopRoute(APIRoute):
    def get_route_handler(self):
        handler = super().get_route_handler()

        async def parse_off_loop(request: Request):
            if request.method in ("POST", "PUT", "PATCH") and self.body_field is not None:
                body = await request.body()
                if len(body) > INLINE_PARSE_BYTES:
                    try:
                        request._json = await run_in_threadpool(json.loads, body)
                    except json.JSONDecodeError as e:
                        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos),
                                                       "msg": "JSON decode error", "input": {},
                                                       "ctx": {"error": e.msg}}]) from None
                    except (UnicodeDecodeError, RecursionError, ValueError):
                        pass                        # FastAPI answers these as it always does
            return await handler(request)

        return parse_off_loop
