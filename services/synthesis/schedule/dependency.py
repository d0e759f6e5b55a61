"""Dependency-driven time: a schedule priced as the runtimes execute it (DESIGN section 2, "the two times").

The paper's price (section 3.2; App. E.3 on per-link costs) is step-synchronous: every comm step waits for the
slowest link of the step, T = sum_t max_l (alpha_l + bytes_{l,t} / b_l) (`barrier_time_us`). The runtimes have
no global barrier: an MSCCL thread block runs its steps in order and a send waits only for the data it forwards
(its receives, through the per-connection FIFOs). Priced that way:

- each link (arc, lane) sends its **groups** in step order, a group being everything the link carries in one
  comm step (one message: alpha_l + bytes / b_l, as in the step-synchronous price);
- a group starts when its link is free and every transfer it depends on has arrived, by the model checker's
  holding rule (App. B, Definition 4; `verify`): the sender's copy of every atom it sends, as of the start of
  the step, is complete. A COPY into a node replaces its copy (the last write before the step counts, as the
  compiler's read-after-write waits do), a REDUCE adds a partial sum, so a node's copy is complete when its
  last COPY and every REDUCE after it have arrived (in a reduce-scatter: every partial sum before the step).
  Data a node holds from the start (its own shard; in a reduction its own contribution) is there at time 0;
- the time is when the last group arrives: the longest path of this DAG, a max over paths of sums of
  alpha_l + c_l M. As a function of the size M it is convex and piecewise linear, and `critical_path` also
  returns the affine piece A + B M active at the priced size (for exact crossovers between schedules).

Every group of step t finishes by the step-synchronous end of step t (induction over steps), so this time
never exceeds the barrier price; on uniform links with balanced steps (BFB on uniform graphs) they are equal.

The work is two compiled passes (numba) linear in the atom-level transfers (a transfer covers the atoms of its
source between its chunk bounds; atoms are cut per source, so a transfer of a uniformly chunked schedule is
one atom): `_atoms` and `_cells` number the (source, node, atom) locations read and written, `_longest_path`
walks the steps once. Grid units: a shard's grid unit is M / (N grid) bytes; an all-to-all's grid divides the
whole buffer D, one unit is D / grid bytes (`ir`).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from services.synthesis.schedule.cost import LinkModel, grid_unit_fraction
from services.synthesis.schedule.envelope import Curve
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.links import LinkCosts

__all__ = ["CriticalPath", "critical_path", "dependency_curve", "dependency_time", "link_ids", "locations", "warm"]

_DENSE_BUDGET = 1 << 25          # (node, atom) slots of one source's dense index before falling back to a sort


@dataclass(frozen=True)
class CriticalPath:
    """The dependency-driven time of a schedule at one size, with the affine piece of its longest path:
    seconds == latency_s + per_byte_s * size_bytes (up to rounding)."""

    seconds: float
    latency_s: float        # sum of the latencies along the longest path
    per_byte_s: float       # seconds per byte of the collective's size M along it
    size_bytes: float

    def at(self, size_bytes: float) -> float:
        """The path's time at another size: a lower bound of the schedule's time there (convexity)."""
        return self.latency_s + self.per_byte_s * size_bytes


def link_ids(schedule: Schedule, links, degree: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(link id per transfer, alpha seconds per link, bandwidth bytes/s per link) for `links`, a LinkCosts (ids:
    its topology's arcs) or a uniform LinkModel (ids: the distinct (sender, receiver, lane); each link alpha and
    B/d, so `degree` d is required)."""
    if isinstance(links, LinkCosts):
        arc = links.topology.arc_index(schedule.sender, schedule.receiver, schedule.lane)
        if (arc < 0).any():
            i = int(np.flatnonzero(arc < 0)[0])
            raise ValueError(f"transfer {i} uses the link {schedule.sender[i]}->{schedule.receiver[i]} lane "
                             f"{schedule.lane[i]}, which {links.topology.expr} does not have")
        return arc.astype(np.int64), links.alpha_s, links.bandwidth_Bps
    if isinstance(links, LinkModel):
        if degree is None or degree < 1:
            raise ValueError("a uniform LinkModel prices a link at B/d: give the topology's degree d")
        lanes = int(schedule.lane.max()) + 1 if schedule.transfers else 1
        key = (schedule.sender.astype(np.int64) * schedule.nodes + schedule.receiver) * lanes + schedule.lane
        uniq, ids = np.unique(key, return_inverse=True)
        return (ids.astype(np.int64).ravel(), np.full(uniq.size, links.alpha_s),
                np.full(uniq.size, links.node_bandwidth_Bps / degree))
    raise TypeError(f"links must be a LinkCosts or a LinkModel, got {type(links).__name__}")


class _Priced:
    """A schedule's locations and links numbered once, priced at any size (`at`)."""

    def __init__(self, schedule: Schedule, links, degree: int | None):
        self.empty = schedule.transfers == 0
        if self.empty:
            return
        link, alpha, bw = link_ids(schedule, links, degree)
        self.alpha = np.asarray(alpha, dtype=np.float64)
        self.bandwidth = np.asarray(bw, dtype=np.float64)
        self.unit = (Fraction(1, schedule.grid) if schedule.collective is Collective.ALLTOALL
                     else Fraction(1, schedule.nodes * schedule.grid))             # grid unit per byte of M
        self.args = (schedule.step_ptr.astype(np.int64), schedule.ops.astype(np.int64), link,
                     (schedule.hi - schedule.lo).astype(np.float64), *locations(schedule), self.alpha,
                     grid_unit_fraction(schedule) / self.bandwidth)              # s per unit per byte of M
        self.n_links = int(np.max(link)) + 1

    def _run(self, size_bytes: float):
        size_bytes = float(size_bytes)
        if not np.isfinite(size_bytes) or size_bytes < 0:
            raise ValueError(f"size_bytes must be finite and non-negative, got {size_bytes!r}")
        out = _longest_path(*self.args, size_bytes, self.n_links)
        if not np.isfinite(out[0]):
            raise ValueError("a transfer sends data its sender never holds: the schedule does not pass the model "
                             "checker (verify it first)")
        return out

    def at(self, size_bytes: float) -> CriticalPath:
        if self.empty:
            return CriticalPath(0.0, 0.0, 0.0, float(size_bytes))
        t, a, b = self._run(size_bytes)[:3]
        return CriticalPath(float(t), float(a), float(b), float(size_bytes))

    def line(self, size_bytes: float) -> tuple[Fraction, Fraction, float]:
        """The longest path's line at this size, exactly: (A, B) as Fractions of the float costs (its groups'
        latencies, and units over bandwidths), summed along the path the sweep recorded; and the time."""
        if self.empty:
            return Fraction(0), Fraction(0), 0.0
        t, _, _, last, pred, g_link, g_units = self._run(size_bytes)
        a, units_over_bw = Fraction(0), Fraction(0)
        g = int(last)
        while g >= 0:
            l = int(g_link[g])
            a += Fraction(float(self.alpha[l]))
            units_over_bw += Fraction(int(round(g_units[g]))) / Fraction(float(self.bandwidth[l]))
            g = int(pred[g])
        return a, units_over_bw * self.unit, float(t)


def critical_path(schedule: Schedule, links, size_bytes: float, degree: int | None = None) -> CriticalPath:
    """The dependency-driven time of `schedule` for M = `size_bytes` on `links` (a per-link `LinkCosts`, or a
    uniform `LinkModel` with the topology's `degree`), with the affine piece of its longest path.

    Raises ValueError when a transfer reads data its sender never holds (model-check the schedule first).
    O(atom-level transfers + links) time and memory.

    >>> from services.synthesis.schedule.ir import Collective, Schedule
    >>> ring = [((u, (0, 1)), (u, (u + 1) % 3), 1) for u in range(3)]
    >>> ring += [(((u + 2) % 3, (0, 1)), (u, (u + 1) % 3), 2) for u in range(3)]
    >>> s = Schedule.from_tuples(Collective.ALLGATHER, 3, ring)
    >>> p = critical_path(s, LinkModel(1e-6, 3e9), 3e3, degree=1)     # 2 x (1 us + 1 kB / 3 GB/s)
    >>> round(p.seconds * 1e6, 6), round(p.latency_s * 1e6, 6)
    (2.666667, 2.0)
    """
    return _Priced(schedule, links, degree).at(size_bytes)


def dependency_curve(schedule: Schedule, links, degree: int | None = None, *,
                     max_size: float = float(1 << 60)) -> Curve:
    """T(M) of the dependency-driven time, exactly: the upper envelope of the paths' lines A + B M (convex,
    piecewise linear), found from the longest path's own line at a few sizes. Start with the lines at M = 0
    and at `max_size`; where two adjacent lines cross, price the crossing: if nothing rises above them there,
    the crossing is a breakpoint, else the path found there is a new line between them (the convex-hull
    probe). 2 k - 1 pricings for k pieces. Each line is summed exactly along its path (Fractions of the float
    latencies and bandwidths), so two paths of equal cost give one line and the breakpoints are exact.

    >>> from services.synthesis.topology.catalog import build
    >>> from services.synthesis.bfb.lp import bfb_schedule
    >>> g = build("torus(3, 3)")
    >>> c = dependency_curve(bfb_schedule(g), LinkModel.from_units(10, 100), g.degree)
    >>> len(c.starts), round(float(c.a[0]) * 1e6, 9), c.b[0] * Fraction(100 * 10**9, 8)   # 2 alpha + (8/9) M/B
    (1, 20.0, Fraction(8, 9))
    """
    priced = _Priced(schedule, links, degree)
    first, last = priced.line(0.0)[:2], priced.line(max_size)[:2]
    stack = [(first, last)]
    found: dict[tuple[Fraction, Fraction], None] = {first: None}
    while stack:
        (a1, b1), (a2, b2) = stack.pop()
        if b2 <= b1:
            continue
        x = (a1 - a2) / (b2 - b1)
        if x <= 0:
            continue
        a3, b3, t = priced.line(float(x))
        mid = (a3, b3)
        if t <= float(a1 + b1 * x) * (1 + 1e-12) or mid in found or b3 <= b1 or b3 >= b2:
            found.setdefault((a2, b2), None)
            continue
        found[mid] = None
        stack.append((mid, (a2, b2)))
        stack.append(((a1, b1), mid))
    found.setdefault(last, None)
    starts: list[Fraction] = []
    a_out: list[Fraction] = []
    b_out: list[Fraction] = []
    for fa, fb in sorted(found, key=lambda ab: (ab[1], ab[0])):      # the upper hull of the lines, by slope
        x = Fraction(0)
        while b_out:
            if fb == b_out[-1]:
                x = starts[-1]                                     # same slope, larger intercept: replaces it
            else:
                x = max((a_out[-1] - fa) / (fb - b_out[-1]), Fraction(0))
            if x > starts[-1]:
                break
            starts.pop(), a_out.pop(), b_out.pop()
            x = Fraction(0)
        starts.append(x)
        a_out.append(fa)
        b_out.append(fb)
    return Curve(tuple(starts), tuple(a_out), tuple(b_out))


def dependency_time(schedule: Schedule, links, size_bytes: float, degree: int | None = None) -> float:
    """Seconds the schedule takes for M = `size_bytes` when each link sends its steps in order and waits only
    for its link and its data (the module docstring); `critical_path(...).seconds`."""
    return critical_path(schedule, links, size_bytes, degree).seconds


def warm() -> None:
    """Compile (or load from numba's cache) the kernels on a tiny schedule."""
    s = Schedule.from_tuples(Collective.ALLGATHER, 2, [((0, (0, 1)), (0, 1), 1), ((1, (0, 1)), (1, 0), 1)])
    dependency_time(s, LinkModel(1e-6, 1e9), 1.0, degree=1)


# ----- locations ----------------------------------------------------------------------------------------------
def locations(s: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Atom-level entries of every transfer: e_ptr (CSR over transfers), the location (source, node, atom) each
    entry reads at the sender and writes at the receiver (dense ids), and each location's initial ready time (0
    where the node holds the data from the start, inf where it does not). O(transfers + entries) with the chunk
    bounds marked on the grid (N (grid + 1) <= 2^25), else a sort per source.

    >>> s = Schedule.from_tuples(Collective.ALLGATHER, 2, [((0, (0, 1)), (0, 1), 1), ((1, (0, 1)), (1, 0), 1)])
    >>> [x.tolist() for x in locations(s)]
    [[0, 1, 2], [0, 2], [1, 3], [0.0, inf, 0.0, inf]]
    """
    order, src_ptr = _by_source(s.source, s.nodes)
    marked = s.grid if s.nodes * (s.grid + 1) <= _DENSE_BUDGET else 0         # bounds marked on the grid
    a_lo, a_hi, n_atoms = _atoms(order, src_ptr, s.lo, s.hi, marked)
    count = (a_hi - a_lo).astype(np.int64)
    e_ptr = np.zeros(s.transfers + 1, dtype=np.int64)
    np.cumsum(count, out=e_ptr[1:])
    all_held = s.collective in (Collective.REDUCESCATTER, Collective.ALLREDUCE)
    if s.nodes * int(n_atoms.max()) <= _DENSE_BUDGET:
        rcell, wcell, init = _cells(order, src_ptr, s.source, s.sender, s.receiver, a_lo, a_hi, e_ptr,
                                    n_atoms, s.nodes, all_held)
        return e_ptr, rcell, wcell, init
    # one source with very many atoms: number the (source, node, atom) keys by a sort instead
    rkey, wkey = _keys(s.source, s.sender, s.receiver, a_lo, a_hi, e_ptr, s.nodes)
    uniq, inv = np.unique(np.concatenate([rkey, wkey]), return_inverse=True)
    inv = inv.ravel().astype(np.int64)
    v, u = (uniq >> 40) // s.nodes, (uniq >> 40) % s.nodes
    init = np.where(all_held | (u == v), 0.0, np.inf)
    return e_ptr, inv[:rkey.size], inv[rkey.size:], init


@njit(cache=True, nogil=True)
def _by_source(source, nodes):
    """The transfers grouped by source (a counting sort, stable) and the groups' offsets."""
    ptr = np.zeros(nodes + 1, np.int64)
    for i in range(source.size):
        ptr[source[i] + 1] += 1
    for v in range(nodes):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    order = np.empty(source.size, np.int64)
    for i in range(source.size):
        order[fill[source[i]]] = i
        fill[source[i]] += 1
    return order, ptr


@njit(cache=True, nogil=True)
def _atoms(order, src_ptr, lo, hi, grid):
    """Per transfer, its first and past-last atom among the atoms of its source (the intervals between the
    source's chunk bounds); n_atoms per source. With `grid` > 0 the bounds are marked on the grid (O(grid) per
    source), else sorted."""
    n = lo.size
    a_lo = np.empty(n, np.int64)
    a_hi = np.empty(n, np.int64)
    nodes = src_ptr.size - 1
    n_atoms = np.zeros(nodes, np.int64)
    if grid > 0:
        mark = np.full(grid + 1, -1, np.int64)
        rank = np.empty(grid + 1, np.int64)
        for v in range(nodes):
            a, z = src_ptr[v], src_ptr[v + 1]
            if a == z:
                continue
            for k in range(a, z):
                mark[lo[order[k]]] = v
                mark[hi[order[k]]] = v
            r = -1
            for x in range(grid + 1):
                if mark[x] == v:
                    r += 1
                rank[x] = r
            n_atoms[v] = r
            for k in range(a, z):
                i = order[k]
                a_lo[i] = rank[lo[i]]
                a_hi[i] = rank[hi[i]]
        return a_lo, a_hi, n_atoms
    buf = np.empty(2 * n, np.int64)
    for v in range(nodes):
        a, z = src_ptr[v], src_ptr[v + 1]
        if a == z:
            continue
        m = 0
        for k in range(a, z):
            i = order[k]
            buf[m] = lo[i]
            buf[m + 1] = hi[i]
            m += 2
        cuts = np.unique(buf[:m])
        n_atoms[v] = cuts.size - 1
        for k in range(a, z):
            i = order[k]
            a_lo[i] = np.searchsorted(cuts, lo[i])
            a_hi[i] = np.searchsorted(cuts, hi[i])
    return a_lo, a_hi, n_atoms


@njit(cache=True, nogil=True)
def _cells(order, src_ptr, source, sender, receiver, a_lo, a_hi, e_ptr, n_atoms, nodes, all_held):
    """Dense ids of the (source, node, atom) locations the entries read and write: one source at a time, a
    (node, atom) slot array stamped with the source that last numbered it (nothing cleared between sources)."""
    width = 1
    for v in range(nodes):
        width = max(width, n_atoms[v])
    stamp = np.full(nodes * width, -1, np.int64)
    slot = np.empty(nodes * width, np.int64)
    total = e_ptr[e_ptr.size - 1]
    rcell = np.empty(total, np.int64)
    wcell = np.empty(total, np.int64)
    init = np.empty(2 * total, np.float64)
    cells = 0
    for v in range(nodes):
        for k in range(src_ptr[v], src_ptr[v + 1]):
            i = order[k]
            e = e_ptr[i]
            for a in range(a_lo[i], a_hi[i]):
                for side in range(2):
                    u = sender[i] if side == 0 else receiver[i]
                    p = u * width + a
                    if stamp[p] != v:
                        stamp[p] = v
                        slot[p] = cells
                        init[cells] = 0.0 if (all_held or u == v) else np.inf
                        cells += 1
                    if side == 0:
                        rcell[e] = slot[p]
                    else:
                        wcell[e] = slot[p]
                e += 1
    return rcell, wcell, init[:cells].copy()


@njit(cache=True, nogil=True)
def _keys(source, sender, receiver, a_lo, a_hi, e_ptr, nodes):
    total = e_ptr[e_ptr.size - 1]
    rkey = np.empty(total, np.int64)
    wkey = np.empty(total, np.int64)
    for i in range(source.size):
        e = e_ptr[i]
        for a in range(a_lo[i], a_hi[i]):
            rkey[e] = ((np.int64(source[i]) * nodes + sender[i]) << 40) | a
            wkey[e] = ((np.int64(source[i]) * nodes + receiver[i]) << 40) | a
            e += 1
    return rkey, wkey


# ----- the longest path ---------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _longest_path(step_ptr, ops, link, units, e_ptr, rcell, wcell, init, alpha, slope, size, n_links):
    """One sweep over the steps. Per step: each used link's group starts at max(link free, the ready time of
    every location its transfers read), finishes alpha_l + units * slope_l * size later; then the step's
    writes: a COPY replaces the location's ready time (the max over the step's copies), a REDUCE raises it.
    Alongside each time, the (latency, per-byte) sums of the path attaining it, and per group the group it
    waited for last (its predecessor on that path). Returns (time, A, B, last group, pred, group link,
    group units)."""
    ready = init.copy()
    r_a = np.zeros(init.size)
    r_b = np.zeros(init.size)
    r_g = np.full(init.size, -1, np.int64)
    wstep = np.full(init.size, -1, np.int64)
    free = np.zeros(n_links)
    f_a = np.zeros(n_links)
    f_b = np.zeros(n_links)
    f_g = np.full(n_links, -1, np.int64)
    g_t = np.zeros(n_links)
    g_a = np.zeros(n_links)
    g_b = np.zeros(n_links)
    g_id = np.zeros(n_links, np.int64)
    g_step = np.full(n_links, -1, np.int64)
    touched = np.empty(n_links, np.int64)
    pred = np.empty(link.size, np.int64)
    group_link = np.empty(link.size, np.int64)
    group_units = np.empty(link.size, np.float64)
    groups = 0
    for t in range(step_ptr.size - 1):
        s0, s1 = step_ptr[t], step_ptr[t + 1]
        used = 0
        for i in range(s0, s1):
            l = link[i]
            if g_step[l] != t:
                g_step[l] = t
                g_t[l] = free[l]
                g_a[l] = f_a[l]
                g_b[l] = f_b[l]
                g = groups
                groups += 1
                g_id[l] = g
                pred[g] = f_g[l]
                group_link[g] = l
                group_units[g] = 0.0
                touched[used] = l
                used += 1
            g = g_id[l]
            group_units[g] += units[i]
            for e in range(e_ptr[i], e_ptr[i + 1]):
                c = rcell[e]
                x = ready[c]
                if x > g_t[l] or (x == g_t[l] and r_b[c] > g_b[l]):
                    g_t[l] = x
                    g_a[l] = r_a[c]
                    g_b[l] = r_b[c]
                    pred[g] = r_g[c]
        for k in range(used):
            l = touched[k]
            per = group_units[g_id[l]] * slope[l]
            free[l] = g_t[l] + alpha[l] + per * size
            f_a[l] = g_a[l] + alpha[l]
            f_b[l] = g_b[l] + per
            f_g[l] = g_id[l]
        copy = ops[t] == 0
        for i in range(s0, s1):
            l = link[i]
            x = free[l]
            for e in range(e_ptr[i], e_ptr[i + 1]):
                c = wcell[e]
                if (copy and wstep[c] != t) or x > ready[c] or (x == ready[c] and f_b[l] > r_b[c]):
                    ready[c] = x
                    r_a[c] = f_a[l]
                    r_b[c] = f_b[l]
                    r_g[c] = f_g[l]
                wstep[c] = t
    best, b_a, b_b, b_g = 0.0, 0.0, 0.0, -1
    for l in range(n_links):
        if g_step[l] >= 0 and (free[l] > best or (free[l] == best and f_b[l] > b_b)):
            best, b_a, b_b, b_g = free[l], f_a[l], f_b[l], f_g[l]
    return best, b_a, b_b, b_g, pred[:groups], group_link[:groups], group_units[:groups]
