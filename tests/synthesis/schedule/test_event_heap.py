"""services.synthesis.schedule.event_heap against sorting: any pushes pop in (time, index) order."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from services.synthesis.schedule.event_heap import heap_pop, heap_push


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20).map(float), st.integers(0, 50)), max_size=60))
def test_pops_in_time_then_index_order(items):
    ht, ha = np.empty(len(items) + 1), np.empty(len(items) + 1, dtype=np.int64)
    size = 0
    for t, a in items:
        size = heap_push(ht, ha, size, t, a)
    out = []
    while size:
        t, a, size = heap_pop(ht, ha, size)
        out.append((float(t), int(a)))
    assert out == sorted(items)
