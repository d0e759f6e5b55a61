"""`fabricplan migrate`: database migrations (Alembic), and optionally the deployment's first scheduler key.
"""
from __future__ import annotations

import json
import os
import sys

from .common import UsageError

__all__ = ["register", "run"]


def run(args) -> int:
    from services.config import get_settings
    from services.store.db import migrate

    st = get_settings()
    migrate(st.sqlalchemy_url, args.revision)
    print(f"fabricplan: database at revision {args.revision}", file=sys.stderr)
    key_id = _bootstrap_key(st, args.bootstrap_key) if args.bootstrap_key else None
    if args.json:
        out: dict = {"revision": args.revision}
        if args.bootstrap_key:
            out["bootstrap_key"] = {"file": args.bootstrap_key, "created": key_id is not None, "id": key_id}
        print(json.dumps(out, indent=2))
    return 0


def _bootstrap_key(st, path: str) -> str | None:
    """The first scheduler key of a deployment whose keys are required: created once (nothing happens when
    `path` exists), its secret written only to `path` (mode 0600, created exclusively), never printed.
    Returns the new key's id (None when `path` existed)."""
    from pathlib import Path

    from services.api.auth import create_key
    from services.store.db import session_scope

    target = Path(path)
    if target.exists():
        print(f"fabricplan: bootstrap key file {target} exists; no key created", file=sys.stderr)
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise UsageError(f"--bootstrap-key: cannot create {target}: {exc.strerror}") from None
    try:
        with session_scope(st.sqlalchemy_url) as s:
            secret, key = create_key(s, "bootstrap", "scheduler")
            key_id = key.id
            with os.fdopen(fd, "w") as fh:       # before the commit: a key is stored only once its file exists
                fh.write(secret + "\n")
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    print(f"fabricplan: created scheduler key {key_id}; its secret is in {target} (mode 0600)", file=sys.stderr)
    return key_id


def register(sub) -> None:
    """Add the `migrate` sub-command to the parser's subparsers."""
    p = sub.add_parser("migrate", help="apply database migrations (Alembic)")
    p.add_argument("--revision", default="head", help="the Alembic revision to migrate to (default: head)")
    p.add_argument("--bootstrap-key", metavar="FILE", default=None,
                    help="then create a scheduler key, its secret written only to FILE (mode 0600), unless FILE "
                         "exists (the compose deployment's first key)")
    p.add_argument("--json", action="store_true", help="the revision and the bootstrap key's id (never its "
                   "secret) as JSON on stdout")
    p.set_defaults(func=run)
