"""Model checker for schedules (paper App. B, Definition 4). Never trust a schedule.

Checks, in order, and reports the first violation precisely:
1. structure: node ids in range, chunks 0 <= lo < hi <= grid, step ops match the collective;
2. links: every transfer uses an existing arc (sender, receiver, lane) of the topology;
3. semantics, simulated step by step over "atoms" (the intervals between all chunk boundaries):
   - allgather (COPY steps): the sender holds every atom it sends at the start of the step (its own shard,
     or received in an earlier step); at the end every node holds every shard completely;
   - all-to-all (COPY steps; a chunk is a range of its source's whole buffer, see `ir`): the same holding
     rule; at the end every node j holds block j ([j/N, (j+1)/N)) of every other node's buffer completely;
   - reduce-scatter / allreduce (REDUCE then COPY steps): every node's data is a random element of
     GF(2^31 - 1); a REDUCE adds the sender's partial (as of the start of the step) into the receiver's,
     a COPY overwrites it. At the end the owner of each shard (reduce-scatter) or every node (allreduce)
     must hold exactly the sum of all N contributions: a missing or doubled contribution is caught with
     probability 1 - 2^-31 per wrong value, and is then traced exactly (which contributions are missing
     or repeated).
Also measures T_L (steps) and tau (T_B = tau M/B) from the schedule itself.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.topology.graph import Topology

PRIME = (1 << 31) - 1
STATE_BUDGET_BYTES = 1 << 28


@dataclass
class Violation:
    kind: str            # structure | missing_arc | not_held | incomplete | wrong_reduction
    message: str
    step: int | None = None
    transfer: int | None = None
    source: int | None = None
    sender: int | None = None
    receiver: int | None = None
    chunk: tuple[str, str] | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class VerificationReport:
    ok: bool
    collective: str
    nodes: int
    steps: int
    tau: Fraction
    transfers: int
    violation: Violation | None = None

    def raise_if_invalid(self) -> "VerificationReport":
        if not self.ok:
            raise ScheduleInvalid(self.violation)
        return self


class ScheduleInvalid(ValueError):
    def __init__(self, violation: Violation):
        self.violation = violation
        super().__init__(violation.message)


def _chunk(lo: int, hi: int, grid: int) -> tuple[str, str]:
    return str(Fraction(lo, grid)), str(Fraction(hi, grid))


def verify(schedule: Schedule, topology: Topology, collective: Collective | None = None) -> VerificationReport:
    """Model-check `schedule` on `topology`; see the module docstring."""
    collective = collective or schedule.collective
    steps = int(np.flatnonzero(np.diff(schedule.step_ptr))[-1] + 1) if schedule.transfers else 0
    report = VerificationReport(True, collective.value, schedule.nodes, steps, Fraction(0), schedule.transfers)
    checks = {Collective.ALLGATHER: _check_allgather, Collective.ALLTOALL: _check_alltoall}
    v = (_check_structure(schedule, topology, collective) or _check_links(schedule, topology)
         or (checks[collective](schedule) if collective in checks else _check_reduction(schedule, collective)))
    if v is not None:
        report.ok, report.violation = False, v
        return report
    report.tau = measured_tau(schedule, topology.degree)
    return report


def verify_allreduce_phases(reduce_scatter: VerificationReport, allgather: VerificationReport,
                            allreduce_steps: int) -> VerificationReport:
    """The report of `ir.allreduce(rs, ag)` from the reports of its two phases (`verify(rs, ...)` and
    `verify(ag, ...)` of the very schedules composed), without simulating the allreduce again.

    Lemma (paper section 3: allreduce = reduce-scatter then allgather): if the reduce-scatter is valid, after
    its steps the owner v of every shard holds the full sum of every atom of it. If the allgather is valid,
    each of its transfers of shard v is sent by v or by a node that received that atom earlier in the
    allgather, so by induction over its (copy) steps every such sender, and hence every receiver, holds the
    full sum; at the end every node has received every atom. So both phases valid implies the allreduce is
    valid, and its T_L and T_B are the sums of the phases' (its steps follow each other). The converse may
    fail (an allreduce may gather from a node other than the owner), so a failed phase says nothing:
    `verify` the allreduce itself for the verdict then."""
    ok = reduce_scatter.ok and allgather.ok
    return VerificationReport(ok, Collective.ALLREDUCE.value, allgather.nodes, allreduce_steps if ok else 0,
                              reduce_scatter.tau + allgather.tau if ok else Fraction(0),
                              reduce_scatter.transfers + allgather.transfers,
                              reduce_scatter.violation or allgather.violation)


def _transfer_violation(kind: str, s: Schedule, i: int, msg: str) -> Violation:
    t = int(np.searchsorted(s.step_ptr, i, side="right"))
    lo, hi = int(s.lo[i]), int(s.hi[i])
    c = _chunk(lo, hi, s.grid)
    return Violation(kind, f"step {t}, transfer {i} ({s.sender[i]}->{s.receiver[i]} lane {s.lane[i]}, shard "
                           f"{s.source[i]}, chunk [{c[0]}, {c[1]})): {msg}",
                     t, i, int(s.source[i]), int(s.sender[i]), int(s.receiver[i]), c)


def _check_structure(s: Schedule, g: Topology, collective: Collective) -> Violation | None:
    if s.nodes != g.nodes:
        return Violation("structure", f"schedule has {s.nodes} nodes, topology {g.expr} has {g.nodes}")
    if s.grid < 1:
        return Violation("structure", f"grid must be positive, got {s.grid}")
    if s.step_ptr.size != s.steps + 1 or s.step_ptr[0] != 0 or s.step_ptr[-1] != s.transfers \
            or np.any(np.diff(s.step_ptr) < 0):
        return Violation("structure", "step offsets do not partition the transfers")
    for name in ("source", "sender", "receiver"):
        col = getattr(s, name)
        bad = np.flatnonzero((col < 0) | (col >= s.nodes))
        if bad.size:
            return _transfer_violation("structure", s, int(bad[0]), f"{name} is not a node of 0..{s.nodes - 1}")
    bad = np.flatnonzero((s.lo < 0) | (s.hi > s.grid) | (s.lo >= s.hi) | (s.lane < 0))
    if bad.size:
        return _transfer_violation("structure", s, int(bad[0]), "chunk must satisfy 0 <= lo < hi <= 1")
    ops = s.ops.tolist()
    if collective is Collective.ALLTOALL and s.grid % s.nodes:
        return Violation("structure", f"an all-to-all chunk grid divides the whole buffer into the N = {s.nodes} "
                                      f"blocks, so it must be a multiple of N, got {s.grid}")
    if collective in (Collective.ALLGATHER, Collective.ALLTOALL):
        expect_ok = all(o == Op.COPY for o in ops)
    elif collective is Collective.REDUCESCATTER:
        expect_ok = all(o == Op.REDUCE for o in ops)
    else:
        expect_ok = ops == sorted(ops, reverse=True) and set(ops) <= {Op.COPY, Op.REDUCE}
    if not expect_ok:
        return Violation("structure", f"step operations {ops} do not fit a {collective.value} (allgather and "
                                      f"all-to-all: all copy; reduce-scatter: all reduce; allreduce: reduce steps "
                                      f"then copy steps)")
    return None


def _check_links(s: Schedule, g: Topology) -> Violation | None:
    bad = np.flatnonzero(g.arc_index(s.sender, s.receiver, s.lane) < 0)
    if bad.size:
        i = int(bad[0])
        return _transfer_violation("missing_arc", s, i, f"the topology has no arc {s.sender[i]}->{s.receiver[i]}"
                                   + (f" (lane {s.lane[i]})" if s.lane[i] else ""))
    return None


class _Atoms:
    """Intervals between consecutive chunk boundaries; each transfer covers a run of atoms."""

    def __init__(self, s: Schedule):
        self.cuts = np.unique(np.concatenate([[0, s.grid], s.lo, s.hi]))
        self.count = self.cuts.size - 1
        self.a_lo = np.searchsorted(self.cuts, s.lo)
        self.a_hi = np.searchsorted(self.cuts, s.hi)


def _source_blocks(s: Schedule, atoms: _Atoms, itemsize: int) -> list[tuple[int, int]]:
    per = max(1, STATE_BUDGET_BYTES // max(1, s.nodes * atoms.count * itemsize))
    return [(a, min(a + per, s.nodes)) for a in range(0, s.nodes, per)]


def _block_steps(s: Schedule, atoms: _Atoms, b0: int, b1: int):
    """Per step, the atom-level transfers of the shards b0..b1-1 as flat cells of a (shard - b0, node, atom)
    state array: (t, first, send, recv) with the sender's and the receiver's cells, and `first(k)` the
    transfer index of atom-level entry k (for reporting; entries are not materialised per transfer)."""
    A, n = atoms.count, s.nodes
    whole = b0 == 0 and b1 == s.nodes
    for t in range(1, s.steps + 1):
        sl = s.step_slice(t)
        idx = np.arange(sl.start, sl.stop)
        if not whole:
            idx = idx[(s.source[idx] >= b0) & (s.source[idx] < b1)]
        if idx.size:
            count = atoms.a_hi[idx] - atoms.a_lo[idx]
            ends = np.cumsum(count)
            base = (s.source[idx].astype(np.int64) - b0) * n
            first_send = (base + s.sender[idx]) * A + atoms.a_lo[idx]
            first_recv = (base + s.receiver[idx]) * A + atoms.a_lo[idx]
            offs = np.arange(int(ends[-1]), dtype=np.int64)
            offs -= np.repeat(ends - count, count)             # atom offset within its transfer
            send = np.repeat(first_send, count)
            send += offs
            recv = np.repeat(first_recv, count)
            recv += offs
            yield t, (lambda k, idx=idx, ends=ends: int(idx[np.searchsorted(ends, k, side="right")])), send, recv


def _check_allgather(s: Schedule) -> Violation | None:
    atoms = _Atoms(s)
    n, A = s.nodes, atoms.count
    for b0, b1 in _source_blocks(s, atoms, 1):
        held = np.zeros((b1 - b0, n, A), dtype=bool)
        own = np.arange(b0, b1)
        held[own - b0, own, :] = True
        cells = held.reshape(-1)
        for t, transfer, send, recv in _block_steps(s, atoms, b0, b1):
            ok = cells[send]
            if not ok.all():
                first = int(np.flatnonzero(~ok)[0])
                i, a = transfer(first), int(send[first] % A)
                gap = _chunk(int(atoms.cuts[a]), int(atoms.cuts[a + 1]), s.grid)
                return _transfer_violation("not_held", s, i, f"node {s.sender[i]} does not hold this data at "
                                                             f"the start of step {t} (it lacks [{gap[0]}, {gap[1]}))")
            cells[recv] = True
        missing = np.argwhere(~held)
        if missing.size:
            v, u, a = (int(x) for x in missing[0])
            c = _chunk(int(atoms.cuts[a]), int(atoms.cuts[a + 1]), s.grid)
            return Violation("incomplete", f"node {u} never receives chunk [{c[0]}, {c[1]}) of shard {v + b0}",
                             source=v + b0, receiver=u, chunk=c)
    return None


def _check_alltoall(s: Schedule) -> Violation | None:
    """Simulate the copies source by source (transfers sorted by source once, so a block of sources is one
    contiguous slice); atoms also break at the block boundaries j * grid / N."""
    n = s.nodes
    cuts = np.unique(np.concatenate([np.arange(n + 1, dtype=np.int64) * (s.grid // n), s.lo, s.hi]))
    A = cuts.size - 1
    a_lo, a_hi = np.searchsorted(cuts, s.lo), np.searchsorted(cuts, s.hi)
    block_of_atom = cuts[:-1] // (s.grid // n)
    step = s.step_of
    order = np.lexsort((step, s.source))
    bounds = np.searchsorted(s.source[order], np.arange(n + 1))
    per = max(1, STATE_BUDGET_BYTES // max(1, n * A))
    for b0 in range(0, n, per):
        b1 = min(b0 + per, n)
        idx = order[bounds[b0]:bounds[b1]]
        held = np.zeros((b1 - b0, n, A), dtype=bool)
        own = np.arange(b0, b1)
        held[own - b0, own, :] = True
        idx = idx[np.argsort(step[idx], kind="stable")]
        starts = np.flatnonzero(np.concatenate([[True], np.diff(step[idx]) != 0, [True]]))
        for a, z in zip(starts[:-1], starts[1:]):
            part = idx[a:z]
            count = a_hi[part] - a_lo[part]
            rep = np.repeat(part, count)
            atom = a_lo[rep] + np.arange(rep.size) - np.repeat(np.cumsum(count) - count, count)
            v = s.source[rep] - b0
            ok = held[v, s.sender[rep], atom]
            if not ok.all():
                first = int(np.flatnonzero(~ok)[0])
                i, at = int(rep[first]), int(atom[first])
                gap = _chunk(int(cuts[at]), int(cuts[at + 1]), s.grid)
                return _transfer_violation("not_held", s, i, f"node {s.sender[i]} does not hold this data at the "
                                                             f"start of step {int(step[i])} (it lacks [{gap[0]}, {gap[1]}))")
            held[v, s.receiver[rep], atom] = True
        # node j must hold block j of every source: held[v, j, atoms of block j]
        missing = np.argwhere(~held[:, block_of_atom, np.arange(A)])
        if missing.size:
            v, a = (int(x) for x in missing[0])
            u = int(block_of_atom[a])
            c = _chunk(int(cuts[a]), int(cuts[a + 1]), s.grid)
            return Violation("incomplete", f"node {u} never receives chunk [{c[0]}, {c[1]}) of node {v + b0}'s "
                                           f"buffer (its block of that buffer)", source=v + b0, receiver=u, chunk=c)
    return None


def _check_reduction(s: Schedule, collective: Collective) -> Violation | None:
    atoms = _Atoms(s)
    n, A = s.nodes, atoms.count
    rng = np.random.default_rng(0x5EED)
    contrib = rng.integers(1, PRIME, size=n, dtype=np.int64).astype(np.uint64)
    total = np.uint64(int(contrib.sum()) % PRIME)
    for b0, b1 in _source_blocks(s, atoms, 8):
        val = np.broadcast_to(contrib[None, :, None], (b1 - b0, n, A)).copy()
        cells = val.reshape(-1)
        for t, _, send, recv in _block_steps(s, atoms, b0, b1):
            sent = cells[send]                              # snapshot at the start of the step
            if s.ops[t - 1] == Op.REDUCE:                   # sum what each cell receives (sorted runs), add once
                order = np.argsort(recv, kind="stable")
                into = recv[order]
                first = np.flatnonzero(np.concatenate([[True], into[1:] != into[:-1]]))
                into = into[first]
                cells[into] = (cells[into] + np.add.reduceat(sent[order], first)) % PRIME
            else:
                cells[recv] = sent
        if collective is Collective.REDUCESCATTER:
            owners = np.arange(b0, b1)
            wrong = np.argwhere(val[owners - b0, owners, :] != total)
            wrong = [(int(r), int(r) + b0, int(a)) for r, a in wrong]
        else:
            wrong = [(int(r), int(u), int(a)) for r, u, a in np.argwhere(val != total)]
        if wrong:
            r, u, a = wrong[0]
            return _explain_reduction(s, atoms, r + b0, u, a)
    return None


def _explain_reduction(s: Schedule, atoms: _Atoms, shard: int, node: int, atom: int) -> Violation:
    """Replay one (shard, atom) track with exact contribution counts to say what went wrong."""
    n = s.nodes
    counts = np.eye(n, dtype=np.int64)
    for t in range(1, s.steps + 1):
        sl = s.step_slice(t)
        idx = np.arange(sl.start, sl.stop)
        idx = idx[(s.source[idx] == shard) & (atoms.a_lo[idx] <= atom) & (atoms.a_hi[idx] > atom)]
        if idx.size == 0:
            continue
        sent = counts[s.sender[idx]].copy()
        if s.ops[t - 1] == Op.REDUCE:
            np.add.at(counts, s.receiver[idx], sent)
        else:
            counts[s.receiver[idx]] = sent
    got = counts[node]
    missing = np.flatnonzero(got == 0).tolist()
    repeated = np.flatnonzero(got > 1).tolist()
    c = _chunk(int(atoms.cuts[atom]), int(atoms.cuts[atom + 1]), s.grid)
    detail = []
    if missing:
        detail.append(f"missing the contributions of nodes {missing[:8]}{'...' if len(missing) > 8 else ''}")
    if repeated:
        detail.append(f"counts nodes {repeated[:8]}{'...' if len(repeated) > 8 else ''} more than once")
    if not detail:
        detail.append("holds a value that is not the sum of all contributions")
    return Violation("wrong_reduction", f"node {node}'s result for chunk [{c[0]}, {c[1]}) of shard {shard} "
                                        + " and ".join(detail), source=shard, receiver=node, chunk=c)
