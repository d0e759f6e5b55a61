"""Validator and CPU simulator for ANY MSCCL XML, against the profile of the runtime that will load it
(services.compiler.runtimes; in the style of dromniscience/MSCCL-XML-Verifier).

1. Tokens (every runtime): the NCCL tokenizer's rules (services.compiler.check.tokenizer): no XML declaration,
   no tabs or text between elements, double-quoted values, one element per line, names and values within
   the parser's buffers; attributes past the 16th are ignored as the runtime ignores them.
2. What the runtime's parser requires and rejects, field by field from the profile: the <algo> attributes
   it reads, the collective spelling, proto, the size window (a file whose minBytes/maxBytes select no
   size never runs: e.g. maxBytes="0" on microsoft/msccl), i_chunks/o_chunks against nchunksperloop
   (microsoft/msccl), tb ids below MSCCL_MAX_NUM_THREAD_BLOCKS and dense from 0, peers, channels below
   MAXCHANNELS, step index below MSCCL_MAX_NUM_STEPS (nops included), known step types, cnt below
   MSCCL_MAX_COUNT (and at least 1 for a send or receive on microsoft/msccl), hasdep in {0, 1}, a send
   step needs a send peer and a receive step a receive peer, offsets within the buffers and int16, depid
   within int8 (and deps within int16), tbs per channel, parser nodes per rank (MAX_NODES) and children
   per element (MAX_SUBS), the rule that nop dependencies end at a step with its own dependency, and that
   consecutive `re` steps the runtime fuses share one cnt.
3. What makes a file run correctly (our rules, not a parser's): steps numbered 0..n-1 (dependencies name
   positions); every dependency names an earlier-published step (a step other than a nop with hasdep=1,
   since the runtime publishes only those; a nop without a dependency shifts the numbers it publishes);
   buffer ranges [off, off+cnt) inside the collective's buffers; one sending and one receiving tb per
   (sender, receiver, channel), the k-th send on a connection matched by the k-th receive with the same cnt.
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
import re
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .deadlock import deadlock_of_columns, deadlock_of_file
from ..errors import CheckReport, Finding
from ..msccl.program import XmlStep
from .msccl_columns import (READS_SRC, WRITES_DST, too_many_channels, cnt0_warning, declares_warning,
                            hasdep_warning, max_chan_warning, validate_columns)
from .tokenizer import scan
from ..runtimes import RECV_TYPES, SEND_TYPES, RuntimeProfile, profile_for
from .scan import BUF_NAMES, KIND_NAMES, Columns, scan_columns

__all__ = ["check_msccl", "parse_msccl", "validate", "Simulator", "natural_sizes", "expected_outputs",
           "runtime_of", "simulable", "simulation_bytes", "SIMULATE_MAX_STEPS", "SIMULATE_MAX_BYTES"]

SIMULATE_MAX_STEPS = 200_000         # simulate fitted programs up to this many XML steps
SIMULATE_MAX_BYTES = 512 << 20       # ... and up to this much memory for the simulator's vector clocks


def simulation_bytes(threadblocks: int, published: int) -> int:
    """Memory of the simulator's vector clocks (msccl_check.Simulator): one int32 per thread block of the
    file in a T x T matrix and in a copy kept for every published (hasdep) step; the simulator's peak is
    about 1.4 times this (e.g. 1024 ranks x 8 tbs with 70k published steps: 2.5 GB, which no longer fits a
    compile's 2 GiB; the program is then fitted without simulating it, as for SIMULATE_MAX_STEPS)."""
    return 4 * threadblocks * (threadblocks + published)


def simulable(xml_steps: int, threadblocks: int, published: int, max_steps: int = SIMULATE_MAX_STEPS) -> bool:
    """Whether a program is small enough to simulate (at most `max_steps` XML steps, and the simulator's
    memory)."""
    return xml_steps <= max_steps and simulation_bytes(threadblocks, published) <= SIMULATE_MAX_BYTES


STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
SEND = SEND_TYPES
RECV = RECV_TYPES
BUFS = ("i", "o", "s")
SIMULATED = ("allgather", "reducescatter", "allreduce", "alltoall")
_HEADER = re.compile(r"<!-- fabricplan [^\n]*?runtime=(\w+)")


class _Stop(Exception):
    pass


Step = XmlStep          # one <step> element, the same record the compiler emits


@dataclass
class Tb:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[Step] = field(default_factory=list)


@dataclass
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list[Tb] = field(default_factory=list)
    parser_nodes: int = 0          # tb and step elements the runtime parses for this rank


@dataclass
class Algo:
    attrs: dict
    ngpus: int
    nchunksperloop: int
    nchannels: int
    coll: str                  # ours: allgather | reducescatter | allreduce | alltoall | ... (raw if unknown)
    coll_raw: str
    proto: str
    inplace: int
    outofplace: int | None
    gpus: list[Gpu]
    min_bytes: int = 0
    max_bytes: int | None = None


# ---------------------------------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------------------------------
def runtime_of(text: str, root=None) -> str:
    """The runtime a file is meant for when the caller does not say: our header comment names it; otherwise
    coll="reduce_scatter" or a missing outofplace attribute mean microsoft/msccl, anything else the executor."""
    m = _HEADER.search(text[:2000])
    if m and m.group(1) in ("executor", "rccl", "legacy"):
        return m.group(1)
    if root is not None and (root.get("coll") == "reduce_scatter" or root.get("outofplace") is None):
        return "legacy"
    return "executor"


def _int(el, name: str, where: str, errors: list[Finding], loc: dict, default=None):
    raw = el.get(name)
    if raw is None:
        if default is not None:
            return default
        errors.append(Finding("structure", f"{where}: missing attribute {name!r}", **loc))
        return None
    try:
        return int(raw, 0) if raw[:2].lower() == "0x" else int(raw)
    except ValueError:
        errors.append(Finding("structure", f"{where}: attribute {name}={raw!r} is not an integer", **loc))
        return None


def _algo_of(root, profile: RuntimeProfile, errors: list[Finding]) -> Algo | None:
    """The <algo> element's attributes as the runtime reads them (an Algo without gpus), or None when one it
    needs is missing or not an integer; appends what is wrong to `errors`."""
    for a in profile.algo_required:
        if root.get(a) is None:
            errors.append(Finding("structure", f"<algo> lacks the attribute {a!r}, which the {profile.name} "
                                               f"runtime requires"))
    loc: dict = {}
    ngpus = _int(root, "ngpus", "<algo>", errors, loc)
    ncpl = _int(root, "nchunksperloop", "<algo>", errors, loc)
    nch = _int(root, "nchannels", "<algo>", errors, loc)
    inplace = _int(root, "inplace", "<algo>", errors, loc, default=0)
    outofplace = _int(root, "outofplace", "<algo>", errors, loc, default=-1) if profile.reads_outofplace else -1
    min_bytes = _int(root, "minBytes", "<algo>", errors, loc, default=0)
    max_bytes = _int(root, "maxBytes", "<algo>", errors, loc, default=-(1 << 62))
    max_bytes = None if max_bytes == -(1 << 62) else max_bytes
    proto = root.get("proto", "")
    if proto not in ("Simple", "LL", "LL128"):
        errors.append(Finding("structure", f"<algo> proto={proto!r}; expected Simple, LL or LL128"))
    coll_raw = root.get("coll", "")
    coll = profile.collective_of(coll_raw)
    if coll is None and coll_raw:
        other = {"reduce_scatter": "reducescatter", "reducescatter": "reduce_scatter"}.get(coll_raw)
        hint = f"; it spells reduce-scatter {profile.reducescatter!r}" if other else ""
        errors.append(Finding("structure", f"coll={coll_raw!r} is not a collective the {profile.name} runtime "
                                           f"knows{hint}"))
    if None in (ngpus, ncpl, nch, inplace, min_bytes):
        return None
    for name, val, lo in (("ngpus", ngpus, 1), ("nchunksperloop", ncpl, 1), ("nchannels", nch, 1)):
        if val < lo:
            errors.append(Finding("structure", f"<algo> {name}={val} must be at least {lo}"))
    if inplace not in (0, 1) or outofplace not in (-1, 0, 1):
        errors.append(Finding("structure", "<algo> inplace/outofplace must be 0 or 1"))
    if "nthreads" in root.attrib and profile.name == "legacy":
        nt = _int(root, "nthreads", "<algo>", errors, loc)
        if nt is not None and nt % 32:
            errors.append(Finding("structure", f"<algo> nthreads={nt} must be a multiple of 32"))
    why = profile.window_problem(min_bytes, max_bytes)
    if why:
        errors.append(Finding("selection", f"{why} (minBytes={min_bytes}, maxBytes={max_bytes}); the file parses "
                                           f"but never runs"))
    return Algo(dict(root.attrib), ngpus, ncpl, nch, coll or coll_raw, coll_raw, proto, inplace,
                None if outofplace == -1 else outofplace, [], min_bytes, max_bytes)


def parse_msccl(text: str, runtime: str | RuntimeProfile | None = None, **overrides
                ) -> tuple[Algo | None, RuntimeProfile, list[Finding], list[Finding]]:
    """Parse MSCCL XML as the runtime's tokenizer does; returns (algo or None, profile, errors, warnings)."""
    errors: list[Finding] = []
    warnings: list[Finding] = []
    doc, lex = scan(text)
    root = None
    if doc is not None:
        root = next((el for el in doc if el.tag == "algo"), None)
        first = next(iter(doc), None)
    profile = profile_for(runtime or runtime_of(text, root)).with_overrides(**overrides)
    if lex:
        return None, profile, lex, warnings
    if root is None:
        found = f"<{first.tag}>" if first is not None else "nothing"
        return None, profile, [Finding("structure", f"no <algo> element (found {found})")], warnings
    if first is not root and profile.reads_outofplace:
        errors.append(Finding("structure", f"the first element is <{first.tag}>; the {profile.name} runtime reads "
                                           f"the algorithm's attributes from the first element of the file"))
    algo = _algo_of(root, profile, errors)
    if algo is None:
        return None, profile, errors, warnings
    loc: dict = {}
    gpus: list[Gpu] = []
    for gel in root:
        if gel.tag != "gpu":
            warnings.append(Finding("structure", f"the runtime ignores element <{gel.tag}> under <algo>"))
            continue
        gid = _int(gel, "id", "<gpu>", errors, loc)
        if gid is None:
            continue
        gl = {"gpu": gid}
        ic = _int(gel, "i_chunks", f"gpu {gid}", errors, gl)
        oc = _int(gel, "o_chunks", f"gpu {gid}", errors, gl)
        sc = _int(gel, "s_chunks", f"gpu {gid}", errors, gl)
        if None in (ic, oc, sc):
            continue
        if min(ic, oc, sc) < 0:
            errors.append(Finding("structure", f"gpu {gid}: negative buffer size", gpu=gid))
        gpu = Gpu(gid, ic, oc, sc)
        for tel in gel:
            if tel.tag != "tb":
                warnings.append(Finding("structure", f"gpu {gid}: the runtime ignores element <{tel.tag}>", gpu=gid))
                continue
            gpu.parser_nodes += 1
            tid = _int(tel, "id", f"gpu {gid} <tb>", errors, gl)
            if tid is None:
                continue
            tl = {"gpu": gid, "tb": tid}
            snd = _int(tel, "send", f"gpu {gid} tb {tid}", errors, tl)
            rcv = _int(tel, "recv", f"gpu {gid} tb {tid}", errors, tl)
            chan = _int(tel, "chan", f"gpu {gid} tb {tid}", errors, tl)
            if None in (snd, rcv, chan):
                continue
            tb = Tb(tid, snd, rcv, chan)
            for sel in tel:
                if sel.tag != "step":
                    warnings.append(Finding("structure", f"gpu {gid} tb {tid}: the runtime ignores element "
                                                         f"<{sel.tag}>", **tl))
                    continue
                gpu.parser_nodes += 1
                where = {"gpu": gid, "tb": tid, "step": len(tb.steps)}
                if len(sel):
                    errors.append(Finding("structure", f"gpu {gid} tb {tid} step {len(tb.steps)}: a <step> with "
                                                       f"child elements crashes the runtime's parser", **where))
                vals = {}
                for a in STEP_ATTRS:
                    raw = sel.get(a)
                    if raw is None:
                        errors.append(Finding("structure", f"gpu {gid} tb {tid} step {len(tb.steps)}: missing "
                                                           f"attribute {a!r} (all ten are required)", **where))
                        vals = None
                        break
                    vals[a] = raw
                if vals is None:
                    continue
                try:
                    st = Step(int(vals["s"]), vals["type"], vals["srcbuf"], int(vals["srcoff"]), vals["dstbuf"],
                              int(vals["dstoff"]), int(vals["cnt"]), int(vals["depid"]), int(vals["deps"]),
                              int(vals["hasdep"]))
                except ValueError as e:
                    errors.append(Finding("structure", f"gpu {gid} tb {tid} step {len(tb.steps)}: {e}", **where))
                    continue
                tb.steps.append(st)
            gpu.tbs.append(tb)
        gpus.append(gpu)
    algo.gpus = gpus
    return algo, profile, errors, warnings


def natural_sizes(coll: str, ngpus: int, ncpl: int) -> tuple[int, int] | None:
    """(input, output) chunks per loop of one rank for the collective, or None if unknown."""
    if coll == "allgather":
        return (ncpl // ngpus, ncpl) if ncpl % ngpus == 0 else None
    if coll == "reducescatter":
        return (ncpl, ncpl // ngpus) if ncpl % ngpus == 0 else None
    if coll == "allreduce":
        return ncpl, ncpl
    if coll == "alltoall":
        return (ncpl, ncpl) if ncpl % ngpus == 0 else None
    return None


def expected_outputs(coll: str, inputs: np.ndarray, nat_out: int) -> np.ndarray:
    """(ranks, nat_out) values every rank's output must hold, given each rank's input row."""
    N = inputs.shape[0]
    if coll == "allgather":
        return np.broadcast_to(inputs.reshape(-1), (N, nat_out))
    if coll == "reducescatter":
        return inputs.sum(axis=0).reshape(N, nat_out)
    if coll == "alltoall":
        B = nat_out // N
        return inputs.reshape(N, N, B).transpose(1, 0, 2).reshape(N, nat_out)
    return np.broadcast_to(inputs.sum(axis=0), (N, nat_out))


# ---------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------
def validate(algo: Algo, profile: RuntimeProfile) -> tuple[list[Finding], list[Finding]]:
    """Parser rules, limits and structural correctness (sections 2-3 of the module docstring)."""
    E: list[Finding] = []
    W: list[Finding] = []
    P = profile
    N = algo.ngpus
    ids = sorted(g.id for g in algo.gpus)
    if ids != list(range(N)):
        missing = sorted(set(range(N)) - set(ids))
        dup = sorted({i for i in ids if ids.count(i) > 1}) if len(ids) < 5000 else []
        extra = sorted(i for i in set(ids) if not 0 <= i < N)
        E.append(Finding("structure", f"gpu ids must be 0..{N - 1} once each: missing {missing[:8]}, duplicated "
                                      f"{dup[:8]}, out of range {extra[:8]}",
                         gpu=(missing or dup or extra or [None])[0]))
        return E, W
    if N > P.max_children:
        E.append(Finding("limit", f"{N} gpus: <algo> has more than the parser's {P.max_children} children per "
                                  f"element (MAX_SUBS; ranks are capped at {P.max_children})"))
    nat = natural_sizes(algo.coll, N, algo.nchunksperloop)
    if algo.coll in ("allgather", "reducescatter", "alltoall") and nat is None:
        E.append(Finding("structure", f"nchunksperloop={algo.nchunksperloop} is not a multiple of ngpus={N}"))
    if algo.nchannels > P.max_channels:
        (E if P.reads_outofplace else W).append(too_many_channels(algo.nchannels, P))
    max_chan = -1
    for gpu in algo.gpus:
        _gpu_rules(algo, P, gpu, nat, E, W)
        for tb in gpu.tbs:
            max_chan = max(max_chan, tb.chan)
    if max_chan >= 0 and max_chan + 1 < algo.nchannels:
        W.append(max_chan_warning(algo.nchannels, max_chan))
    if not E:
        used = {(g.id, s.depid, s.deps) for g in algo.gpus for tb in g.tbs for s in tb.steps if s.depid >= 0}
        for gpu in algo.gpus:
            for tb in gpu.tbs:
                for i, st in enumerate(tb.steps):
                    if st.hasdep == 1 and (gpu.id, tb.id, i) not in used:
                        W.append(hasdep_warning(gpu.id, tb.id, i))
                        break
        E.extend(_connections(algo))
    return E, W


def _gpu_rules(algo: Algo, P: RuntimeProfile, gpu: Gpu, nat, E: list[Finding], W: list[Finding]) -> None:
    g, N = gpu.id, algo.ngpus
    tids = sorted(tb.id for tb in gpu.tbs)
    if tids != list(range(len(tids))):
        seen = set()
        for i in tids:
            if i in seen:
                E.append(Finding("structure", f"gpu {g}: duplicate thread block id {i}", gpu=g, tb=i))
                return
            seen.add(i)
        hole = next(i for i in range(len(tids) + 1) if i not in seen)
        E.append(Finding("structure", f"gpu {g}: thread block {hole} is missing (ids must be contiguous from 0)",
                         gpu=g, tb=hole))
        return
    gpu.tbs.sort(key=lambda tb: tb.id)
    if len(gpu.tbs) > P.max_tbs:
        E.append(Finding("limit", f"gpu {g} has {len(gpu.tbs)} thread blocks; the {P.name} runtime allows "
                                  f"{P.max_tbs} (MSCCL_MAX_NUM_THREAD_BLOCKS)", gpu=g))
    if len(gpu.tbs) > P.max_children:
        E.append(Finding("limit", f"gpu {g} has {len(gpu.tbs)} thread blocks, more than the parser's "
                                  f"{P.max_children} children per element", gpu=g))
    nodes = 1 + N + gpu.parser_nodes
    if nodes >= P.max_parser_nodes:
        E.append(Finding("limit", f"gpu {g}'s part of the file is {nodes} parser nodes (the algo, {N} gpus, its "
                                  f"thread blocks and steps); the runtime's XML parser is limited to "
                                  f"{P.max_parser_nodes} (MAX_NODES)", gpu=g))
    for bufname, size in (("i_chunks", gpu.i_chunks), ("o_chunks", gpu.o_chunks), ("s_chunks", gpu.s_chunks)):
        if size - 1 > P.max_offset:
            E.append(Finding("limit", f"gpu {g}: {bufname}={size} needs offsets beyond the runtime's 16-bit "
                                      f"maximum {P.max_offset}", gpu=g))
    if P.io_chunks_checked:
        mult_in = N if algo.coll == "allgather" else 1
        mult_out = N if algo.coll == "reducescatter" else 1
        if (gpu.i_chunks > 0 and gpu.i_chunks * mult_in != algo.nchunksperloop) or \
                (gpu.o_chunks > 0 and gpu.o_chunks * mult_out != algo.nchunksperloop):
            E.append(Finding("structure", f"gpu {g}: i_chunks/o_chunks ({gpu.i_chunks}/{gpu.o_chunks}) disagree with "
                                          f"nchunksperloop={algo.nchunksperloop} for {algo.coll_raw}; the {P.name} "
                                          f"runtime rejects the file", gpu=g))
    if nat is not None and (gpu.i_chunks > nat[0] or gpu.o_chunks > nat[1]):
        W.append(declares_warning(g, gpu.i_chunks, gpu.o_chunks, algo.coll, algo.nchunksperloop, nat))
    per_chan: dict[tuple[str, int], int] = {}
    sizes = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
    for tb in gpu.tbs:
        loc = {"gpu": g, "tb": tb.id}
        where = f"gpu {g} tb {tb.id}"
        for peer, what in ((tb.send, "send"), (tb.recv, "recv")):
            if peer == g:
                E.append(Finding("structure", f"{where}: {what} peer {peer} is the gpu itself", **loc))
            elif not -1 <= peer < N:
                E.append(Finding("structure", f"{where}: {what} peer {peer} is not a gpu of 0..{N - 1}", **loc))
            elif peer >= 0:
                per_chan[(what, tb.chan)] = per_chan.get((what, tb.chan), 0) + 1
        if not 0 <= tb.chan < algo.nchannels:
            E.append(Finding("structure", f"{where}: channel {tb.chan} is outside 0..nchannels-1 = "
                                          f"{algo.nchannels - 1}", **loc))
        elif tb.chan >= P.max_channels:
            E.append(Finding("limit", f"{where}: channel {tb.chan}; the {P.name} runtime has {P.max_channels} "
                                      f"channels (MAXCHANNELS)", **loc))
        if len(tb.steps) > P.max_steps:
            E.append(Finding("limit", f"{where} has {len(tb.steps)} steps; the {P.name} runtime allows "
                                      f"{P.max_steps} per thread block (MSCCL_MAX_NUM_STEPS, nops included)", **loc))
        _tb_rules(P, gpu, tb, nat, sizes, E, W)
    for (what, chan), k in per_chan.items():
        if k > P.max_tbs_per_channel:
            E.append(Finding("limit", f"gpu {g}: {k} thread blocks {what} on channel {chan}; the runtime allows "
                                      f"{P.max_tbs_per_channel} (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL)", gpu=g))


def _tb_rules(P: RuntimeProfile, gpu: Gpu, tb: Tb, nat, sizes: dict, E: list[Finding], W: list[Finding]) -> None:
    g = gpu.id
    pending_nop_deps = False
    fuse = None                       # (dstbuf, dstoff, srcbuf, cnt, length) of the `re` chain being fused
    for i, st in enumerate(tb.steps):
        sl = {"gpu": g, "tb": tb.id, "step": i}
        sw = f"gpu {g} tb {tb.id} step {i}"
        if st.s != i:
            E.append(Finding("structure", f"{sw}: has s={st.s}; steps must be numbered 0, 1, 2, ... in order "
                                          f"(dependencies name positions; a step is missing or out of order)", **sl))
            return
        if st.type not in P.step_types:
            E.append(Finding("structure", f"{sw}: step type {st.type!r} is not one the {P.name} runtime executes",
                             **sl))
            continue
        if st.type != "nop" and st.hasdep not in (0, 1):
            E.append(Finding("structure", f"{sw}: hasdep={st.hasdep} must be 0 or 1", **sl))
        if st.type in SEND and tb.send < 0:
            E.append(Finding("structure", f"{sw}: a {st.type!r} step sends but the thread block has no send peer",
                             **sl))
        if st.type in RECV and tb.recv < 0:
            E.append(Finding("structure", f"{sw}: a {st.type!r} step receives but the thread block has no recv "
                                          f"peer", **sl))
        if st.type != "nop":
            if not 0 <= st.cnt < P.max_count:
                E.append(Finding("limit", f"{sw}: cnt={st.cnt}; the runtime needs 0 <= cnt < {P.max_count} "
                                          f"(MSCCL_MAX_COUNT)", **sl))
            elif st.cnt < P.comm_count_min and (st.type in SEND or st.type in RECV):
                E.append(Finding("limit", f"{sw}: cnt={st.cnt}; the {P.name} runtime needs cnt >= "
                                          f"{P.comm_count_min} for a step that sends or receives", **sl))
            elif st.cnt == 0:
                W.append(cnt0_warning(g, tb.id, i))
        for used, bname, off in ((st.type in READS_SRC, st.srcbuf, st.srcoff),
                                 (st.type in WRITES_DST, st.dstbuf, st.dstoff)):
            if not used:
                continue
            if bname not in BUFS:
                E.append(Finding("structure", f"{sw}: buffer {bname!r} is not i, o or s", **sl))
                continue
            size = sizes[bname]
            real = size if nat is None or bname == "s" else min(size, nat[0] if bname == "i" else nat[1])
            if off < 0 or off + st.cnt > size:
                E.append(Finding("bounds", f"{sw}: {bname}[{off}:{off + st.cnt}] is outside the declared "
                                           f"{bname}_chunks={size}", **sl))
            elif off + st.cnt > real:
                E.append(Finding("bounds", f"{sw}: {bname}[{off}:{off + st.cnt}] is beyond the collective's "
                                           f"{ {'i': 'input', 'o': 'output'}[bname]} of {real} chunks per rank", **sl))
            elif off > P.max_offset:
                E.append(Finding("limit", f"{sw}: offset {off} does not fit the runtime's int16", **sl))
        # the runtime fuses consecutive `re` steps with the same destination into one transmission that
        # uses the last one's cnt (parser.cc:558-566, 636-643)
        if st.type == "re":
            key = (st.dstbuf, st.dstoff, st.srcbuf)
            if fuse is not None and fuse[0] == key and st.depid == -1:
                if st.cnt != fuse[1]:
                    E.append(Finding("structure", f"{sw}: an `re` step the runtime fuses with the one before it "
                                                  f"(same destination) must have the same cnt ({fuse[1]})", **sl))
                fuse = None if (st.hasdep or fuse[2] + 1 == P.max_reduce_fusion) else (key, st.cnt, fuse[2] + 1)
            else:
                fuse = None if (st.hasdep or P.max_reduce_fusion == 1) else (key, st.cnt, 1)
        elif st.type != "nop":
            fuse = None
        if st.depid == -1 and st.deps == -1:
            if st.type == "nop":
                E.append(Finding("structure", f"{sw}: a nop without a dependency does nothing, and the runtime "
                                              f"does not count it, so later steps publish shifted indices", **sl))
            elif pending_nop_deps and P.chain_rule:
                E.append(Finding("structure", f"{sw}: preceded by nop dependencies but has none itself; the "
                                              f"{P.name} runtime requires the step after nops to carry a "
                                              f"dependency", **sl))
            if st.type != "nop":
                pending_nop_deps = False
            continue
        pending_nop_deps = st.type == "nop"
        if not 0 <= st.depid < len(gpu.tbs) or st.depid == tb.id:
            E.append(Finding("structure", f"{sw}: depid={st.depid} does not name another thread block of gpu {g}",
                             **sl))
            continue
        if st.depid > P.max_dep_tb:
            E.append(Finding("limit", f"{sw}: depid={st.depid}; the runtime stores it as int8 (max "
                                      f"{P.max_dep_tb})", **sl))
        other = gpu.tbs[st.depid]
        if not 0 <= st.deps < len(other.steps):
            E.append(Finding("structure", f"{sw}: depends on tb {st.depid} step {st.deps}, which does not exist "
                                          f"(tb {st.depid} has {len(other.steps)} steps)", **sl))
            continue
        target = other.steps[st.deps]
        if target.type == "nop" or target.hasdep != 1:
            what = "a nop, which never publishes" if target.type == "nop" else "hasdep=0"
            E.append(Finding("structure", f"{sw}: depends on tb {st.depid} step {st.deps}, which has {what}; the "
                                          f"runtime only publishes the completion of steps with hasdep=1, so this "
                                          f"step may wait forever", **sl))


def _connections(algo: Algo) -> list[Finding]:
    """One sender and one receiver tb per (sender, receiver, channel); sends and receives matched in order."""
    E: list[Finding] = []
    senders: dict[tuple[int, int, int], Tb] = {}
    receivers: dict[tuple[int, int, int], Tb] = {}
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            if tb.send >= 0:
                key = (gpu.id, tb.send, tb.chan)
                if key in senders:
                    E.append(Finding("mismatch", f"gpu {gpu.id}: thread blocks {senders[key].id} and {tb.id} both send "
                                                 f"to gpu {tb.send} on channel {tb.chan} (they would share one "
                                                 f"connection)", gpu=gpu.id, tb=tb.id))
                senders[key] = tb
            if tb.recv >= 0:
                key = (tb.recv, gpu.id, tb.chan)
                if key in receivers:
                    E.append(Finding("mismatch", f"gpu {gpu.id}: thread blocks {receivers[key].id} and {tb.id} both "
                                                 f"receive from gpu {tb.recv} on channel {tb.chan}", gpu=gpu.id, tb=tb.id))
                receivers[key] = tb
    if E:
        return E
    for key in sorted(set(senders) | set(receivers)):
        src, dst, chan = key
        stb, rtb = senders.get(key), receivers.get(key)
        sends = [(i, st) for i, st in enumerate(stb.steps) if st.type in SEND] if stb else []
        recvs = [(i, st) for i, st in enumerate(rtb.steps) if st.type in RECV] if rtb else []
        for k in range(min(len(sends), len(recvs))):
            (i, a), (j, b) = sends[k], recvs[k]
            if a.cnt != b.cnt:
                E.append(Finding("mismatch", f"gpu {src} tb {stb.id} step {i} sends {a.cnt} chunks to gpu {dst} on "
                                             f"channel {chan}, but the matching receive, gpu {dst} tb {rtb.id} step {j}, "
                                             f"expects {b.cnt}", gpu=src, tb=stb.id, step=i))
                return E
        if len(sends) > len(recvs):
            i = sends[len(recvs)][0]
            E.append(Finding("mismatch", f"gpu {src} tb {stb.id} step {i} sends to gpu {dst} on channel {chan} but gpu "
                                         f"{dst} has no matching receive ({len(sends)} sends, {len(recvs)} receives on "
                                         f"this connection)", gpu=src, tb=stb.id, step=i))
        elif len(recvs) > len(sends):
            j = recvs[len(sends)][0]
            E.append(Finding("mismatch", f"gpu {dst} tb {rtb.id} step {j} receives from gpu {src} on channel {chan} "
                                         f"but gpu {src} has no matching send ({len(sends)} sends, {len(recvs)} receives "
                                         f"on this connection)", gpu=dst, tb=rtb.id, step=j))
    return E


# ---------------------------------------------------------------------------------------------------
# simulation
# ---------------------------------------------------------------------------------------------------
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


def _columns_of(text: str | bytes) -> Columns | None:
    if isinstance(text, bytes):
        return scan_columns(text)
    try:
        return scan_columns(text.encode("utf-8"))
    except UnicodeEncodeError:              # lone surrogates: the element reader words it
        return None


def _parse_columns(text: str | bytes, c: Columns, runtime, **overrides
                   ) -> tuple[Algo | None, RuntimeProfile, list[Finding], list[Finding]]:
    """parse_msccl for a file the scanner read (services.compiler.check.scan): the same algo, profile and findings,
    with algo.gpus None (the elements are built only when needed: `_gpus_of_columns`)."""
    errors: list[Finding] = []
    head = text[:2000] if isinstance(text, str) else text[:2000].decode("utf-8", errors="replace")
    profile = profile_for(runtime or runtime_of(head, c.algo)).with_overrides(**overrides)
    algo = _algo_of(c.algo, profile, errors)
    if algo is None:
        return None, profile, errors, []
    algo.gpus = None
    for gid in c.gpus[(c.gpus[:, 1:] < 0).any(axis=1), 0].tolist():
        errors.append(Finding("structure", f"gpu {gid}: negative buffer size", gpu=gid))
    return algo, profile, errors, []


def _gpus_of_columns(c: Columns) -> list[Gpu]:
    """The gpus, thread blocks and steps of a scanned file as the element reader builds them."""
    steps, tbs, gpus = list(zip(*c.steps.tolist())), c.tbs.tolist(), []
    for g, (gid, ic, oc, sc) in enumerate(c.gpus.tolist()):
        gpu = Gpu(gid, ic, oc, sc)
        for t in range(int(c.gpu_tb[g]), int(c.gpu_tb[g + 1])):
            tb = Tb(*tbs[t])
            tb.steps = [Step(s, KIND_NAMES[k], BUF_NAMES[sb], so, BUF_NAMES[db], do, n, di, ds, hd)
                        for s, k, sb, so, db, do, n, di, ds, hd in steps[c.tb_step[t]:c.tb_step[t + 1]]]
            gpu.tbs.append(tb)
            gpu.parser_nodes += 1 + len(tb.steps)
        gpus.append(gpu)
    return gpus


def check_msccl(text: str | bytes, *, runtime: str | RuntimeProfile | None = None, dialect: str | None = None,
                simulate: bool = True, fifo: int | None = None, seed: int = 0,
                simulate_max_steps: int = SIMULATE_MAX_STEPS, scanner: bool = True,
                **limit_overrides) -> CheckReport:
    """Validate and simulate MSCCL XML text for a runtime; see the module docstring. A file too large to
    simulate (`simulable`: more than `simulate_max_steps` steps, or vector clocks above SIMULATE_MAX_BYTES) is
    not simulated: its deadlock freedom is proved instead (services.compiler.check.deadlock, linear in its steps),
    and a warning says so.

    A file in the canonical form (services.compiler.check.scan) is read into integer columns by a compiled
    scanner and validated on them (services.compiler.check.msccl_columns), in seconds for millions of steps; a file
    not in that form, or one the column rules do not accept, is read and validated element by element, which
    words every problem. Both give the same report (`scanner=False` takes the element path only: the reference
    the tests compare with). `text` may be the file's bytes (UTF-8), which spares the scanner a copy."""
    cols = _columns_of(text) if scanner else None
    if cols is None:
        text = text.decode("utf-8") if isinstance(text, bytes) else text
        algo, profile, errors, warnings = parse_msccl(text, runtime or dialect, **limit_overrides)
    else:
        algo, profile, errors, warnings = _parse_columns(text, cols, runtime or dialect, **limit_overrides)
    rep = CheckReport(False, "msccl", dialect=profile.name, errors=errors, warnings=warnings)
    if algo is None:
        return rep
    rep.collective, rep.ngpus, rep.chunks_per_loop = algo.coll, algo.ngpus, algo.nchunksperloop
    nat = natural_sizes(algo.coll, algo.ngpus, algo.nchunksperloop)
    accepted = None                     # the column rules' warnings when they find no error
    if cols is not None and not errors:
        accepted = validate_columns(cols, algo.coll, algo.ngpus, algo.nchunksperloop, algo.nchannels, nat, profile)
    if cols is not None and accepted is None and not errors:
        algo.gpus = _gpus_of_columns(cols)              # validate words what the column rules found
    if not errors:
        e, w = validate(algo, profile) if accepted is None else ([], accepted)
        errors.extend(e)
        warnings.extend(w)
    if algo.gpus is None:
        per_tb = np.diff(cols.tb_step)
        rep.steps = int(per_tb.max(initial=0))
        rep.threadblocks = int(np.diff(cols.gpu_tb).max(initial=0))
        rep.xml_steps = int(per_tb.sum())
        threadblocks, published = cols.tbs.shape[0], int((cols.steps[9] == 1).sum())
    else:
        rep.steps = max((len(tb.steps) for g in algo.gpus for tb in g.tbs), default=0)
        rep.threadblocks = max((len(g.tbs) for g in algo.gpus), default=0)
        rep.xml_steps = sum(len(tb.steps) for g in algo.gpus for tb in g.tbs)
        threadblocks = sum(len(g.tbs) for g in algo.gpus)
        published = sum(st.hasdep == 1 for g in algo.gpus for tb in g.tbs for st in tb.steps)
    if errors:
        return rep
    if simulate:
        if nat is None:
            warnings.append(Finding("structure", f"collective {algo.coll_raw!r} is not simulated (only "
                                                 f"{', '.join(SIMULATED)})"))
        else:
            modes = []
            if algo.outofplace == 1 or (algo.outofplace is None and algo.inplace == 0):
                modes.append(False)
            if algo.inplace == 1:
                modes.append(True)
            if not modes:
                errors.append(Finding("structure", "the algorithm is neither in-place nor out-of-place"))
            depth = profile.fifo_messages(algo.proto) if fifo is None else fifo
            if modes and not simulable(rep.xml_steps, threadblocks, published, simulate_max_steps):
                warnings.append(Finding("structure", f"not simulated: {rep.xml_steps} steps over {threadblocks} "
                                                     f"thread blocks exceed what the simulator takes "
                                                     f"({simulate_max_steps} steps, "
                                                     f"{SIMULATE_MAX_BYTES >> 20} MiB of vector clocks); deadlock "
                                                     f"freedom proved from the waits instead"))
                stuck = (deadlock_of_file(algo, depth) if algo.gpus is not None else
                         deadlock_of_columns(cols, algo.ngpus, depth))
                if stuck is not None:
                    errors.append(stuck)
                modes = []
            if modes and algo.gpus is None:
                algo.gpus = _gpus_of_columns(cols)
            for inplace in modes:
                sim = Simulator(algo, inplace=inplace, fifo=depth, seed=seed)
                err = sim.run()
                rep.simulated.append("in-place" if inplace else "out-of-place")
                if err is not None:
                    err.message = f"{'in-place' if inplace else 'out-of-place'}: {err.message}"
                    errors.append(err)
                    break
                rep.comm_steps = sim.max_hop
                rep.messages = sim.messages
    rep.ok = not errors
    return rep
