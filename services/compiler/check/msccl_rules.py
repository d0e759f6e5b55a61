"""The MSCCL checker's rules on a parsed file (services.compiler.check.msccl_parse.Algo), element by element,
every finding worded (the same rules on integer columns, for files of millions of steps:
services.compiler.check.msccl_columns).

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
"""
from __future__ import annotations

from ..errors import Finding
from ..runtimes import RuntimeProfile
from .msccl_columns import READS_SRC, WRITES_DST, cnt0_warning, declares_warning, hasdep_warning, max_chan_warning
from .msccl_columns import too_many_channels
from .msccl_parse import BUFS, RECV, SEND, Algo, Gpu, Tb, natural_sizes

__all__ = ["validate"]


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
