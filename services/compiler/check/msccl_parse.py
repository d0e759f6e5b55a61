"""Reading MSCCL XML for the checker (services.compiler.check.msccl): the element reader (`parse_msccl`, after the
runtimes' tokenizer, services.compiler.check.tokenizer) and the column reader (`parse_columns`, a file the byte
scanner services.compiler.check.scan read), both into an `Algo` of `Gpu`s, `Tb`s and steps, and the buffers
the file's collective defines (`natural_sizes`, `expected_outputs`).

1. Tokens (every runtime): the NCCL tokenizer's rules (services.compiler.check.tokenizer): no XML declaration,
   no tabs or text between elements, double-quoted values, one element per line, names and values within
   the parser's buffers; attributes past the 16th are ignored as the runtime ignores them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import Finding
from ..msccl.ir import XmlStep
from ..runtimes import PROFILES, RECV_TYPES, SEND_TYPES, RuntimeProfile, profile_for
from .scan import BUF_NAMES, KIND_NAMES, Columns, scan_columns
from .tokenizer import scan

__all__ = ["Algo", "Gpu", "Tb", "Step", "parse_msccl", "runtime_of", "natural_sizes", "expected_outputs",
           "columns_of", "parse_columns", "gpus_of_columns", "STEP_ATTRS", "SEND", "RECV", "BUFS"]

STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
SEND = SEND_TYPES
RECV = RECV_TYPES
BUFS = ("i", "o", "s")
_HEADER = re.compile(r"<!-- fabricplan [^\n]*?runtime=(\w+)")

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


def runtime_of(text: str, root=None) -> str:
    """The runtime a file is meant for when the caller does not say: our header comment names it; otherwise
    coll="reduce_scatter" or a missing outofplace attribute mean microsoft/msccl, anything else the executor."""
    m = _HEADER.search(text[:2000])
    if m and m.group(1) in PROFILES:                       # an MSCCL runtime's name (runtimes.names)
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


def columns_of(text: str | bytes) -> Columns | None:
    if isinstance(text, bytes):
        return scan_columns(text)
    try:
        return scan_columns(text.encode("utf-8"))
    except UnicodeEncodeError:              # lone surrogates: the element reader words it
        return None


def parse_columns(text: str | bytes, c: Columns, runtime, **overrides
                   ) -> tuple[Algo | None, RuntimeProfile, list[Finding], list[Finding]]:
    """parse_msccl for a file the scanner read (services.compiler.check.scan): the same algo, profile and findings,
    with algo.gpus None (the elements are built only when needed: `gpus_of_columns`)."""
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


def gpus_of_columns(c: Columns) -> list[Gpu]:
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
