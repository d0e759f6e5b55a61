"""Unknown query parameters are refused (422 naming the parameter and what the operation takes), never
silently ignored: `/v1/plans?stauts=done` must not list every plan as if it had filtered them.

An app-wide dependency: the query parameters an operation takes are those its route and its dependencies
declare (FastAPI's dependant tree), read once per route."""
from __future__ import annotations

from fastapi import Request

from .errors import unprocessable

__all__ = ["reject_unknown_query"]

_KNOWN: dict[int, frozenset[str]] = {}


def _declared(dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return names


async def reject_unknown_query(request: Request) -> None:
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.scope.get("query_string"):
        return
    known = _KNOWN.get(id(route))
    if known is None:
        known = _KNOWN[id(route)] = frozenset(_declared(dependant))
    unknown = sorted({k for k in request.query_params.keys() if k not in known})
    if unknown:
        takes = ", ".join(sorted(known)) if known else "none"
        raise unprocessable(["query", unknown[0]], f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(repr(u) for u in unknown)}; this operation takes: {takes}",
                            "unknown_parameter")
