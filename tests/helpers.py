"""Shared test helpers."""
from __future__ import annotations

import numpy as np

from services.synthesis.schedule.ir import Schedule


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
