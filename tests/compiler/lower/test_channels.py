"""Channel classes (services.compiler.lowering.channels): ring-like schedules keep v mod c; an allgather on a line graph
(shards scattered on its links) is permuted and a reduce-scatter on one (contiguous ranges per link) is cut in
blocks, each spreading a connection's messages over fewer steps per thread block; every classing refines, and
files compiled with each pass the checker and the simulator."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from services.compiler import PROFILES, check_xml, compile_schedule
from services.compiler.lowering.channels import (CHANNEL_COUNTS, PERMUTATION_SEED, ShardChannels, _pairs,
                                        busiest_connection_channel, shard_classes)
from services.compiler.msccl.ir import S, MscclOptions
from services.compiler.msccl.messages import build_messages
from services.compiler.msccl.program import build_program
from services.compiler.text.msccl import to_xml
from services.compiler.check.msccl import check_msccl
from services.synthesis.search.construct import construct_collectives
from services.synthesis.schedule.ir import Collective

PROFILE = PROFILES["executor"]


@lru_cache(maxsize=None)
def built(expr: str):
    return construct_collectives(expr)


def sched(expr: str, c: Collective = Collective.ALLGATHER):
    r = built(expr)[c]
    return r.schedule, r.topology


def classings(n: int) -> dict[str, ShardChannels]:
    perm = np.random.Generator(np.random.PCG64(PERMUTATION_SEED)).permutation(n).astype(np.int64)
    ident = ShardChannels.identity(n)
    return {"dealt": ident, "blocks": ShardChannels(ident.rank, blocks=True, name="blocks"),
            "permuted": ShardChannels(perm, name="permuted")}


def _busiest(schedule, classes: ShardChannels) -> list[int]:
    conn, shard, follows = _pairs(schedule)
    return [busiest_connection_channel(conn, shard, follows, classes, c) for c in CHANNEL_COUNTS]


def _table_steps(s, classes: ShardChannels, channels: int) -> int:
    opt = MscclOptions(channels=channels, mode="both", combined=False, fuse=False, consolidate=False)
    return build_messages(s, PROFILE, opt, classes).lower_bounds(opt, per_gpu=False)["steps_per_tb"]


@pytest.mark.parametrize("expr", ["ring(8)", "ring(12)", "torus(4, 4)", "circulant(16, 1, 4)"])
def test_ring_like_schedules_keep_shard_order(expr):
    """Where a link carries consecutive shards over the steps, v mod c is already even: it is kept."""
    for c in (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE):
        assert shard_classes(sched(expr, c)[0]).name == "dealt"


def test_line_graph_allgather_is_spread():
    """An allgather on a line graph receives shards that share residues: shard order leaves channels idle, the
    chosen classing spreads the busiest connection-channel, and the built table's fullest connection carries
    fewer messages than in shard order."""
    s, _ = sched("line(circulant(16, 1, 4), 2)")
    chosen, ways = shard_classes(s), classings(s.nodes)
    assert chosen.name != "dealt"
    assert sum(_busiest(s, chosen)) < sum(_busiest(s, ways["dealt"]))
    assert _table_steps(s, chosen, 8) < _table_steps(s, ways["dealt"], 8)


def test_line_graph_reduce_scatter_is_cut_in_blocks():
    """A reduce-scatter on a line graph sends contiguous ranges of shards: blocks keep each range on one channel,
    so the fullest connection carries fewer messages than dealt out (which cuts every range into shards)."""
    s, _ = sched("line(circulant(16, 1, 4), 2)", Collective.REDUCESCATTER)
    chosen, ways = shard_classes(s), classings(s.nodes)
    assert chosen.name == "blocks"
    for channels in (2, 4):
        assert _table_steps(s, chosen, channels) < _table_steps(s, ways["dealt"], channels)
        assert _table_steps(s, chosen, channels) < _table_steps(s, ways["permuted"], channels)


@pytest.mark.parametrize("n", [5, 16, 24, 64, 1000])
def test_every_classing_refines(n):
    """For c | c', the class at c' determines the class at c (fit's channel-count rule relies on it)."""
    v = np.arange(n)
    for name, way in classings(n).items():
        for c in (1, 2, 4, 8):
            for c2 in (2 * c, 4 * c):
                fine, coarse = way.of(v, c2), way.of(v, c)
                assert fine.max() < c2 and coarse.max() < c
                pairs = np.unique(fine * c + coarse)
                assert pairs.size == np.unique(fine).size, (name, c, c2)


@pytest.mark.parametrize("collective", [Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE])
@pytest.mark.parametrize("expr", ["genkautz(4, 64)", "kautz(2, 3)", "line(circulant(8, 1, 2))", "torus(4, 4)"])
def test_every_classing_compiles_and_simulates(expr, collective):
    """Programs built with each classing (combined and separate tbs, 2 and 3 channels) pass the checker and the
    CPU simulator with the exact result; so does the file the fit search writes with the chosen one."""
    s, topo = sched(expr, collective)
    for name, way in classings(s.nodes).items():
        for channels, combined in ((2, True), (3, False)):
            opt = MscclOptions(channels=channels, mode="out", combined=combined, fuse=combined)
            msgs = build_messages(s, PROFILE, opt, way)
            prog = build_program(s, PROFILE, opt, messages=msgs)
            xml = to_xml(prog, name="t", coll=PROFILE.coll_name(collective.value), proto="Simple", profile=PROFILE,
                         inplace=False, outofplace=True, min_bytes=0, max_bytes=0).decode()
            rep = check_msccl(xml, runtime=PROFILE)
            assert rep.ok or rep.error.kind == "deadlock", (name, channels, rep.error)
    art = compile_schedule(s, topo, runtime="executor", channels=2)
    rep = check_xml(art.xml, "msccl", runtime="executor")
    assert rep.ok and rep.simulated and art.steps == s.steps == rep.comm_steps, rep.error


def test_rccl_allgather_at_1024_ranks_fits():
    """The issue's 1024-host plan: in shard order the busiest allgather connection-channel carried 95 (step,
    shard) pairs at 8 channels and RCCL (64 steps, 64 thread blocks) refused it after 49 candidates; permuted,
    45, within both limits."""
    s, _ = sched("line(circulant(16, 1, 4), 3)")
    at8 = CHANNEL_COUNTS.index(8)
    assert shard_classes(s).name == "permuted"
    dealt = _busiest(s, classings(s.nodes)["dealt"])[at8]
    assert _busiest(s, shard_classes(s))[at8] <= PROFILES["rccl"].max_steps < dealt


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(4, 12), jumps=st.sets(st.integers(1, 11), min_size=2, max_size=3),
       coll=st.sampled_from([Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE]),
       channels=st.sampled_from([2, 3, 4]))
def test_random_line_graphs(n, jumps, coll, channels):
    """Line graphs of random directed circulants (8-36 ranks): the chosen classing scores no worse than any
    other, and the file compiled with it passes the checker and simulator."""
    offsets = sorted({j % n for j in jumps} - {0})
    assume(len(offsets) >= 2)
    try:
        s, topo = sched(f"line(dcirculant({n}, {', '.join(map(str, offsets))}))", coll)
    except ValueError:                 # not strongly connected: no schedule
        assume(False)
    chosen = sum(_busiest(s, shard_classes(s)))
    assert all(chosen <= sum(_busiest(s, way)) for way in classings(s.nodes).values())
    art = compile_schedule(s, topo, runtime="executor", channels=channels)
    rep = check_xml(art.xml, "msccl", runtime="executor")
    assert rep.ok and rep.simulated, rep.error


def _one_channel(s, consolidate: bool):
    opt = MscclOptions(channels=1, mode="out", combined=False, fuse=False, consolidate=consolidate)
    return build_messages(s, PROFILE, opt)


@pytest.mark.parametrize("expr,collective", [("line(circulant(16, 1, 4), 2)", Collective.ALLGATHER),
                                             ("line(circulant(16, 1, 4), 2)", Collective.ALLREDUCE),
                                             ("genkautz(4, 64)", Collective.REDUCESCATTER)])
@pytest.mark.parametrize("consolidate", [False, True])
def test_messages_dealt_over_channels_are_balanced(expr, collective, consolidate):
    """Messages.by_message: the one-channel messages unchanged, a connection's M of them dealt round robin in send
    order (every channel carries floor or ceil of M / c), each receive on its send's channel, and the table's
    steps-per-tb bound exactly ceil(max M / c)."""
    s, _ = sched(expr, collective)
    base = _one_channel(s, consolidate=consolidate)
    ops = base.ops
    s_rows = ops["kind"] == S
    conn = ops["gpu"][s_rows].astype(np.int64) * s.nodes + ops["speer"][s_rows]
    _, m = np.unique(conn, return_counts=True)
    for c in (2, 3, 8):
        dealt = base.by_message(c)
        d = dealt.ops
        assert dealt.messages == base.messages
        for col in ops:
            if col != "chan":
                assert np.array_equal(d[col], ops[col]), col
        assert d["chan"].max() < c and np.all(d["chan"][ops["msg"] < 0] == ops["chan"][ops["msg"] < 0])
        of_msg = np.full(base.messages, -1)
        of_msg[d["msg"][s_rows]] = d["chan"][s_rows]
        has = d["msg"] >= 0
        assert np.array_equal(d["chan"][has], of_msg[d["msg"][has]])          # receives follow their message
        keys, per = np.unique(conn * c + d["chan"][s_rows], return_counts=True)
        total = m[np.searchsorted(np.unique(conn), keys // c)]          # M of each count's connection
        assert np.all((per == total // c) | (per == -(-total // c)))
        opt = MscclOptions(channels=c, combined=False, fuse=False, by_message=True)
        assert dealt.lower_bounds(opt, per_gpu=False)["steps_per_tb"] == -(-int(m.max()) // c)


@pytest.mark.parametrize("collective", [Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE])
@pytest.mark.parametrize("expr", ["genkautz(4, 64)", "kautz(2, 3)", "line(circulant(8, 1, 2))", "torus(4, 4)",
                                  "hypercube(4)"])
def test_programs_with_messages_dealt_run(expr, collective):
    """Programs whose messages are dealt over 2-4 channels (separate and combined tbs, with and without
    consolidation, in, out and both places) pass the checker and the CPU simulator with the exact result;
    with separate tbs they never rely on connection buffering (no deadlock)."""
    s, _ = sched(expr, collective)
    for channels, combined, cons, mode in ((2, False, False, "out"), (3, False, True, "both"), (4, False, False, "in"),
                                           (2, True, False, "both"), (3, True, True, "out")):
        opt = MscclOptions(channels=channels, mode=mode, combined=combined, fuse=combined, consolidate=cons,
                           by_message=True)
        prog = build_program(s, PROFILE, opt, messages=build_messages(s, PROFILE, opt))
        xml = to_xml(prog, name="t", coll=PROFILE.coll_name(collective.value), proto="Simple", profile=PROFILE,
                     inplace=mode != "out", outofplace=mode != "in", min_bytes=0, max_bytes=0).decode()
        rep = check_msccl(xml, runtime=PROFILE)
        assert rep.ok or (combined and rep.error.kind == "deadlock"), (opt.label(), rep.error)


@pytest.mark.parametrize("expr", ["hypercube(3)", "torus(3, 3)", "genkautz(3, 10)"])
def test_alltoall_programs_with_messages_dealt_run(expr):
    """All-to-all messages (each block to its own destination; out of place) dealt over 2 and 3 channels
    simulate to the exact result without relying on connection buffering."""
    from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
    from services.synthesis.topology.catalog import build

    s = alltoall_schedule(build(expr)).schedule
    for channels in (2, 3):
        opt = MscclOptions(channels=channels, mode="out", combined=False, fuse=False, by_message=True)
        prog = build_program(s, PROFILE, opt, messages=build_messages(s, PROFILE, opt))
        xml = to_xml(prog, name="t", coll=PROFILE.coll_name("alltoall"), proto="Simple", profile=PROFILE,
                     inplace=False, outofplace=True, min_bytes=0, max_bytes=0).decode()
        rep = check_msccl(xml, runtime=PROFILE)
        assert rep.ok and rep.simulated, (opt.label(), rep.error)


def test_rccl_allreduce_at_1024_ranks_fits():
    """The issue plan's 1024-rank allreduce was refused by every MSCCL runtime while shards were dealt out in
    order; in blocks (its reduce-scatter phase keeps whole ranges per message) the executor took it at 16
    channels, but on RCCL (64 thread blocks of 64 steps) 16 channels need 128 separate tbs and at 8 the fullest
    send tb needed 65-70 steps (messages cut at class boundaries, plus waits): refused after 81 s. Dealt by
    message, the fullest connection-channel carries 36 messages at 8 channels, and the file fits every runtime's
    limits (RCCL's are the strictest): proved deadlock-free (too large to simulate), tokenizer-clean."""
    from services.compiler.check.tokenizer import lexical_findings

    s, topo = sched("line(circulant(16, 1, 4), 3)", Collective.ALLREDUCE)
    assert shard_classes(s).name == "blocks"
    art = compile_schedule(s, topo, runtime="rccl")
    assert "channel per message" in art.options and "channels=8" in art.options, art.options
    assert art.steps == s.steps and art.lowering == "exact" and art.loss == 0.0
    for p in PROFILES.values():
        assert art.max_tb_steps <= p.max_steps and art.threadblocks <= p.max_tbs and art.nchannels <= p.max_channels
    assert not lexical_findings(art.xml_data)
