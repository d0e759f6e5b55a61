"""Record the SHA-256 of every file of the compile spread (tests/compile_spread.py) from the code as it is:

    python -m tests.make_compile_digests        # writes tests/data/compile_digests.json

Run it only when a change of the output is intended (and say why in the commit); tests/compiler/test_bytes.py
holds every later change of the compiler to these bytes."""
from __future__ import annotations

import json
from pathlib import Path

from tests.compile_spread import digests

PATH = Path(__file__).parent / "data" / "compile_digests.json"


def main() -> None:
    d = digests()
    PATH.write_text(json.dumps(d, indent=0, sort_keys=False) + "\n")
    print(f"{len(d)} digests -> {PATH}")


if __name__ == "__main__":
    main()
