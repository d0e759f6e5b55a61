"""The MSCCL checker's CPU simulator (`Simulator`) of a parsed and validated file
(services.compiler.check.msccl_parse.Algo), and how large a file it takes (`simulable`).

4. Simulation (allgather / reducescatter / allreduce / alltoall; out-of-place and/or in-place as the file
   declares): per-gpu buffers of random data (outputs and scratch poisoned), every tb a sequential program,
   each (sender, receiver, channel) a FIFO holding `fifo` messages (default: what the runtime buffers for
   the file's protocol, NCCL_STEPS / MSCCL_CHUNKSTEPS = 2 for Simple and 8 for LL/LL128, for messages of at
   most maxAllowedCount chunks; 0 = rendezvous: a send completes only when the receiving tb waits at the
   matching receive, the strictest setting), dependencies as the runtime implements them (a step waits
   until the producer tb has published a step index >= deps; only hasdep steps publish). Vector clocks over
   thread blocks give the happens-before order: a read of a chunk whose last write is not ordered before it,
   or a write not ordered after the previous reads and write, is a race. No runnable tb before all finish is
   a deadlock. At the end every gpu's output must hold exactly the collective's result. The longest chain of
   messages in happens-before order is reported as `comm_steps`.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import Finding
from .msccl_parse import RECV, SEND, Algo, Tb, expected_outputs, natural_sizes

__all__ = ["Simulator", "simulable", "simulation_bytes", "SIMULATED", "SIMULATE_MAX_STEPS", "SIMULATE_MAX_BYTES"]

SIMULATE_MAX_STEPS = 200_000         # simulate fitted programs up to this many XML steps
SIMULATE_MAX_BYTES = 512 << 20       # ... and up to this much memory for the simulator's vector clocks
SIMULATED = ("allgather", "reducescatter", "allreduce", "alltoall")


def simulation_bytes(threadblocks: int, published: int) -> int:
    """Memory of the simulator's vector clocks (`Simulator`): one int32 per thread block of the
    file in a T x T matrix and in a copy kept for every published (hasdep) step; the simulator's peak is
    about 1.4 times this (e.g. 1024 ranks x 8 tbs with 70k published steps: 2.5 GB, which no longer fits a
    compile's 2 GiB; the program is then fitted without simulating it, as for SIMULATE_MAX_STEPS)."""
    return 4 * threadblocks * (threadblocks + published)


def simulable(xml_steps: int, threadblocks: int, published: int, max_steps: int = SIMULATE_MAX_STEPS) -> bool:
    """Whether a program is small enough to simulate (at most `max_steps` XML steps, and the simulator's
    memory)."""
    return xml_steps <= max_steps and simulation_bytes(threadblocks, published) <= SIMULATE_MAX_BYTES


class _Stop(Exception):
    pass


@dataclass
class _Msg:
    data: np.ndarray
    clock: np.ndarray
    hop: int
    origin: tuple[int, int, int]


class Simulator:
    """Executes a validated Algo on CPU (see the module docstring)."""

    def __init__(self, algo: Algo, *, inplace: bool, fifo: int = 2, seed: int = 0):
        self.algo = algo
        self.inplace = inplace
        self.fifo = fifo
        N, L = algo.ngpus, algo.nchunksperloop
        nat = natural_sizes(algo.coll, N, L)
        assert nat is not None
        self.nat_in, self.nat_out = nat
        rng = np.random.default_rng(seed)
        self.inputs = rng.integers(1, 1 << 40, size=(N, self.nat_in), dtype=np.int64)
        self.arrays: list[list[np.ndarray]] = []
        self.bufmap: list[dict[str, tuple[int, int, int]]] = []     # buf -> (array id, base, size)
        for gpu in sorted(algo.gpus, key=lambda x: x.id):
            g = gpu.id
            poison = lambda n: -rng.integers(1, 1 << 40, size=n, dtype=np.int64)   # noqa: E731
            scratch = poison(gpu.s_chunks)
            if not inplace:
                arrs = [self.inputs[g].copy(), poison(self.nat_out), scratch]
                bm = {"i": (0, 0, self.nat_in), "o": (1, 0, self.nat_out), "s": (2, 0, gpu.s_chunks)}
            elif algo.coll == "allgather":
                C = self.nat_in
                m = poison(L)
                m[g * C:(g + 1) * C] = self.inputs[g]
                arrs = [m, m, scratch]
                bm = {"i": (0, g * C, C), "o": (0, 0, L), "s": (2, 0, gpu.s_chunks)}
            elif algo.coll == "reducescatter":
                C = self.nat_out
                m = self.inputs[g].copy()
                arrs = [m, m, scratch]
                bm = {"i": (0, 0, L), "o": (0, g * C, C), "s": (2, 0, gpu.s_chunks)}
            else:
                m = self.inputs[g].copy()
                arrs = [m, m, scratch]
                bm = {"i": (0, 0, L), "o": (0, 0, L), "s": (2, 0, gpu.s_chunks)}
            self.arrays.append(arrs)
            self.bufmap.append(bm)
        # thread blocks
        self.tbs: list[tuple[int, Tb]] = []
        self.gid: dict[tuple[int, int], int] = {}
        for gpu in sorted(algo.gpus, key=lambda x: x.id):
            for tb in gpu.tbs:
                self.gid[(gpu.id, tb.id)] = len(self.tbs)
                self.tbs.append((gpu.id, tb))
        T = len(self.tbs)
        self.T = T
        self.pc = [0] * T
        self.clock = np.zeros((T, T), dtype=np.int32)
        self.hop = [0] * T
        self.flag = [-1] * T
        # every published step: (index, clock, hop). A waiter is guaranteed to be ordered only after the first
        # published step >= the index it names (any later one may not have happened yet in another run)
        self.published: list[list[tuple[int, np.ndarray, int]]] = [[] for _ in range(T)]
        self.fifos: dict[tuple[int, int, int], deque] = {}
        self.receiver_of: dict[tuple[int, int, int], int] = {}
        for x, (g, tb) in enumerate(self.tbs):
            if tb.recv >= 0:
                self.receiver_of[(tb.recv, g, tb.chan)] = x
        self.writer: dict[tuple[int, int, int], tuple[int, int]] = {}
        self.readers: dict[tuple[int, int, int], dict[int, int]] = {}
        self.max_hop = 0
        self.messages = 0
        self.error: Finding | None = None
        self.blocked: dict[int, str] = {}

    # ----- memory with race detection -------------------------------------------------------------
    def _where(self, g: int, buf: str, off: int, cnt: int, x: int, i: int) -> tuple[int, int]:
        arr, base, size = self.bufmap[g][buf]
        if off < 0 or off + cnt > size:
            tb = self.tbs[x][1]
            self._fail("bounds", f"gpu {g} tb {tb.id} step {i}: {buf}[{off}:{off + cnt}] is outside the buffer of "
                                 f"{size} chunks", g, tb.id, i)
        return arr, base + off

    def _fail(self, kind, msg, g, tb, step):
        self.error = Finding(kind, msg, gpu=g, tb=tb, step=step)
        raise _Stop

    def _name(self, g: int, arr: int, idx: int) -> str:
        for b, (a, base, size) in self.bufmap[g].items():
            if a == arr and base <= idx < base + size:
                return f"{b}[{idx - base}]"
        return f"buffer {arr}[{idx}]"

    def _read(self, x: int, i: int, g: int, buf: str, off: int, cnt: int) -> np.ndarray:
        arr, start = self._where(g, buf, off, cnt, x, i)
        seq = i + 1
        for idx in range(start, start + cnt):
            key = (g, arr, idx)
            w = self.writer.get(key)
            if w is not None:
                self._race_if_unordered(x, i, g, arr, idx, w, "reads", "writes")
            rd = self.readers.setdefault(key, {})
            rd[x] = seq
        return self.arrays[g][arr][start:start + cnt].copy()

    def _write(self, x: int, i: int, g: int, buf: str, off: int, cnt: int, data: np.ndarray) -> None:
        arr, start = self._where(g, buf, off, cnt, x, i)
        seq = i + 1
        for idx in range(start, start + cnt):
            key = (g, arr, idx)
            w = self.writer.get(key)
            if w is not None:
                self._race_if_unordered(x, i, g, arr, idx, w, "overwrites", "writes")
            for rx, rseq in self.readers.get(key, {}).items():
                self._race_if_unordered(x, i, g, arr, idx, (rx, rseq), "overwrites", "reads")
            self.writer[key] = (x, seq)
            self.readers.pop(key, None)
        self.arrays[g][arr][start:start + cnt] = data

    def _race_if_unordered(self, x, i, g, arr, idx, other, what, other_what):
        ox, oseq = other
        if ox == x or self.clock[x, ox] >= oseq:
            return
        og, otb = self.tbs[ox]
        tb = self.tbs[x][1]
        self._fail("race", f"gpu {g} tb {tb.id} step {i} {what} {self._name(g, arr, idx)}, which tb {otb.id} step "
                           f"{oseq - 1} {other_what}, with no dependency ordering them (a missing depid/deps?)",
                   g, tb.id, i)

    # ----- execution --------------------------------------------------------------------------------
    def _try(self, x: int) -> bool:
        g, tb = self.tbs[x]
        i = self.pc[x]
        st = tb.steps[i]
        dep = None
        if st.depid >= 0:
            dep = self.gid[(g, st.depid)]
            if self.flag[dep] < st.deps:
                self.blocked[x] = f"waits for tb {st.depid} step {st.deps}"
                return False
        q_in = q_out = None
        if st.type in RECV:
            q_in = self.fifos.setdefault((tb.recv, g, tb.chan), deque())
            if not q_in:
                self.blocked[x] = f"waits for a message from gpu {tb.recv} on channel {tb.chan}"
                return False
        if st.type in SEND:
            key = (g, tb.send, tb.chan)
            q_out = self.fifos.setdefault(key, deque())
            if self.fifo > 0:
                if len(q_out) >= self.fifo:
                    self.blocked[x] = f"waits for gpu {tb.send} to drain channel {tb.chan}"
                    return False
            else:
                r = self.receiver_of.get(key)
                ok = bool(not q_out and r is not None and self._waiting_receive(r))
                if not ok:
                    self.blocked[x] = f"waits for gpu {tb.send} to be ready to receive on channel {tb.chan}"
                    return False
        self.blocked.pop(x, None)
        clock = self.clock[x]
        if dep is not None:
            pub = self.published[dep]
            k = bisect.bisect_left(pub, st.deps, key=lambda e: e[0])
            _, pclock, phop = pub[k]
            np.maximum(clock, pclock, out=clock)
            self.hop[x] = max(self.hop[x], phop)
        msg = None
        if q_in is not None:
            msg = q_in.popleft()
            if msg.data.size != st.cnt:
                og, otb, ostep = msg.origin
                self._fail("mismatch", f"gpu {g} tb {tb.id} step {i} receives {st.cnt} chunks but gpu {og} tb {otb} "
                                       f"step {ostep} sent {msg.data.size}", g, tb.id, i)
            np.maximum(clock, msg.clock, out=clock)
            self.hop[x] = max(self.hop[x], msg.hop + 1)
            self.max_hop = max(self.max_hop, self.hop[x])
        clock[x] = i + 1
        t = st.type
        out = None
        if t == "s":
            out = self._read(x, i, g, st.srcbuf, st.srcoff, st.cnt)
        elif t == "r":
            self._write(x, i, g, st.dstbuf, st.dstoff, st.cnt, msg.data)
        elif t == "rcs":
            self._write(x, i, g, st.dstbuf, st.dstoff, st.cnt, msg.data)
            out = msg.data
        elif t == "rrs":
            out = self._read(x, i, g, st.srcbuf, st.srcoff, st.cnt) + msg.data
        elif t == "rrc":
            self._write(x, i, g, st.dstbuf, st.dstoff, st.cnt, self._read(x, i, g, st.srcbuf, st.srcoff, st.cnt)
                        + msg.data)
        elif t == "rrcs":
            out = self._read(x, i, g, st.srcbuf, st.srcoff, st.cnt) + msg.data
            self._write(x, i, g, st.dstbuf, st.dstoff, st.cnt, out)
        elif t == "cpy":
            self._write(x, i, g, st.dstbuf, st.dstoff, st.cnt, self._read(x, i, g, st.srcbuf, st.srcoff, st.cnt))
        elif t == "re":
            a = self._read(x, i, g, st.dstbuf, st.dstoff, st.cnt)
            b = self._read(x, i, g, st.srcbuf, st.srcoff, st.cnt)
            self._write(x, i, g, st.dstbuf, st.dstoff, st.cnt, a + b)
        if out is not None:
            q_out.append(_Msg(out, clock.copy(), self.hop[x], (g, tb.id, i)))
            self.messages += 1
        if st.hasdep == 1:
            self.flag[x] = i
            self.published[x].append((i, clock.copy(), self.hop[x]))
        self.pc[x] = i + 1
        return True

    def _waiting_receive(self, r: int) -> bool:
        g, tb = self.tbs[r]
        i = self.pc[r]
        if i >= len(tb.steps):
            return False
        st = tb.steps[i]
        if st.type not in RECV:
            return False
        if st.depid >= 0 and self.flag[self.gid[(g, st.depid)]] < st.deps:
            return False
        return True

    def run(self) -> Finding | None:
        try:
            active = [x for x in range(self.T) if self.tbs[x][1].steps]
            while active:
                progress = False
                still = []
                for x in active:
                    n = len(self.tbs[x][1].steps)
                    while self.pc[x] < n and self._try(x):
                        progress = True
                    if self.pc[x] < n:
                        still.append(x)
                active = still
                if active and not progress:
                    parts = []
                    for x in active[:4]:
                        g, tb = self.tbs[x]
                        parts.append(f"gpu {g} tb {tb.id} step {self.pc[x]} ({tb.steps[self.pc[x]].type}) "
                                     f"{self.blocked.get(x, 'is blocked')}")
                    g, tb = self.tbs[active[0]]
                    self.error = Finding("deadlock", f"deadlock: {len(active)} thread blocks cannot progress; "
                                                     + "; ".join(parts), gpu=g, tb=tb.id, step=self.pc[active[0]])
                    return self.error
            for key, q in sorted(self.fifos.items()):
                if q:
                    og, otb, ostep = q[0].origin
                    self.error = Finding("mismatch", f"gpu {og} tb {otb} step {ostep} sent a message to gpu {key[1]} on "
                                                     f"channel {key[2]} that is never received", gpu=og, tb=otb,
                                         step=ostep)
                    return self.error
            return self._check_result()
        except _Stop:
            return self.error

    def _check_result(self) -> Finding | None:
        coll, N = self.algo.coll, self.algo.ngpus
        expect = expected_outputs(coll, self.inputs, self.nat_out)
        for g in range(N):
            arr, base, size = self.bufmap[g]["o"]
            got = self.arrays[g][arr][base:base + size]
            bad = np.flatnonzero(got != expect[g])
            if bad.size:
                k = int(bad[0])
                w = self.writer.get((g, arr, base + k))
                by = (f"; last written by tb {self.tbs[w[0]][1].id} step {w[1] - 1}" if w else
                      "; it was never written")
                if coll == "allgather":
                    C = self.nat_in
                    what = f"shard {k // C} chunk {k % C}"
                elif coll == "reducescatter":
                    what = f"chunk {k} of its reduced shard"
                else:
                    what = f"chunk {k} of the reduced vector"
                exp, val = int(expect[g][k]), int(got[k])
                detail = "uninitialised data" if val < 0 else "a wrong value"
                if coll != "allgather" and val > 0:
                    col = self.inputs[:, (g * self.nat_out + k) if coll == "reducescatter" else k]
                    detail = f"a wrong sum (expected the sum of all {N} contributions)"
                    miss = np.flatnonzero(col == exp - val)
                    extra = np.flatnonzero(col == val - exp)
                    if miss.size:
                        detail = f"a sum missing gpu {int(miss[0])}'s contribution"
                    elif extra.size:
                        detail = f"a sum counting gpu {int(extra[0])}'s contribution twice"
                self.error = Finding("result", f"gpu {g} output chunk {k} ({what}) holds {detail}{by}",
                                     gpu=g, tb=self.tbs[w[0]][1].id if w else None, step=(w[1] - 1) if w else None)
                return self.error
        return None
