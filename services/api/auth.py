"""Role-based API keys (DESIGN 4.7): scheduler (plans, fabrics), agent bound to one panel (its config and
state only), viewer (read-only). Keys are random secrets shown once and stored as sha256 hashes.

Keys are sent as `Authorization: Bearer <key>` or `X-API-Key: <key>`, read by FastAPI's security classes
(HTTPBearer, APIKeyHeader), which also publish both schemes in the OpenAPI document. With
FABRICPLAN_API_KEYS_REQUIRED false (the embedded default for a single user), a request without a key acts
as a scheduler; a key that is presented is always checked.
"""
from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from services.store import repo
from services.store.db import session_scope
from services.store.models import ApiKey

ROLES = ("scheduler", "agent", "viewer")


@dataclass(frozen=True)
class Principal:
    role: str
    name: str
    panel_id: str | None = None
    key_id: str | None = None           # None: no key (FABRICPLAN_API_KEYS_REQUIRED false)


def create_key(s: Session, name: str, role: str, panel_id: str | None = None) -> tuple[str, ApiKey]:
    """A new key; the secret is returned once and only its hash is stored."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if (role == "agent") != (panel_id is not None):
        raise ValueError("an agent key is bound to exactly one panel (and only agent keys are)")
    secret = "fp_" + secrets.token_urlsafe(32)
    key = ApiKey(name=name, role=role, panel_id=panel_id, key_hash=repo.hash_key(secret))
    s.add(key)
    s.flush()
    return secret, key


bearer = HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer <key>`")
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="an API key in `X-API-Key`")


KEY_CACHE_TTL_S = 5.0       # a revoked key stops working within this time


class KeyCache:
    """Recent key lookups (hash -> principal or None), so authenticated reads stay off the database."""

    def __init__(self):
        self.items: dict[str, tuple[Principal | None, float]] = {}
        self.lock = threading.Lock()

    def get(self, h: str):
        with self.lock:
            hit = self.items.get(h)
        return hit if hit is not None and hit[1] > time.monotonic() else None

    def put(self, h: str, p: Principal | None) -> None:
        with self.lock:
            if len(self.items) > 10000:
                self.items.clear()
            self.items[h] = (p, time.monotonic() + KEY_CACHE_TTL_S)


def _lookup(url: str, secret: str) -> Principal | None:
    with session_scope(url) as s:
        key = repo.find_key(s, secret)
        return None if key is None else Principal(key.role, key.name, key.panel_id, key.id)


CHALLENGE = {"WWW-Authenticate": "Bearer"}
KEY_REQUIRED = "an API key is required (Authorization: Bearer <key>)"
KEY_UNKNOWN = "unknown or revoked API key"


def secret_of(headers) -> str | None:
    """The API key a request presents (`Authorization: Bearer <key>` or `X-API-Key`), from raw ASGI headers
    [(name, value)], read before the body (services.api.guard)."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    for name, value in headers:
        if name == b"x-api-key" and value:
            return value.decode("latin-1")
    return None


async def resolve(app, secret: str) -> Principal | None:
    """The key's principal (None: unknown or revoked), from the cache or (off the event loop) the database."""
    cache: KeyCache = app.state.key_cache
    h = repo.hash_key(secret)
    hit = cache.get(h)
    if hit is not None:
        return hit[0]
    p = await run_in_threadpool(_lookup, app.state.settings.sqlalchemy_url, secret)
    cache.put(h, p)
    return p


async def principal(request: Request, creds: HTTPAuthorizationCredentials | None = Security(bearer),
                    header_key: str | None = Security(api_key_header)) -> Principal:
    secret = creds.credentials if creds is not None else header_key
    if secret is None:
        if request.app.state.settings.api_keys_required:
            raise HTTPException(401, KEY_REQUIRED, headers=CHALLENGE)
        return Principal("scheduler", "anonymous")
    p = await resolve(request.app, secret)
    if p is None:
        raise HTTPException(401, KEY_UNKNOWN, headers=CHALLENGE)
    return p


def require(*roles: str):
    """Dependency: the caller's role must be one of `roles`."""
    async def check(p: Principal = Depends(principal)) -> Principal:
        if p.role not in roles:
            raise HTTPException(403, f"role {p.role!r} may not do this (needs {' or '.join(roles)})")
        return p
    return check


def require_panel(panel_param: str = "panel_id"):
    """Dependency for panel endpoints: an agent only for its own panel; schedulers and viewers may read."""
    async def check(request: Request, p: Principal = Depends(principal)) -> Principal:
        panel = request.path_params.get(panel_param)
        if p.role == "agent" and p.panel_id != panel:
            raise HTTPException(403, f"this agent key is bound to panel {p.panel_id!r}, not {panel!r}")
        return p
    return check


READ = require("scheduler", "viewer")
WRITE = require("scheduler")
