"""The compiler's output is pinned byte for byte: every file of the spread in tests/compile_spread.py (MSCCL
programs over every thread-block layout, consolidation, channel count, mode and runtime; all-to-all programs;
oneCCL files; whole fits of every runtime) has the SHA-256 recorded in tests/data/compile_digests.json by
`python -m tests.make_compile_digests`. A faster emitter or table pass must leave every digest as it is."""
from __future__ import annotations

import json

from tests.compile_spread import cases, digest_of
from tests.make_compile_digests import PATH


def test_every_file_of_the_spread_keeps_its_bytes():
    expected = json.loads(PATH.read_text())
    got = {name: digest_of(thunk) for name, thunk in cases()}
    assert got.keys() == expected.keys()
    changed = [name for name in expected if got[name] != expected[name]]
    assert not changed, f"{len(changed)} of {len(expected)} files changed, e.g. {changed[:5]}"
    assert len(expected) >= 300
    assert len(set(expected.values())) == len(expected)            # no two cases write the same file
