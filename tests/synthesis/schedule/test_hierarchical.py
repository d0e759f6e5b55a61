"""Hierarchical collectives over G x N GPUs (issue 27): model-checked, priced per phase, compiled to MSCCL XML
(executor and RCCL) and oneCCL XML that the parsers accept."""
from __future__ import annotations

import numpy as np
import pytest

from services.compiler.api import check_xml, compile_schedule
from services.synthesis.schedule.cost import step_max_loads
from services.synthesis.schedule.hierarchical import gpu_topology, phase_cost, step_kinds
from services.synthesis.search.hierarchical import hierarchical
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.verify import verify
from services.synthesis.search.construct import construct
from services.synthesis.topology.catalog import build

CASES = [("hypercube(2)", 2), ("circulant(8, 1, 3)", 4), ("debruijn(2, 3)", 2)]


def test_gpu_graph_rail_cabling():
    host = build("circulant(8, 1, 3)")
    topo, tail, head = gpu_topology(host, 4)
    assert topo.nodes == 32 and topo.arcs == 8 * 4 * 3 + host.arcs and host.degree == 4
    # every host arc leaves from a GPU of its tail host and lands on a GPU of its head host
    assert (tail // 4 == host.tails).all() and (head // 4 == host.heads).all()
    # d = 4 NICs per host, one on each GPU: every GPU sends on one NIC and receives on one
    assert (np.bincount(tail, minlength=32) == 1).all() and (np.bincount(head, minlength=32) == 1).all()
    _, tail2, _ = gpu_topology(build("hypercube(2)"), 4)          # d = 2: NICs on GPUs 0 and 1
    assert sorted(set((tail2 % 4).tolist())) == [0, 1]


@pytest.mark.parametrize("expr, gpus", CASES)
@pytest.mark.parametrize("collective", [Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE])
def test_verified_and_priced_per_phase(expr, gpus, collective):
    host = build(expr)
    s, topo = hierarchical(host, gpus, collective)
    assert s.nodes == host.nodes * gpus
    assert verify(s, topo).raise_if_invalid().ok
    cost = phase_cost(s, gpus)
    ag = construct(expr, Collective.ALLGATHER).schedule
    rs = construct(expr, Collective.REDUCESCATTER).schedule
    host_steps = {Collective.ALLGATHER: ag.steps, Collective.REDUCESCATTER: rs.steps,
                  Collective.ALLREDUCE: ag.steps + rs.steps}[collective]
    phases = 2 if collective is Collective.ALLREDUCE else 1
    assert cost.network_steps == host_steps and cost.scaleup_steps == host_steps + phases
    # the network phase carries the host schedule's loads: a host shard is G GPU shards
    loads = {Collective.ALLGATHER: step_max_loads(ag).sum() / ag.grid,
             Collective.REDUCESCATTER: step_max_loads(rs).sum() / rs.grid}
    loads[Collective.ALLREDUCE] = loads[Collective.ALLGATHER] + loads[Collective.REDUCESCATTER]
    assert cost.network_shards == pytest.approx(gpus * loads[collective])
    kinds = step_kinds(s, gpus)
    assert kinds.sum() == cost.scaleup_steps and (~kinds).sum() == cost.network_steps
    # the first allgather step is the scale-up phase: G - 1 whole shards out of every GPU
    if collective is Collective.ALLGATHER:
        assert kinds[0] and cost.scaleup_shards >= gpus - 1
    t = cost.time_s(1e6, nvlink_alpha_s=3e-6, nvlink_Bps=3e11, alpha_s=5e-6, nic_Bps=2.5e10)
    assert t == pytest.approx(cost.scaleup_steps * 3e-6 + cost.scaleup_shards * 1e6 / 3e11
                              + cost.network_steps * 5e-6 + cost.network_shards * 1e6 / 2.5e10)


@pytest.mark.parametrize("collective", [Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE])
@pytest.mark.parametrize("runtime", ["executor", "rccl", "legacy", "oneccl"])
def test_compiled_xml_accepted(collective, runtime):
    s, topo = hierarchical(build("hypercube(2)"), 2, collective)
    fmt = "oneccl" if runtime == "oneccl" else "msccl"
    art = compile_schedule(s, topo, fmt, runtime=runtime)
    report = check_xml(art.xml, fmt, runtime=runtime)
    assert report.ok, report.errors[:1]
    if fmt == "msccl":
        assert 'nranks="8"' in art.xml or "ngpus=\"8\"" in art.xml


def test_refuses_one_gpu_and_alltoall():
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        gpu_topology(build("hypercube(2)"), 1)
    with pytest.raises(ValueError, match="not alltoall"):
        hierarchical(build("hypercube(2)"), 2, Collective.ALLTOALL)
    assert np.all(step_kinds(hierarchical(build("hypercube(2)"), 2, Collective.ALLGATHER)[0], 2)[[0, 2, 4]])


def test_cli_compile_hierarchical(capsys, tmp_path):
    import json

    from services.cli import main

    out_file = tmp_path / "h.xml"
    code = main(["compile", "hypercube(2)", "--gpus-per-host", "2", "--runtime", "rccl", "--check", "--json",
                 "-o", str(out_file)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["check"]["ok"] and data["nodes"] == 8
    assert data["hierarchical"] == {"gpus_per_host": 2, "hosts": 4, "scaleup_steps": 6, "scaleup_shards": 8.0,
                                    "network_steps": 4, "network_shards": 6.0}
    assert check_xml(out_file.read_text(), "msccl", runtime="rccl").ok
    for argv, msg in [(["--collective", "alltoall"], "not alltoall"), (["--gpus-per-host", "0"], "1..64")]:
        code = main(["compile", "hypercube(2)", "--gpus-per-host", "2", *argv])
        assert code == 2 and msg in capsys.readouterr().err
