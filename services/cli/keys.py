"""`fabricplan keys create|list|revoke`: API keys (scheduler, agent bound to a panel, viewer).
"""
from __future__ import annotations

import json

from .common import UsageError

__all__ = ["register", "run"]


def run(args) -> int:
    from sqlalchemy import select

    from services.api.auth import create_key
    from services.config import get_settings
    from services.store.db import migrate, session_scope
    from services.store.models import ApiKey

    st = get_settings()
    migrate(st.sqlalchemy_url)
    with session_scope(st.sqlalchemy_url) as s:
        if args.action == "create":
            if not args.name or not args.role:
                raise UsageError("keys create needs --name and --role")
            try:
                secret, key = create_key(s, args.name, args.role, args.panel)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(json.dumps({"id": key.id, "name": key.name, "role": key.role, "panel_id": key.panel_id,
                              "key": secret, "note": "shown once; only its hash is stored"}, indent=2))
        elif args.action == "list":
            keys = list(s.scalars(select(ApiKey).order_by(ApiKey.created_at)))
            if args.json:
                print(json.dumps([{"id": k.id, "name": k.name, "role": k.role, "panel_id": k.panel_id,
                                   "revoked": bool(k.revoked)} for k in keys], indent=2))
            for k in [] if args.json else keys:
                print(f"{k.id}  {k.role:<9} {k.panel_id or '-':<12} {'revoked' if k.revoked else 'active':<8} {k.name}")
        else:
            if not args.id:
                raise UsageError("keys revoke needs --id (the key's id, from `fabricplan keys list`)")
            key = s.get(ApiKey, args.id)
            if key is None:
                raise UsageError(f"no API key with id {args.id!r}")
            key.revoked = True
            print(json.dumps({"id": key.id, "revoked": True}) if args.json else f"revoked {key.id}")
    return 0


def register(sub) -> None:
    """Add the `keys` sub-command to the parser's subparsers."""
    p = sub.add_parser("keys", help="manage API keys (scheduler, agent bound to a panel, viewer)")
    p.add_argument("action", choices=["create", "list", "revoke"])
    p.add_argument("--name", help="create: the key's name (who or what uses it)")
    p.add_argument("--role", choices=["scheduler", "agent", "viewer"], help="create: what the key may do")
    p.add_argument("--panel", help="the panel an agent key is bound to")
    p.add_argument("--id", help="the key to revoke")
    p.add_argument("--json", action="store_true", help="list and revoke: JSON on stdout (create always prints JSON)")
    p.set_defaults(func=run)
    return p
