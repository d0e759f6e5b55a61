"""Validator and CPU simulator for oneCCL XML (format: docs/oneccl-xml.md).

Structure: root <oneccl_schedule> with version/coll/nranks/nchunks; ranks 0..nranks-1 once each; known
instructions with their attributes; buffers in/out/tmp with [off, off+cnt) inside the declared sizes and
the collective's buffers; peers in range and not the rank itself; every (sender, receiver, tag) names
exactly one send and one receive with the same cnt; every posted operation is followed by a sync.

Simulation: each rank runs its instructions in order. send/recv post non-blocking operations; a pair
transfers its data once both sides are posted (rendezvous); `sync` blocks until all of the rank's posted
operations have been matched. Between posting and the completing sync, a receive's region must not be
touched and a send's region must not be written, by the rank's instructions or its other outstanding
operations (race). No rank able to progress before all finish is a deadlock. The result is then compared
with the collective's exactly. `comm_steps` is the longest chain of messages (each message adds one).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np

from ..errors import CheckReport, Finding
from .msccl_parse import expected_outputs, natural_sizes

ATTRS = {
    "send": ("peer", "buf", "off", "cnt", "tag"),
    "recv": ("peer", "buf", "off", "cnt", "tag"),
    "copy": ("srcbuf", "srcoff", "dstbuf", "dstoff", "cnt"),
    "reduce": ("srcbuf", "srcoff", "dstbuf", "dstoff", "cnt"),
    "sync": (),
}
INT_ATTRS = {"peer", "off", "cnt", "tag", "srcoff", "dstoff", "accoff"}
BUFS = ("in", "out", "tmp")
COLLS = {"allgather": "allgather", "reduce_scatter": "reducescatter", "reducescatter": "reducescatter",
         "allreduce": "allreduce", "alltoall": "alltoall"}


@dataclass
class Instr:
    op: str
    a: dict


@dataclass
class Rank:
    id: int
    in_chunks: int
    out_chunks: int
    tmp_chunks: int
    instr: list[Instr] = field(default_factory=list)


@dataclass
class Program:
    coll: str
    nranks: int
    nchunks: int
    inplace: int
    ranks: list[Rank]


class _Stop(Exception):
    pass


def parse_oneccl(text: str) -> tuple[Program | None, list[Finding]]:
    E: list[Finding] = []
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        return None, [Finding("syntax", f"not well-formed XML: {e}")]
    if root.tag != "oneccl_schedule":
        return None, [Finding("structure", f"root element is <{root.tag}>, expected <oneccl_schedule>")]
    vals = {}
    for a in ("version", "coll", "nranks", "nchunks"):
        if root.get(a) is None:
            E.append(Finding("structure", f"<oneccl_schedule> lacks the attribute {a!r}"))
    if E:
        return None, E
    if root.get("version") != "1":
        E.append(Finding("structure", f"unsupported version {root.get('version')!r} (this checker reads version 1)"))
    coll = COLLS.get(root.get("coll"))
    if coll is None:
        E.append(Finding("structure", f"coll={root.get('coll')!r}; expected allgather, reduce_scatter, allreduce or "
                                      f"alltoall"))
    try:
        for a in ("nranks", "nchunks"):
            vals[a] = int(root.get(a))
        inplace = int(root.get("inplace", "0"))
    except ValueError as e:
        return None, E + [Finding("structure", f"<oneccl_schedule>: {e}")]
    if coll == "alltoall" and inplace:
        E.append(Finding("structure", "an alltoall schedule runs out of place (inplace=\"0\")"))
    ranks = []
    for rel in root:
        if rel.tag != "rank":
            E.append(Finding("structure", f"unexpected element <{rel.tag}> under <oneccl_schedule>"))
            continue
        try:
            r = Rank(int(rel.get("id")), int(rel.get("in_chunks")), int(rel.get("out_chunks")),
                     int(rel.get("tmp_chunks")))
        except (TypeError, ValueError):
            E.append(Finding("structure", "<rank> needs integer id, in_chunks, out_chunks, tmp_chunks"))
            continue
        for i, iel in enumerate(rel):
            loc = {"gpu": r.id, "step": i}
            if iel.tag not in ATTRS:
                E.append(Finding("structure", f"rank {r.id} instruction {i}: unknown instruction <{iel.tag}>", **loc))
                continue
            a = {}
            for k in ATTRS[iel.tag] + (("accbuf", "accoff") if iel.tag == "reduce" else ()):
                raw = iel.get(k)
                if raw is None:
                    if k in ("accbuf", "accoff"):
                        continue
                    E.append(Finding("structure", f"rank {r.id} instruction {i} <{iel.tag}>: missing attribute {k!r}",
                                     **loc))
                    a = None
                    break
                if k in INT_ATTRS:
                    try:
                        raw = int(raw)
                    except ValueError:
                        E.append(Finding("structure", f"rank {r.id} instruction {i}: {k}={raw!r} is not an integer",
                                         **loc))
                        a = None
                        break
                a[k] = raw
            if a is not None:
                if iel.tag == "reduce" and ("accbuf" in a) != ("accoff" in a):
                    E.append(Finding("structure", f"rank {r.id} instruction {i}: accbuf and accoff go together", **loc))
                r.instr.append(Instr(iel.tag, a))
        ranks.append(r)
    if coll is None:
        return None, E
    return Program(coll, vals["nranks"], vals["nchunks"], inplace, ranks), E


def validate(p: Program) -> list[Finding]:
    E: list[Finding] = []
    N = p.nranks
    ids = sorted(r.id for r in p.ranks)
    if ids != list(range(N)):
        return [Finding("structure", f"rank ids must be 0..{N - 1} once each, got {ids[:12]}")]
    p.ranks.sort(key=lambda r: r.id)
    nat = natural_sizes(p.coll, N, p.nchunks)
    if nat is None:
        return [Finding("structure", f"nchunks={p.nchunks} is not a multiple of nranks={N}")]
    sends: dict[tuple[int, int, int], tuple[int, int]] = {}
    recvs: dict[tuple[int, int, int], tuple[int, int]] = {}
    for r in p.ranks:
        size = {"in": r.in_chunks, "out": r.out_chunks, "tmp": r.tmp_chunks}
        real = {"in": min(r.in_chunks, nat[0]), "out": min(r.out_chunks, nat[1]), "tmp": r.tmp_chunks}
        pending = None
        for i, ins in enumerate(r.instr):
            loc = {"gpu": r.id, "step": i}
            w = f"rank {r.id} instruction {i} <{ins.op}>"
            a = ins.a
            if ins.op == "sync":
                pending = None
                continue
            if a["cnt"] < 1:
                E.append(Finding("structure", f"{w}: cnt={a['cnt']} must be positive", **loc))
            regions = ([(a["buf"], a["off"])] if ins.op in ("send", "recv") else
                       [(a["srcbuf"], a["srcoff"]), (a["dstbuf"], a["dstoff"])] +
                       ([(a["accbuf"], a["accoff"])] if "accbuf" in a else []))
            for b, off in regions:
                if b not in BUFS:
                    E.append(Finding("structure", f"{w}: buffer {b!r} is not in, out or tmp", **loc))
                elif off < 0 or off + a["cnt"] > size[b]:
                    E.append(Finding("bounds", f"{w}: {b}[{off}:{off + a['cnt']}] is outside {b}_chunks={size[b]}",
                                     **loc))
                elif off + a["cnt"] > real[b]:
                    E.append(Finding("bounds", f"{w}: {b}[{off}:{off + a['cnt']}] is beyond the collective's {b} "
                                               f"buffer of {real[b]} chunks", **loc))
            if ins.op in ("send", "recv"):
                peer = a["peer"]
                if peer == r.id or not 0 <= peer < N:
                    E.append(Finding("structure", f"{w}: peer {peer} is not another rank of 0..{N - 1}", **loc))
                    continue
                key = (r.id, peer, a["tag"]) if ins.op == "send" else (peer, r.id, a["tag"])
                book = sends if ins.op == "send" else recvs
                if key in book:
                    E.append(Finding("mismatch", f"{w}: tag {a['tag']} is used twice for {ins.op}s between ranks "
                                                 f"{key[0]} -> {key[1]}", **loc))
                book[key] = (r.id, i)
                pending = pending if pending is not None else i
        if pending is not None:
            E.append(Finding("structure", f"rank {r.id}: the operation posted at instruction {pending} is never "
                                          f"completed (no sync after it)", gpu=r.id, step=pending))
    if E:
        return E
    for key in sorted(set(sends) | set(recvs)):
        s, rv = sends.get(key), recvs.get(key)
        if rv is None:
            E.append(Finding("mismatch", f"rank {s[0]} instruction {s[1]} sends to rank {key[1]} with tag {key[2]}, "
                                         f"but rank {key[1]} posts no matching recv", gpu=s[0], step=s[1]))
        elif s is None:
            E.append(Finding("mismatch", f"rank {rv[0]} instruction {rv[1]} receives from rank {key[0]} with tag "
                                         f"{key[2]}, but rank {key[0]} posts no matching send", gpu=rv[0], step=rv[1]))
        else:
            cs = p.ranks[s[0]].instr[s[1]].a["cnt"]
            cr = p.ranks[rv[0]].instr[rv[1]].a["cnt"]
            if cs != cr:
                E.append(Finding("mismatch", f"rank {s[0]} instruction {s[1]} sends {cs} chunks with tag {key[2]} but "
                                             f"rank {rv[0]} instruction {rv[1]} receives {cr}", gpu=s[0], step=s[1]))
        if E:
            return E
    return E


class Simulator:
    def __init__(self, p: Program, *, inplace: bool, seed: int = 0):
        self.p = p
        N, L = p.nranks, p.nchunks
        self.nat_in, self.nat_out = natural_sizes(p.coll, N, L)
        rng = np.random.default_rng(seed)
        self.inputs = rng.integers(1, 1 << 40, size=(N, self.nat_in), dtype=np.int64)
        self.arrays, self.bufmap = [], []
        for r in p.ranks:
            g = r.id
            tmp = -rng.integers(1, 1 << 40, size=r.tmp_chunks, dtype=np.int64)
            if not inplace:
                arrs = [self.inputs[g].copy(), -rng.integers(1, 1 << 40, size=self.nat_out, dtype=np.int64), tmp]
                bm = {"in": (0, 0, self.nat_in), "out": (1, 0, self.nat_out), "tmp": (2, 0, r.tmp_chunks)}
            elif p.coll == "allgather":
                C = self.nat_in
                m = -rng.integers(1, 1 << 40, size=L, dtype=np.int64)
                m[g * C:(g + 1) * C] = self.inputs[g]
                arrs, bm = [m, m, tmp], {"in": (0, g * C, C), "out": (0, 0, L), "tmp": (2, 0, r.tmp_chunks)}
            elif p.coll == "reducescatter":
                C = self.nat_out
                m = self.inputs[g].copy()
                arrs, bm = [m, m, tmp], {"in": (0, 0, L), "out": (0, g * C, C), "tmp": (2, 0, r.tmp_chunks)}
            else:
                m = self.inputs[g].copy()
                arrs, bm = [m, m, tmp], {"in": (0, 0, L), "out": (0, 0, L), "tmp": (2, 0, r.tmp_chunks)}
            self.arrays.append(arrs)
            self.bufmap.append(bm)
        self.pc = [0] * N
        self.hop = [0] * N
        self.outstanding: list[list[dict]] = [[] for _ in range(N)]
        self.posted: dict[tuple, dict] = {}          # (src, dst, tag, kind) -> op waiting for its partner
        self.max_hop = 0
        self.messages = 0
        self.error: Finding | None = None
        self.last_write: dict[tuple[int, int, int], int] = {}

    def _fail(self, kind, msg, r, i):
        self.error = Finding(kind, msg, gpu=r, step=i)
        raise _Stop

    def _region(self, r, buf, off, cnt):
        arr, base, size = self.bufmap[r][buf]
        return arr, base + off, base + off + cnt

    def _conflict(self, r, i, region, writing: bool, what: str):
        arr, lo, hi = region
        for op in self.outstanding[r]:
            if op["done_sync"]:
                continue
            a2, lo2, hi2 = op["region"]
            if a2 == arr and lo < hi2 and lo2 < hi and (writing or op["kind"] == "recv"):
                self._fail("race", f"rank {r} instruction {i} {what} a region that the {op['kind']} posted at "
                                   f"instruction {op['i']} has in flight (missing sync?)", r, i)

    def _transfer(self, snd: dict, rcv: dict):
        sa, slo, shi = snd["region"]
        ra, rlo, rhi = rcv["region"]
        data = self.arrays[snd["rank"]][sa][slo:shi].copy()
        self.arrays[rcv["rank"]][ra][rlo:rhi] = data
        for x in range(rlo, rhi):
            self.last_write[(rcv["rank"], ra, x)] = rcv["i"]
        rcv["hop"] = snd["hop"] + 1
        snd["matched"] = rcv["matched"] = True
        self.messages += 1

    def _step(self, r: int) -> bool:
        rank = self.p.ranks[r]
        i = self.pc[r]
        ins = rank.instr[i]
        a = ins.a
        if ins.op == "sync":
            if not all(op["matched"] for op in self.outstanding[r]):
                return False
            for op in self.outstanding[r]:
                if op["kind"] == "recv":
                    self.hop[r] = max(self.hop[r], op["hop"])
                    self.max_hop = max(self.max_hop, op["hop"])
            self.outstanding[r] = []
        elif ins.op in ("send", "recv"):
            region = self._region(r, a["buf"], a["off"], a["cnt"])
            self._conflict(r, i, region, ins.op == "recv", "receives into" if ins.op == "recv" else "sends from")
            op = {"kind": ins.op, "rank": r, "i": i, "region": region, "matched": False, "done_sync": False,
                  "hop": self.hop[r]}
            self.outstanding[r].append(op)
            key = (r, a["peer"], a["tag"]) if ins.op == "send" else (a["peer"], r, a["tag"])
            other = self.posted.pop(key, None)
            if other is None:
                self.posted[key] = op
            elif ins.op == "send":
                self._transfer(op, other)
            else:
                self._transfer(other, op)
        else:
            cnt = a["cnt"]
            src = self._region(r, a["srcbuf"], a["srcoff"], cnt)
            dst = self._region(r, a["dstbuf"], a["dstoff"], cnt)
            self._conflict(r, i, src, False, "reads")
            srcs = [src]
            if ins.op == "reduce":
                accr = self._region(r, a["accbuf"], a["accoff"], cnt) if "accbuf" in a else dst
                self._conflict(r, i, accr, False, "reads")
                srcs.append(accr)
            self._conflict(r, i, dst, True, "writes")
            vals = sum(self.arrays[r][x[0]][x[1]:x[2]].copy() for x in srcs)
            self.arrays[r][dst[0]][dst[1]:dst[2]] = vals
            for x in range(dst[1], dst[2]):
                self.last_write[(r, dst[0], x)] = i
        self.pc[r] = i + 1
        return True

    def run(self) -> Finding | None:
        N = self.p.nranks
        try:
            while True:
                progress = False
                for r in range(N):
                    n = len(self.p.ranks[r].instr)
                    while self.pc[r] < n and self._step(r):
                        progress = True
                left = [r for r in range(N) if self.pc[r] < len(self.p.ranks[r].instr)]
                if not left:
                    break
                if not progress:
                    parts = []
                    for r in left[:4]:
                        waiting = [op for op in self.outstanding[r] if not op["matched"]]
                        what = ", ".join(f"{op['kind']} of instruction {op['i']}" for op in waiting[:3])
                        parts.append(f"rank {r} instruction {self.pc[r]} (sync) waits for {what}")
                    self.error = Finding("deadlock", f"deadlock: {len(left)} ranks cannot progress; " + "; ".join(parts),
                                         gpu=left[0], step=self.pc[left[0]])
                    return self.error
            return self._check_result()
        except _Stop:
            return self.error

    def _check_result(self) -> Finding | None:
        N = self.p.nranks
        expect = expected_outputs(self.p.coll, self.inputs, self.nat_out)
        for r in range(N):
            arr, base, size = self.bufmap[r]["out"]
            got = self.arrays[r][arr][base:base + size]
            bad = np.flatnonzero(got != expect[r])
            if bad.size:
                k = int(bad[0])
                w = self.last_write.get((r, arr, base + k))
                by = f"; last written by instruction {w}" if w is not None else "; it was never written"
                self.error = Finding("result", f"rank {r} output chunk {k} holds "
                                               f"{'uninitialised data' if got[k] < 0 else 'a wrong value'}{by}",
                                     gpu=r, step=w)
                return self.error
        return None


def check_oneccl(text: str, *, simulate: bool = True, seed: int = 0) -> CheckReport:
    p, E = parse_oneccl(text)
    rep = CheckReport(False, "oneccl", errors=E)
    if p is None:
        return rep
    rep.collective, rep.ngpus, rep.chunks_per_loop = p.coll, p.nranks, p.nchunks
    rep.instructions = sum(len(r.instr) for r in p.ranks)
    rep.steps = max((len(r.instr) for r in p.ranks), default=0)
    if not E:
        E.extend(validate(p))
    if E:
        return rep
    if simulate:
        sim = Simulator(p, inplace=bool(p.inplace), seed=seed)
        err = sim.run()
        rep.simulated.append("in-place" if p.inplace else "out-of-place")
        if err is not None:
            E.append(err)
        else:
            rep.comm_steps, rep.messages = sim.max_hop, sim.messages
    rep.ok = not E
    return rep
