"""Role-based API keys (DESIGN 4.7): scheduler (plans, fabrics), agent bound to one panel (its config and
state only), viewer (read-only). Keys are random secrets shown once and stored as sha256 hashes.

Keys are sent as `Authorization: Bearer <key>` or `X-API-Key: <key>`. With FABRICPLAN_API_KEYS_REQUIRED
false (the embedded default for a single user), a request without a key acts as a scheduler; a key that
is presented is always checked.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session

from services.store import repo
from services.store.models import ApiKey

from .deps import get_session

ROLES = ("scheduler", "agent", "viewer")


@dataclass(frozen=True)
class Principal:
    role: str
    name: str
    panel_id: str | None = None


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


def _secret(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def principal(request: Request, s: Session = Depends(get_session)) -> Principal:
    secret = _secret(request)
    if secret is None:
        if request.app.state.settings.api_keys_required:
            raise HTTPException(401, "an API key is required (Authorization: Bearer <key>)",
                                headers={"WWW-Authenticate": "Bearer"})
        return Principal("scheduler", "anonymous")
    key = repo.find_key(s, secret)
    if key is None:
        raise HTTPException(401, "unknown or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    return Principal(key.role, key.name, key.panel_id)


def require(*roles: str):
    """Dependency: the caller's role must be one of `roles`."""
    def check(p: Principal = Depends(principal)) -> Principal:
        if p.role not in roles:
            raise HTTPException(403, f"role {p.role!r} may not do this (needs {' or '.join(roles)})")
        return p
    return check


def require_panel(panel_param: str = "panel_id"):
    """Dependency for panel endpoints: an agent only for its own panel; schedulers and viewers may read."""
    def check(request: Request, p: Principal = Depends(principal)) -> Principal:
        panel = request.path_params.get(panel_param)
        if p.role == "agent" and p.panel_id != panel:
            raise HTTPException(403, f"this agent key is bound to panel {p.panel_id!r}, not {panel!r}")
        return p
    return check


READ = require("scheduler", "viewer")
WRITE = require("scheduler")
