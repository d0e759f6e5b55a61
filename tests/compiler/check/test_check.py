"""The XML validator and CPU simulator reject corrupted MSCCL and oneCCL files with the right error (kind,
gpu/rank, thread block, step), accept valid foreign XML, and enforce the runtimes' limits and dialects."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from functools import lru_cache

import pytest

from services.compiler import check_xml, compile_schedule
from services.synthesis.search.construct import construct_collectives
from services.synthesis.schedule.ir import Collective

AG, RS, AR = Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE


@lru_cache(maxsize=None)
def xml_of(expr: str, c: Collective, fmt: str = "msccl", **kw) -> str:
    r = construct_collectives(expr)[c]
    return compile_schedule(r.schedule, r.topology, fmt, **kw).xml


def tree(text: str) -> ET.Element:
    return ET.fromstring(text)


def text(root: ET.Element) -> str:
    return ET.tostring(root, encoding="unicode")


def tbs(root):
    for g in root.findall("gpu"):
        for tb in g.findall("tb"):
            yield int(g.get("id")), tb


def error_of(xml: str, fmt: str = "msccl", **kw):
    rep = check_xml(xml, fmt, **kw)
    assert not rep.ok and rep.errors
    return rep.errors[0]


# ----- MSCCL ------------------------------------------------------------------------------------------
def test_valid_file_passes():
    rep = check_xml(xml_of("torus(4, 4)", AR))
    assert rep.ok and rep.errors == [] and rep.comm_steps == 8 and rep.messages > 0


@pytest.mark.parametrize("c", [AG, RS])
def test_dropped_receive_is_a_mismatch(c):
    root = tree(xml_of("torus(4, 4)", c))
    g, tb = next((g, tb) for g, tb in tbs(root) if tb.get("recv") != "-1" and tb.findall("step")[-1].get("hasdep") == "0")
    last = tb.findall("step")[-1]
    tb.remove(last)
    err = error_of(text(root))
    assert err.kind == "mismatch"
    assert f"gpu {tb.get('recv')}" in err.message and "no matching receive" in err.message
    assert err.gpu == int(tb.get("recv")) and err.tb is not None and err.step is not None


def test_dropped_producer_is_a_dangling_dependency():
    root = tree(xml_of("torus(4, 4)", RS))
    g, tb = next((g, tb) for g, tb in tbs(root) if tb.findall("step")[-1].get("hasdep") == "1")
    tb.remove(tb.findall("step")[-1])
    err = error_of(text(root))
    assert err.kind == "structure" and "does not exist" in err.message and err.gpu == g


def test_dropped_middle_step_breaks_numbering():
    root = tree(xml_of("hypercube(3)", AG))
    g, tb = next((g, tb) for g, tb in tbs(root) if len(tb.findall("step")) >= 3)
    tb.remove(tb.findall("step")[1])
    err = error_of(text(root))
    assert err.kind == "structure" and err.gpu == g and err.tb == int(tb.get("id")) and err.step == 1
    assert "numbered" in err.message


def test_offset_outside_buffer_is_a_bounds_error():
    root = tree(xml_of("bipartite(4)", AG))
    gpu = root.find("gpu")
    g, tb = next((g, tb) for g, tb in tbs(root) if tb.get("recv") != "-1")
    step = tb.findall("step")[0]
    step.set("dstoff", gpu.get("o_chunks"))
    err = error_of(text(root))
    assert err.kind == "bounds" and (err.gpu, err.tb, err.step) == (g, int(tb.get("id")), 0)


def _shift(st, key: str, shard: int, total: int) -> None:
    """Move an input offset by one shard (still inside the input buffer of `total` chunks)."""
    off, cnt = int(st.get(key)), int(st.get("cnt"))
    st.set(key, str(off + shard if off + shard + cnt <= total else off - shard))


def _shift_first_input_read(root, step_type: str, shard: int, total: int) -> None:
    """Move the source offset of the first `step_type` step that reads the input buffer by one shard."""
    for g, tb in tbs(root):
        st = next((s for s in tb.findall("step") if s.get("type") == step_type and s.get("srcbuf") == "i"), None)
        if st is not None:
            _shift(st, "srcoff", shard, total)
            return


def test_wrong_offset_gives_a_wrong_result():
    """A send reading the wrong (never written) input chunk delivers wrong data: the exact sum check fails."""
    root = tree(xml_of("bipartite(4)", AR))                 # 8 gpus x 4 chunks per shard
    _shift_first_input_read(root, "s", 4, 32)
    err = error_of(text(root))
    assert err.kind == "result" and err.gpu is not None
    assert "output chunk" in err.message and "last written by tb" in err.message
    assert "wrong sum" in err.message or "missing" in err.message


def test_wrong_reduce_source_is_explained():
    """A receive-reduce that adds the wrong local partial is caught by the exact sum check."""
    root = tree(xml_of("genkautz(3, 12)", RS))               # 12 gpus x 1 chunk per shard
    _shift_first_input_read(root, "rrc", 1, 12)
    err = error_of(text(root))
    assert err.kind == "result"
    assert "missing gpu" in err.message or "twice" in err.message or "wrong sum" in err.message


@pytest.mark.parametrize("c", [AG, RS, AR])
def test_missing_dependency_is_a_race(c):
    root = tree(xml_of("torus(4, 4)", c))
    for g, tb in tbs(root):
        steps = tb.findall("step")
        hit = next((i for i, s in enumerate(steps) if s.get("type") == "s" and s.get("depid") != "-1"
                    and (i == 0 or steps[i - 1].get("type") != "nop")), None)
        if hit is not None:
            steps[hit].set("depid", "-1")
            steps[hit].set("deps", "-1")
            break
    rep = check_xml(text(root))
    assert not rep.ok
    err = rep.errors[0]
    assert err.kind == "race", err
    assert err.gpu == g and err.tb is not None and err.step is not None
    assert "no dependency ordering them" in err.message


def test_dependency_cycle_is_a_deadlock():
    root = tree(xml_of("circulant(7, 2, 3)", AG))
    gpu = root.find("gpu")
    a, b = gpu.findall("tb")[:2]
    sa, sb = a.find("step"), b.find("step")
    sa.set("depid", b.get("id")), sa.set("deps", "0"), sa.set("hasdep", "1")
    sb.set("depid", a.get("id")), sb.set("deps", "0"), sb.set("hasdep", "1")
    err = error_of(text(root))
    assert err.kind == "deadlock" and err.gpu == 0 and err.tb in (int(a.get("id")), int(b.get("id")))
    assert err.step == 0 and "cannot progress" in err.message


def test_mismatched_counts_are_reported():
    root = tree(xml_of("torus(4, 4)", AG))
    for g, tb in tbs(root):
        st = next((s for s in tb.findall("step") if s.get("type") == "r" and int(s.get("cnt")) >= 2), None)
        if st is not None:
            st.set("cnt", str(int(st.get("cnt")) - 1))
            break
    err = error_of(text(root))
    assert err.kind == "mismatch" and "expects" in err.message and err.gpu == int(tb.get("recv"))


def test_wrong_peer_is_a_mismatch():
    root = tree(xml_of("hypercube(3)", AG))
    g, tb = next((g, tb) for g, tb in tbs(root) if tb.get("recv") != "-1")
    others = {int(t.get("recv")) for _, t in tbs(root) if _ == g and t.get("recv") != "-1"}
    tb.set("recv", str(next(x for x in range(8) if x != g and x not in others)))
    err = error_of(text(root))
    assert err.kind == "mismatch"


def test_hasdep_must_be_set_on_the_producer():
    root = tree(xml_of("torus(4, 4)", AG))
    gpu = root.find("gpu")
    for tb in gpu.findall("tb"):
        st = next((s for s in tb.findall("step") if s.get("depid") != "-1"), None)
        if st is not None:
            producer = gpu.findall("tb")[int(st.get("depid"))].findall("step")[int(st.get("deps"))]
            producer.set("hasdep", "0")
            break
    err = error_of(text(root))
    assert err.kind == "structure" and "hasdep=0" in err.message and err.gpu == 0


def test_dependency_on_missing_step():
    root = tree(xml_of("torus(4, 4)", AG))
    gpu = root.find("gpu")
    st = gpu.find("tb").find("step")
    st.set("depid", "1")
    st.set("deps", "999")
    err = error_of(text(root))
    assert err.kind == "structure" and "does not exist" in err.message and (err.gpu, err.tb, err.step) == (0, 0, 0)


def test_missing_attribute_and_tb_gap():
    root = tree(xml_of("bipartite(4)", AG))
    del root.attrib["minBytes"]
    err = error_of(text(root))
    assert err.kind == "structure" and "minBytes" in err.message
    del root.attrib["maxBytes"]                                 # microsoft/msccl: both optional (128 MiB default)
    assert check_xml(text(root), runtime="legacy").ok
    root = tree(xml_of("bipartite(4)", AG))
    gpu = root.find("gpu")
    gpu.findall("tb")[1].set("id", "99")
    err = error_of(text(root))
    assert err.kind == "structure" and "thread block 1 is missing" in err.message and err.gpu == 0


def test_runtime_limits_in_foreign_xml():
    root = tree(xml_of("torus(4, 4)", AR))
    assert check_xml(text(root)).ok
    err = error_of(text(root), max_steps=4)
    assert err.kind == "limit" and "MSCCL_MAX_NUM_STEPS" in err.message and err.tb is not None
    gpu = root.find("gpu")
    st = next(s for tb in gpu.findall("tb") for s in tb.findall("step") if s.get("type") != "nop")
    st.set("cnt", "72")
    err = error_of(text(root))
    assert err.kind == "limit" and "cnt=72" in err.message


def test_dialect_spelling():
    legacy = xml_of("bipartite(4)", RS, runtime="legacy")
    assert 'coll="reduce_scatter"' in legacy and "outofplace" not in legacy
    rep = check_xml(legacy, runtime="executor")
    assert not rep.ok and any("reducescatter" in e.message for e in rep.errors)
    assert any("outofplace" in e.message for e in rep.errors)
    executor = xml_of("bipartite(4)", RS)
    err = error_of(executor, runtime="legacy")
    assert err.kind == "structure" and "reduce_scatter" in err.message
    assert check_xml(legacy).dialect == "legacy" and check_xml(executor).dialect == "executor"   # header comment


TOKENIZER_CASES = {
    "declaration": lambda x: '<?xml version="1.0"?>\n' + x,
    "tabs": lambda x: x.replace("\n  <gpu", "\n\t<gpu", 1),
    "single quotes": lambda x: x.replace(' proto="Simple"', " proto='Simple'", 1),
    "split attributes": lambda x: x.replace(' proto="Simple"', '\n proto="Simple"', 1),
}


@pytest.mark.parametrize("case", sorted(TOKENIZER_CASES))
@pytest.mark.parametrize("runtime", ["executor", "rccl", "legacy"])
def test_tokenizer_cases_are_refused_for_every_runtime(runtime, case):
    """All three runtimes read MSCCL XML with NCCL's hand-written tokenizer (executor/RCCL msccl_parser.cc:18-209,
    microsoft/msccl src/graph/xml.cc:20-211), which rejects these; so must the checker."""
    good = xml_of("hypercube(3)", AG, runtime=runtime)
    assert check_xml(good, runtime=runtime).ok
    err = error_of(TOKENIZER_CASES[case](good), runtime=runtime)
    assert err.kind == "lexical" and "line" in err.message


def test_tokenizer_accepts_what_nccl_accepts():
    good = xml_of("hypercube(3)", AG)
    assert check_xml("<!-- a comment -->\n" + good).ok                    # comments are skipped
    assert check_xml(good.replace('"/>', '" />')).ok                        # space before />
    err = error_of(good.replace(' proto="Simple"', ' proto = "Simple"', 1))
    assert err.kind == "lexical" and "quote" in err.message


def _ring_allreduce(n: int) -> str:
    """A hand-written ring allreduce in the style of RCCL's all-reduce-ring-simple.xml (s, rrs, rrcs, rcs, r
    on one tb per gpu that both sends and receives)."""
    lines = [f'<algo name="ring" proto="Simple" nchannels="1" nchunksperloop="{n}" ngpus="{n}" coll="allreduce" '
             f'inplace="1" outofplace="1" minBytes="0" maxBytes="0">']
    for r in range(n):
        lines.append(f'<gpu id="{r}" i_chunks="{n}" o_chunks="{n}" s_chunks="0">')
        lines.append(f'<tb id="0" send="{(r + 1) % n}" recv="{(r - 1) % n}" chan="0">')
        steps = [("s", "i", r, "o", -1)]
        for k in range(1, n - 1):
            c = (r - k) % n
            steps.append(("rrs", "i", c, "o", -1))
        c = (r + 1) % n
        steps.append(("rrcs", "i", c, "o", c))
        for k in range(1, n - 1):
            c = (r + 1 - k) % n
            steps.append(("rcs", "i", -1, "o", c))
        c = (r + 2) % n
        steps.append(("r", "i", -1, "o", c))
        for i, (t, sb, so, db, do) in enumerate(steps):
            lines.append(f'<step s="{i}" type="{t}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" cnt="1" '
                         f'depid="-1" deps="-1" hasdep="0"/>')
        lines.append("</tb></gpu>")
    lines.append("</algo>")
    return "\n".join(lines)


def test_foreign_ring_allreduce():
    xml = _ring_allreduce(5)
    rep = check_xml(xml)
    assert rep.ok, rep.error
    assert rep.simulated == ["out-of-place", "in-place"]
    assert rep.comm_steps == 2 * 5 - 2
    # with unbuffered (rendezvous) connections every gpu starts with a send to a gpu that is sending too
    err = error_of(xml, fifo=0)
    assert err.kind == "deadlock"


def test_foreign_ring_with_wrong_order_fails():
    xml = _ring_allreduce(4).replace('type="rrcs"', 'type="rrs"', 1)
    err = error_of(xml)
    assert err.kind in ("result", "bounds", "structure")


def test_not_xml():
    assert error_of("<algo", "msccl").kind == "lexical"
    assert error_of("<oneccl_schedule", "oneccl").kind == "syntax"
    assert error_of("<nope/>", "msccl").kind == "structure"


# ----- oneCCL ------------------------------------------------------------------------------------------
def ranks(root):
    return root.findall("rank")


def test_oneccl_dropped_recv_is_a_mismatch():
    root = tree(xml_of("torus(4, 4)", AG, "oneccl"))
    r0 = ranks(root)[0]
    recv = r0.find("recv")
    r0.remove(recv)
    err = error_of(text(root), "oneccl")
    assert err.kind == "mismatch" and "posts no matching recv" in err.message
    assert err.gpu == int(recv.get("peer"))


def test_oneccl_missing_sync_is_a_race():
    root = tree(xml_of("torus(4, 4)", AG, "oneccl"))
    r0 = ranks(root)[0]
    r0.remove(r0.find("sync"))
    err = error_of(text(root), "oneccl")
    assert err.kind == "race" and err.gpu == 0 and "missing sync" in err.message


def test_oneccl_missing_sync_before_reduce_is_a_race():
    root = tree(xml_of("bipartite(4)", RS, "oneccl"))
    r1 = ranks(root)[1]
    r1.remove(r1.find("sync"))
    err = error_of(text(root), "oneccl")
    assert err.kind == "race" and err.gpu == 1


def test_oneccl_deadlock():
    """Every rank waits for its first receives before posting its first sends."""
    root = tree(xml_of("circulant(7, 2, 3)", AG, "oneccl"))
    for r in ranks(root):
        items = list(r)
        first_sync = next(i for i, x in enumerate(items) if x.tag == "sync")
        sends = [x for x in items[:first_sync] if x.tag == "send"]
        for x in sends:
            r.remove(x)
        pos = list(r).index(items[first_sync]) + 1
        for k, x in enumerate(sends):
            r.insert(pos + k, x)
    err = error_of(text(root), "oneccl")
    assert err.kind == "deadlock" and err.gpu == 0 and "waits for recv" in err.message


def test_oneccl_wrong_offset():
    root = tree(xml_of("bipartite(4)", AG, "oneccl"))
    r0 = ranks(root)[0]
    send = r0.find("send")
    send.set("off", "99")
    err = error_of(text(root), "oneccl")
    assert err.kind == "bounds" and err.gpu == 0 and err.step == list(r0).index(send)
    root = tree(xml_of("bipartite(4)", AR, "oneccl"))
    send = next(x for x in ranks(root)[0].iter("send") if x.get("buf") == "in")
    _shift(send, "off", 4, 32)
    err = error_of(text(root), "oneccl")
    assert err.kind == "result" and "output chunk" in err.message


def test_oneccl_count_mismatch_and_tags():
    root = tree(xml_of("torus(4, 4)", AR, "oneccl"))
    recv = next(x for x in ranks(root)[2].iter("recv") if int(x.get("cnt")) >= 2)
    recv.set("cnt", str(int(recv.get("cnt")) - 1))
    err = error_of(text(root), "oneccl")
    assert err.kind == "mismatch" and "receives" in err.message
    root = tree(xml_of("torus(4, 4)", AR, "oneccl"))
    sends = list(ranks(root)[0].iter("send"))
    sends[1].set("tag", sends[0].get("tag")) if sends[0].get("peer") == sends[1].get("peer") else \
        sends[1].set("peer", sends[0].get("peer"))
    assert error_of(text(root), "oneccl").kind == "mismatch"


def test_oneccl_unsynced_tail():
    root = tree(xml_of("hypercube(3)", AG, "oneccl"))
    r3 = ranks(root)[3]
    syncs = r3.findall("sync")
    r3.remove(syncs[-1])
    err = error_of(text(root), "oneccl")
    assert err.kind == "structure" and "never completed" in err.message and err.gpu == 3


def test_nop_dependencies_need_a_dependent_step():
    """msccl-executor: 'the last reduction must be a part of the first immediate instruction'."""
    root = tree(xml_of("torus(4, 4)", AR))
    for g, tb in tbs(root):
        steps = tb.findall("step")
        i = next((i for i in range(1, len(steps)) if steps[i - 1].get("type") == "nop"), None)
        if i is not None:
            steps[i].set("depid", "-1"), steps[i].set("deps", "-1")
            break
    assert i is not None
    err = error_of(text(root))
    assert err.kind == "structure" and "nop" in err.message and (err.gpu, err.step) == (g, i)


# ----- runtime profiles on hand-written files ------------------------------------------------------------
def _two_gpu_allgather(k: int, *, split_steps: bool = False, copy_tbs: bool = False, chan: int = 0,
                       runtime: str = "executor", max_bytes: int = 0, send_cnt0: bool = False) -> str:
    """An allgather on 2 gpus with shards of k chunks: the shard goes in one message (or k one-chunk steps
    with split_steps); the own shard is copied by one tb (or by k one-chunk tbs with copy_tbs)."""
    attrs = (f'name="t" proto="Simple" nchannels="{chan + 1}" nchunksperloop="{2 * k}" ngpus="2" coll="allgather" '
             f'inplace="0"' + ('' if runtime == "legacy" else ' outofplace="1"') + f' minBytes="0" maxBytes="{max_bytes}"')
    lines = [f"<algo {attrs}>"]

    def step(i, t, sb, so, db, do, cnt):
        return (f'      <step s="{i}" type="{t}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" cnt="{cnt}" '
                f'depid="-1" deps="-1" hasdep="0"/>')
    for g in range(2):
        p = 1 - g
        lines.append(f'  <gpu id="{g}" i_chunks="{k}" o_chunks="{2 * k}" s_chunks="0">')
        tbs = []
        if split_steps:
            tbs.append((p, -1, chan, [("s", "i", j, "o", -1, 1) for j in range(k)]))
            tbs.append((-1, p, chan, [("r", "i", -1, "o", p * k + j, 1) for j in range(k)]))
        else:
            tbs.append((p, -1, chan, [("s", "i", 0, "o", -1, 0 if send_cnt0 else k)]))
            tbs.append((-1, p, chan, [("r", "i", -1, "o", p * k, 0 if send_cnt0 else k)]))
        if copy_tbs:
            tbs += [(-1, -1, 0, [("cpy", "i", j, "o", g * k + j, 1)]) for j in range(k)]
        else:
            tbs.append((-1, -1, 0, [("cpy", "i", 0, "o", g * k, k)]))
        for tid, (snd, rcv, ch, steps) in enumerate(tbs):
            lines.append(f'    <tb id="{tid}" send="{snd}" recv="{rcv}" chan="{ch}">')
            lines += [step(i, *st) for i, st in enumerate(steps)]
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def test_profiles_steps_per_thread_block():
    """MSCCL_MAX_NUM_STEPS: 64 in the executor's default build and in RCCL, 256 in microsoft/msccl."""
    xml = _two_gpu_allgather(70, split_steps=True)
    for runtime in ("executor", "rccl"):
        err = error_of(xml, runtime=runtime)
        assert err.kind == "limit" and "MSCCL_MAX_NUM_STEPS" in err.message and "allows 64" in err.message
    assert check_xml(xml, runtime="executor", max_steps=128).ok           # an executor built with 128 steps
    assert check_xml(_two_gpu_allgather(70, split_steps=True, runtime="legacy", max_bytes=1 << 20),
                     runtime="legacy").ok


def test_profiles_thread_blocks_and_channels():
    """RCCL allows 64 thread blocks, the executor 32 x MAXCHANNELS; the executor has 32 channels, RCCL 128."""
    xml = _two_gpu_allgather(63, copy_tbs=True)                              # 65 thread blocks per gpu
    err = error_of(xml, runtime="rccl")
    assert err.kind == "limit" and "65 thread blocks" in err.message and "MSCCL_MAX_NUM_THREAD_BLOCKS" in err.message
    assert check_xml(xml, runtime="executor").ok
    xml = _two_gpu_allgather(4, chan=32)
    assert error_of(xml, runtime="executor").kind == "limit"
    assert check_xml(xml, runtime="rccl").ok


def test_profiles_size_window():
    """maxBytes="0" is unbounded for the executor/RCCL and never selected by microsoft/msccl (nBytes < maxBytes)."""
    assert check_xml(_two_gpu_allgather(4), runtime="rccl").ok
    err = error_of(_two_gpu_allgather(4, runtime="legacy"), runtime="legacy")
    assert err.kind == "selection" and "never" in err.message
    assert check_xml(_two_gpu_allgather(4, runtime="legacy", max_bytes=1 << 20), runtime="legacy").ok
    root = tree(_two_gpu_allgather(4, max_bytes=100))
    root.set("minBytes", "200")
    assert error_of(text(root), runtime="executor").kind == "selection"


def test_profiles_legacy_parser_rules():
    """microsoft/msccl: cnt 0 on a send indexes before its count array; i_chunks must agree with
    nchunksperloop."""
    xml = _two_gpu_allgather(4, runtime="legacy", max_bytes=1 << 20, send_cnt0=True)
    assert error_of(xml, runtime="legacy").kind == "limit"
    root = tree(_two_gpu_allgather(4, runtime="legacy", max_bytes=1 << 20))
    root.find("gpu").set("i_chunks", "3")
    err = error_of(text(root), runtime="legacy")
    assert err.kind == "structure" and "nchunksperloop" in err.message


def test_nops_and_dependencies_on_nops():
    """A nop without a dependency shifts the step numbers the runtime publishes; a nop never publishes."""
    root = tree(xml_of("torus(4, 4)", AR, combined=False))
    g, tb = next((g, tb) for g, tb in tbs(root) if any(s.get("type") == "nop" for s in tb.findall("step")))
    nop = next(s for s in tb.findall("step") if s.get("type") == "nop")
    nop.set("depid", "-1"), nop.set("deps", "-1")
    err = error_of(text(root))
    assert err.kind == "structure" and "nop without a dependency" in err.message
