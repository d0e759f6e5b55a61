"""OPTIONS and 405 answers that list every method of a path (RFC 9110 sections 9.3.7 and 15.5.6).

Starlette's router answers a method a path does not take with 405 and the methods of the first route whose
path matched, so `/v1/plans` (GET and POST are two routes) said `Allow: POST`, and OPTIONS was a 405 too.
This plain ASGI middleware answers OPTIONS with 204 and `Allow` listing every method routes of the
application take on the path, and puts the same list in the `Allow` of every 405. A CORS preflight
(with Origin and Access-Control-Request-Method) is answered by CORSMiddleware, outside this one.
"""
from __future__ import annotations

from starlette.responses import Response
from starlette.routing import Match, Mount

__all__ = ["AllowedMethods"]


METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def allowed(app, scope) -> set[str]:
    """The methods routes of `app` take on the path of `scope` (empty: no route has this path), found by
    asking every route whether it fully matches the request under each method (Starlette's BaseRoute.matches,
    which included routers answer too). Mounts (static files) take any method and are left out."""
    methods: set[str] = set()
    routes = [r for r in getattr(app, "routes", ()) if not isinstance(r, Mount)]
    for method in METHODS:
        probe = {**scope, "method": method}
        if any(route.matches(probe)[0] is Match.FULL for route in routes):
            methods.add(method)
    return methods


class AllowedMethods:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] == "OPTIONS":
            methods = allowed(scope.get("app"), scope)
            if methods:
                allow = ", ".join(sorted(methods | {"OPTIONS"}))
                return await Response(status_code=204, headers={"Allow": allow})(scope, receive, send)
            return await self.app(scope, receive, send)

        async def send_with_allow(message):
            if message["type"] == "http.response.start" and message["status"] == 405:
                methods = allowed(scope.get("app"), scope)
                if methods:
                    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                    headers.append((b"allow", ", ".join(sorted(methods | {"OPTIONS"})).encode()))
                    message = {**message, "headers": headers}
            await send(message)
        return await self.app(scope, receive, send_with_allow)
