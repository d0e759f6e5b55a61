"""OpenAPI response declarations shared by the routers."""
from __future__ import annotations

from .schemas import ErrorOut

AUTH = {401: {"model": ErrorOut, "description": "missing or unknown API key"},
        403: {"model": ErrorOut, "description": "the key's role may not do this"}}
