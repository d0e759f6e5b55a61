"""A schedule's time as a function of the collective's size, and the fastest schedule at every size.

On per-link costs a step costs its slowest used link, max over used arcs e of alpha_e + bytes_e / b_e
(`cost.heterogeneous_time`), and bytes_e = M * load_e / (N grid) (D * load_e / grid for an all-to-all) grows
linearly with the size M; so a step's
time is the upper envelope of lines in M and a schedule's time T(M) is a sum of such envelopes: convex and
piecewise linear in M, a single line a + b M whenever every step's used arcs share one alpha (the alpha-beta
model: a = steps alpha, b = tau / B). `curve` computes it exactly (Fractions of the float costs), and
`lower_envelope` finds, for a list of candidates, which one is fastest on which size range, with the
crossover sizes exact: on every interval between breakpoints each candidate is one line, and the lower
envelope of lines is walked crossing by crossing. Sizes are bytes; a range [min_bytes, max_bytes) of
integers starts at the ceiling of its crossover (at the crossover itself both candidates take the same time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.links import LinkCosts

__all__ = ["Curve", "curve", "lower_envelope", "Span"]


@dataclass(frozen=True)
class Curve:
    """T(M) = a_i + b_i M on [start_i, start_{i+1}) (start_0 = 0, the last piece unbounded), seconds."""

    starts: tuple[Fraction, ...]
    a: tuple[Fraction, ...]
    b: tuple[Fraction, ...]

    def piece(self, m) -> int:
        i = 0
        while i + 1 < len(self.starts) and self.starts[i + 1] <= m:
            i += 1
        return i

    def __call__(self, m) -> Fraction:
        i = self.piece(m)
        return self.a[i] + self.b[i] * Fraction(m)

    def __add__(self, other: "Curve") -> "Curve":
        starts = sorted(set(self.starts) | set(other.starts))
        a, b = [], []
        for s in starts:
            i, j = self.piece(s), other.piece(s)
            a.append(self.a[i] + other.a[j])
            b.append(self.b[i] + other.b[j])
        return Curve(tuple(starts), tuple(a), tuple(b))


def _upper_hull(lines: list[tuple[Fraction, Fraction]]) -> list[tuple[Fraction, Fraction, Fraction]]:
    """max_k (a_k + b_k M) for M >= 0 as pieces (start, a, b)."""
    lines = sorted(set(lines), key=lambda x: (-x[0], -x[1]))      # the largest intercept rules at M = 0
    a, b = lines[0]
    pieces, m = [(Fraction(0), a, b)], Fraction(0)
    while True:
        nxt = None                                   # the first line with a larger slope to overtake
        for a2, b2 in lines:
            if b2 > b:
                x = (a - a2) / (b2 - b)
                if x >= m and (nxt is None or x < nxt[0] or (x == nxt[0] and b2 > nxt[2])):
                    nxt = (x, a2, b2)
        if nxt is None:
            return pieces
        m, a, b = nxt
        if pieces[-1][0] == m:
            pieces[-1] = (m, a, b)
        else:
            pieces.append((m, a, b))


def curve(schedule: Schedule, costs: LinkCosts) -> Curve:
    """T(M) of `schedule` on `costs`, exactly: equals `costs.time(schedule, M)` at every M (to float rounding)."""
    g = costs.topology
    arc = g.arc_index(schedule.sender, schedule.receiver, schedule.lane)
    if (arc < 0).any():
        raise ValueError("the schedule uses a link the topology does not have")
    # grid units per byte of M: a shard's grid (N grid units in M), an all-to-all's whole buffer (grid units in D)
    shards = schedule.grid if schedule.collective is Collective.ALLTOALL else schedule.nodes * schedule.grid
    total_a, total_b, pieces = Fraction(0), Fraction(0), []
    for t in range(1, schedule.steps + 1):
        s = schedule.step_slice(t)
        if s.start == s.stop:
            continue
        load = np.bincount(arc[s], weights=(schedule.hi[s] - schedule.lo[s]).astype(float), minlength=g.arcs)
        used = np.flatnonzero(load > 0)
        if used.size == 0:                            # only empty chunks: nothing crosses a link
            continue
        alpha = costs.alpha_s[used]
        slope = load[used] / costs.bandwidth_Bps[used]
        if (alpha == alpha[0]).all():                 # one line: alpha + max slope
            k = int(np.argmax(slope))
            total_a += Fraction(float(alpha[0]))
            total_b += Fraction(int(load[used][k])) / Fraction(float(costs.bandwidth_Bps[used][k])) / shards
            continue
        lines = {(Fraction(float(costs.alpha_s[e])), Fraction(int(load[e])) / Fraction(float(costs.bandwidth_Bps[e]))
                  / shards) for e in used}
        pieces.append(_upper_hull(list(lines)))
    starts = sorted({p[0] for hull in pieces for p in hull} | {Fraction(0)})
    a_out, b_out = [], []
    for x in starts:
        a, b = total_a, total_b
        for hull in pieces:
            piece = max((p for p in hull if p[0] <= x), key=lambda p: p[0])
            a, b = a + piece[1], b + piece[2]
        a_out.append(a)
        b_out.append(b)
    return Curve(tuple(starts), tuple(a_out), tuple(b_out))


@dataclass(frozen=True)
class Span:
    """Candidate `index` is fastest for sizes in [start, end) (end None: unbounded); real-valued bounds."""

    start: Fraction
    end: Fraction | None
    index: int


def lower_envelope(curves: list[Curve]) -> list[Span]:
    """Which curve is lowest on which size interval, M >= 0 (ties: the earlier curve in the list)."""
    if not curves:
        raise ValueError("no candidates")
    starts = sorted({s for c in curves for s in c.starts})
    spans: list[Span] = []
    for k, lo in enumerate(starts):
        hi = starts[k + 1] if k + 1 < len(starts) else None
        lines = []
        for i, c in enumerate(curves):
            j = c.piece(lo)
            lines.append((c.a[j], c.b[j], i))
        m = lo
        best = min(lines, key=lambda x: (x[0] + x[1] * m, x[1], x[2]))
        while True:
            nxt = None                                # the earliest line to go strictly below `best`
            for a, b, i in lines:
                if b < best[1]:
                    x = (a - best[0]) / (best[1] - b)
                    if x < m:
                        continue
                    if nxt is None or x < nxt[0] or (x == nxt[0] and (b, i) < (nxt[1][1], nxt[1][2])):
                        nxt = (x, (a, b, i))
            if nxt is None or (hi is not None and nxt[0] >= hi):
                spans.append(Span(m, hi, best[2]))
                break
            if nxt[0] > m:
                spans.append(Span(m, nxt[0], best[2]))
            m, best = nxt
    merged: list[Span] = []
    for sp in spans:
        if merged and merged[-1].index == sp.index:
            merged[-1] = Span(merged[-1].start, sp.end, sp.index)
        else:
            merged.append(sp)
    return merged


def integer_ranges(spans: list[Span]) -> list[tuple[int, int | None, int]]:
    """The spans as byte ranges [min_bytes, max_bytes) tiling [0, inf): each starts at the ceiling of its
    real start (a range with no integer in it is dropped)."""
    out: list[tuple[int, int | None, int]] = []
    for sp in spans:
        lo = math.ceil(sp.start)
        hi = None if sp.end is None else math.ceil(sp.end)
        if hi is not None and hi <= lo:
            continue
        if out and out[-1][2] == sp.index:
            out[-1] = (out[-1][0], hi, sp.index)
        else:
            out.append((lo, hi, sp.index))
    fixed = []
    for i, (lo, hi, idx) in enumerate(out):
        nxt = out[i + 1][0] if i + 1 < len(out) else None
        fixed.append((0 if i == 0 else lo, nxt, idx))
    return fixed
