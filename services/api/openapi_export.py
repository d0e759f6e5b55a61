"""Writes the API's OpenAPI document to openapi/openapi.json (DESIGN section 1: generated, a test fails when stale).

    python -m services.api.openapi_export            # regenerate openapi/openapi.json
    python -m services.api.openapi_export --check    # exit 1 (with a message) when the file is stale

The document comes from `create_app(settings).openapi()` without starting the application's lifespan, so no
migration runs and no worker starts; the settings are the defaults (the environment cannot change the
document) with data_dir in a temporary directory, so nothing touches the working tree's database.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "openapi" / "openapi.json"
REGENERATE = "python -m services.api.openapi_export"


def document() -> dict:
    """The OpenAPI document of a freshly created app."""
    from services.config import Settings

    from .app import create_app

    with tempfile.TemporaryDirectory(prefix="fabricplan-openapi-") as tmp:
        settings = Settings.model_construct(data_dir=Path(tmp))     # defaults only, FABRICPLAN_* ignored
        return create_app(settings).openapi()


def canonical(obj, parent: str | None = None):
    """`obj` with every object's keys sorted, except a `content` map's media types: their order is the
    document's (generated clients take the first media type they support: downloads list
    application/octet-stream first, services.api.responses.download)."""
    if isinstance(obj, dict):
        keys = list(obj) if parent == "content" else sorted(obj)
        return {k: canonical(obj[k], k) for k in keys}
    if isinstance(obj, list):
        return [canonical(x) for x in obj]
    return obj


def render() -> str:
    """The file's exact contents: canonical key order (see `canonical`), indent 2, trailing newline."""
    return json.dumps(canonical(document()), indent=2) + "\n"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m services.api.openapi_export", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the file differs from the app")
    ap.add_argument("-o", "--output", type=Path, default=OUTPUT, help=f"default: {OUTPUT}")
    args = ap.parse_args(argv)
    text = render()
    path: Path = args.output
    if args.check:
        current = path.read_text() if path.exists() else None
        if current != text:
            state = "is missing" if current is None else "is stale (the API changed)"
            print(f"{_shown(path)} {state}; regenerate it with `{REGENERATE}` and commit the result",
                  file=sys.stderr)
            return 1
        print(f"{_shown(path)} is up to date", file=sys.stderr)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        print(f"{_shown(path)} unchanged", file=sys.stderr)
        return 0
    path.write_text(text)
    print(f"wrote {_shown(path)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
