"""Shared test helpers."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from services.synthesis.schedule.ir import Schedule

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def committed_openapi() -> dict:
    """openapi/openapi.json as committed, which tests/api/test_openapi.py keeps equal to the app's document: the
    operations a test is parametrised over, read at collection without building the app."""
    return json.loads((ROOT / "openapi" / "openapi.json").read_text())


def rebuild(s: Schedule, keep=None, step=None, extra: list[int] | None = None, **columns) -> Schedule:
    """A copy of `s` with transfers filtered by `keep`, steps replaced by `step`, indices in `extra`
    duplicated, and any column replaced (a mutation for the model checker)."""
    cols = {**s.columns(), **columns}
    steps = s.step_of if step is None else np.asarray(step)
    idx = np.arange(s.transfers)
    if keep is not None:
        idx = idx[np.asarray(keep)]
    if extra:
        idx = np.concatenate([idx, np.asarray(extra)])
    return Schedule.from_arrays(s.collective, s.nodes, s.grid, steps[idx], s.ops, s.topology,
                                **{k: np.asarray(v)[idx] for k, v in cols.items()})
