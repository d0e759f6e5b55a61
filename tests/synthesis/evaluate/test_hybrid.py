"""Hybrid-parallel training on multi-GPU hosts (issue 27): traffic of each parallelism kind by hand, memory
refusals, the strategy search never slower than a strategy it could pick, fabrics, catalog, CLI."""
from __future__ import annotations

import json
import math

import pytest

from services.cli import main
from services.synthesis.evaluate.devices import GPU_PROFILES, gpu_profile
from services.synthesis.evaluate.fabrics import switched_fabric
from services.synthesis.evaluate.hybrid import baseline_fabric, evaluate_hybrid, expr_fabric
from services.synthesis.evaluate.parallelism import (
    Infeasible, Job, Strategy, check, evaluate, memory, parse_parallelism, search, strategies, traffic)
from services.synthesis.evaluate.transformer import LLM_CATALOG, Transformer
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.topology.catalog import build

A100 = gpu_profile("a100")
LINK = LinkModel.from_units(5, 800)          # 4 NICs of 200 Gb/s per host
# h 64, 4 layers, 4 heads, s 16, vocabulary 100: one micro-batch's activation message A = 2 * 16 * 64 = 2048 bytes
SMALL = Transformer(hidden=64, layers=4, heads=4, seq_len=16, vocab=100)
SMALL_MOE = Transformer(hidden=64, layers=4, heads=4, seq_len=16, vocab=100, experts=4, top_k=2, moe_every=2)


def job(model=SMALL, hosts=2, gpus=4, batch=8, device=A100) -> Job:
    return Job(model, "small", batch, device, hosts, gpus, attention="full")     # attention scores computed whole


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_traffic_by_hand():
    a = 2 * 16 * 64
    # TP: 2 micro-batches (8 sequences over dp 4), 4 layers, 4 allreduces of A, ring share 2 (tp-1)/tp = 1
    assert traffic(job(), Strategy(2, 1, 4)).tp == 2 * 4 * 4 * 1 * a
    assert traffic(job(), Strategy(2, 1, 4, recompute="full")).tp == 2 * 4 * 6 * 1 * a
    # PP: per micro-batch a forward activation and a backward gradient of A / tp, times the chunks
    assert traffic(job(), Strategy(1, 2, 4)).pp == 2 * 2 * a
    assert traffic(job(), Strategy(1, 2, 4, interleave=2)).pp == 2 * 2 * 2 * a
    # DP: stage 0 allreduce = RS + AG of 2 bytes a parameter, each (dp-1)/dp of it
    psi = SMALL.dense_params / 2
    assert traffic(job(), Strategy(2, 1, 4)).dp == pytest.approx((2 * psi + 2 * psi) * 3 / 4)
    assert traffic(job(), Strategy(2, 1, 4, zero=2)).dp == traffic(job(), Strategy(2, 1, 4)).dp
    # ZeRO 3: + a forward and a backward allgather of the parameters per micro-batch (2 of them)
    assert traffic(job(), Strategy(2, 1, 4, zero=3)).dp == pytest.approx((2 * psi + 2 * psi * 5) * 3 / 4)
    # EP: 2 MoE layers (every other), 4 all-to-alls of D = 2 (s/tp) b h top_k, the (ep-1)/ep share leaves
    d = 2 * 16 * 64 * 2
    t = traffic(job(SMALL_MOE), Strategy(1, 1, 8, ep=4))
    assert SMALL_MOE.moe_layers == 2 and t.ep == 1 * 2 * 4 * d * 3 / 4
    # expert gradients go over edp = dp/ep = 2 ranks, dense ones over dp = 8
    psi_d, psi_e = SMALL_MOE.dense_params, SMALL_MOE.expert_params / 4
    assert t.dp == pytest.approx(4 * psi_d * 7 / 8 + 4 * psi_e * 1 / 2)


def test_iteration_by_hand_on_a_fat_tree():
    j = job(hosts=4, gpus=1, batch=8)
    fab = switched_fabric("fat-tree", 4, 1, LINK)
    # pure data parallelism over 4 hosts: RS + AG by recursive halving, 2 steps each, tau 3/4 each
    r = evaluate(j, Strategy(1, 1, 4, micro_batch=2), fab)
    t_f = A100.seconds(SMALL.forward_flops_per_token() * 16 * 2, hidden=SMALL.hidden)
    assert r.breakdown.compute == pytest.approx(3 * t_f)          # one micro-batch: forward + 2 x backward
    # per layer (4 layers, a quarter of the parameters each): the allreduce of a layer's gradients runs under
    # the next layer's backward; the last one has nothing to hide behind
    rs = 2 * LINK.alpha_s + 0.75 * 2 * SMALL.dense_params / 4 / LINK.node_bandwidth_Bps
    assert r.breakdown.dp == pytest.approx(2 * rs + 3 * max(0.0, 2 * rs - 2 * t_f / 4))
    assert r.iteration_s == pytest.approx(r.breakdown.total)
    # pipeline: iteration = (m + (pp - 1)/v) t_mb, t_mb = compute + the PP exchanges of one micro-batch
    r = evaluate(j, Strategy(1, 4, 1, micro_batch=1), fab)
    t_f = A100.seconds(SMALL.forward_flops_per_token() * 16 / 4, hidden=SMALL.hidden)
    cross = LINK.alpha_s + 2048 / LINK.node_bandwidth_Bps              # one GPU, one NIC: all of B
    t_mb = 3 * t_f + 2 * cross
    assert r.breakdown.bubble == pytest.approx(3 * t_mb) and r.iteration_s == pytest.approx(11 * t_mb)
    assert r.achieved_tflops_per_gpu == pytest.approx(j.model_flops() / r.iteration_s / 4 / 1e12)


def test_oversubscription_and_direct_fabrics():
    ideal, over = switched_fabric("fat-tree", 64, 8, LINK), switched_fabric("fat-tree-4to1", 64, 8, LINK)
    x = 1e9
    assert ideal.reduce_scatter_s(64, x) == pytest.approx(6 * LINK.alpha_s + (63 / 64) * x / LINK.node_bandwidth_Bps)
    # 32 hosts under a leaf: (1 - 1/32) stays, (1/32 - 1/64) crosses at B/4
    assert over.reduce_scatter_s(64, x) == pytest.approx(
        6 * LINK.alpha_s + ((31 / 32) + 4 * (1 / 32 - 1 / 64)) * x / LINK.node_bandwidth_Bps)
    assert over.alltoall_s(64, x, 8, 1e11) == pytest.approx(LINK.alpha_s + x / LINK.node_bandwidth_Bps * 4 * 0.5)
    # direct connect: all hosts = the measured schedule's cost; fewer hosts = the same efficiency
    fab = expr_fabric(build("hypercube(3)"), LINK, moe=True)
    rs = fab.reducescatter
    assert rs.steps == 3 and fab.reduce_scatter_s(8, x) == pytest.approx(
        3 * LINK.alpha_s + float(rs.tau) * x / LINK.node_bandwidth_Bps)
    assert fab.reduce_scatter_s(4, x) == pytest.approx(
        3 * LINK.alpha_s + float(rs.tau) * (3 / 4) / (7 / 8) * x / LINK.node_bandwidth_Bps)
    assert fab.alltoall_throughput > 0 and fab.p2p_s(x, 8) == pytest.approx(LINK.alpha_s + x / (LINK.node_bandwidth_Bps / 3))
    torus = baseline_fabric("torus_classic", 16, 4, LINK, moe=False)
    assert torus.expr == "torus(4, 4)" and torus.reducescatter.steps > 0


def test_memory_refusals():
    big = LLM_CATALOG["llama3-70b"]
    j = Job(big.model, big.name, 16, A100, 1, 8)
    mem = memory(j, Strategy(8, 1, 1))
    assert mem.weights == pytest.approx(2 * big.model.parameters / 8) and mem.optimizer == 6 * mem.weights
    with pytest.raises(Infeasible, match=r"above the 80 GiB \(85.9 GB\) of a100 HBM") as exc:
        check(j, Strategy(8, 1, 1))
    assert exc.value.kind == "memory"
    # sharding the optimizer over DP brings a strategy under the HBM
    j2 = Job(big.model, big.name, 256, A100, 8, 8)
    s = Strategy(8, 1, 8, zero=1, recompute="full")
    assert memory(j2, s).optimizer == pytest.approx(memory(j2, Strategy(8, 1, 8, recompute="full")).optimizer / 8)
    # activations: full recomputation keeps only each layer's input
    assert memory(j2, s).activations < memory(j2, Strategy(8, 1, 8, zero=1)).activations
    # the same model fits on a B200 where it does not on an A100
    check(Job(big.model, big.name, 16, GPU_PROFILES["b200"], 1, 8), Strategy(8, 1, 1, recompute="full"))
    with pytest.raises(Infeasible, match="needs 14"):
        check(Job(big.model, big.name, 16, A100, 1, 8), Strategy(8, 1, 1, recompute="full"))


@pytest.mark.parametrize("hosts, gpus, s, message", [
    (2, 4, Strategy(16, 1, 1), "tp x pp x dp"),
    (1, 8, Strategy(8, 1, 1), "does not divide the 4 attention heads"),
    (2, 4, Strategy(8, 1, 1), "does not divide the 4 GPUs of a host"),
    (2, 4, Strategy(2, 1, 4, micro_batch=4), "global batch 8"),
    (2, 4, Strategy(1, 2, 4, micro_batch=2, interleave=2), "multiple of pp=2"),
    (1, 8, Strategy(1, 8, 1), "exceeds the 4 layers"),
    (2, 4, Strategy(2, 1, 4, ep=2), "mixture-of-experts"),
])
def test_shape_refusals(hosts, gpus, s, message):
    with pytest.raises(Infeasible, match=message):
        check(job(hosts=hosts, gpus=gpus), s)


def test_expert_data_parallelism():
    # 8 experts, 32 DP ranks: ep = 8 experts' ranks, each expert replicated over edp = 4
    mix = LLM_CATALOG["mixtral-8x7b"]
    j = Job(mix.model, mix.name, 256, A100, 4, 8)
    with pytest.raises(Infeasible, match="must divide the 8 experts"):
        check(j, Strategy(1, 1, 32, ep=16))
    mem = memory(j, Strategy(1, 1, 32, ep=8, zero=1))
    assert mem.weights == pytest.approx(2 * (mix.model.dense_params + mix.model.expert_params / 8))


def test_auto_never_slower_than_a_fixed_strategy():
    entry = LLM_CATALOG["llama3-8b"]
    j = Job(entry.model, entry.name, 64, A100, 4, 8)
    for fab in (switched_fabric("fat-tree-2to1", 4, 4, LINK), expr_fabric(build("circulant(4, 1, 2)"), LINK, moe=False)):
        best = search(j, fab)
        fixed_ones = 0
        for tp, pp in [(1, 1), (2, 2), (4, 1), (8, 1), (8, 4), (4, 8)]:
            dp = 32 // (tp * pp)
            try:
                r = search(j, fab, parse_parallelism(f"tp={tp},pp={pp},dp={dp}"))
            except Infeasible:
                continue
            fixed_ones += 1
            assert best.iteration_s <= r.iteration_s
            assert r.strategy.tp == tp and r.strategy.pp == pp
        assert fixed_ones >= 3
        # and every strategy of the space, evaluated one by one
        for s in list(strategies(j))[::37]:
            try:
                assert best.iteration_s <= evaluate(j, s, fab).iteration_s
            except Infeasible:
                pass


def test_parse_parallelism():
    assert parse_parallelism("tp=8,pp=8,dp=16,ep=4,zero=1,mb=2,vp=2,recompute=full") == {
        "tp": 8, "pp": 8, "dp": 16, "ep": 4, "zero": 1, "micro_batch": 2, "interleave": 2, "recompute": "full"}
    for bad, msg in [("tp8", "key=value"), ("xx=1", "unknown key"), ("tp=a", "integer"), ("tp=1,tp=2", "twice"),
                     ("recompute=some", "recompute")]:
        with pytest.raises(ValueError, match=msg):
            parse_parallelism(bad)


def test_catalog_parameter_counts():
    for e in LLM_CATALOG.values():
        assert e.model.parameters == pytest.approx(e.published_parameters, rel=0.01), e.name
    ds = LLM_CATALOG["deepseek-v3"].model
    assert ds.experts == 256 and ds.k == 8 and ds.moe_layers == 58
    # active parameters (37B published): the forward FLOPs per token without attention scores and logits (MLA
    # scores: 2 s heads (d_qk + d_v) = 2 s 128 (192 + 128) per layer)
    assert ds.head_dim == 160
    scores = 61 * 2.0 * ds.seq_len * 128 * (192 + 128)
    active = (ds.forward_flops_per_token() - scores - 2.0 * ds.hidden * ds.vocab) / 2
    assert active == pytest.approx(37e9, rel=0.05)
    # GPT-3: Narayanan et al.'s 72 B s l h^2 (1 + s/6h + V/12lh) per sequence (the h terms of norms aside)
    g = LLM_CATALOG["gpt3-175b"].model
    l, h, s, v = 96, 12288, 2048, 50257
    assert 3 * g.forward_flops_per_token() * s == pytest.approx(72 * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h)),
                                                                rel=1e-3)


def test_evaluate_hybrid_over_given_topologies():
    j = job(SMALL_MOE, hosts=8, gpus=4, batch=32)
    ev = evaluate_hybrid(j, 3, LINK, topologies=[build("hypercube(3)"), "fat-tree"],
                         baselines=("fat-tree-4to1", "rail-optimised", "torus_classic"))
    names = [e.fabric.name for e in ev.entries]
    assert names == ["hypercube(3)", "fat-tree", "fat-tree-4to1", "rail-optimised"]     # no 3-regular torus of 8
    assert ev.best.fabric.kind == "topology" and ev.best.iteration_s == min(
        e.iteration_s for e in ev.entries if e.fabric.kind == "topology")
    d = ev.to_dict()
    assert d["best"] == ev.best.fabric.expr and "fastest" in d["why"]
    for e in d["entries"]:
        assert {"tp", "pp", "dp", "ep", "zero", "micro_batch"} <= e["parallelism"].keys()
        assert {"compute_s", "bubble_s", "exposed_tp_s", "exposed_pp_s", "exposed_dp_s", "exposed_ep_s",
                "exposed_cp_s", "exposed_host_s"} == set(
            e["breakdown"])
        assert e["memory_per_gpu_bytes"]["total"] <= A100.hbm_bytes and 0 < e["mfu"] < 1


def test_cli_train_hybrid(capsys, tmp_path):
    code, out, err = run(capsys, "train", "8", "3", "--model", "llama3-8b", "--gpus-per-host", "8",
                         "--topology", "hypercube(3)", "--global-batch", "64", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["gpus"] == 64 and data["best"] == "hypercube(3)"
    kinds = {e["name"]: e["kind"] for e in data["entries"]}
    assert kinds["hypercube(3)"] == "topology" and kinds["fat-tree"] == "baseline" and "rail-optimised" in kinds
    best = data["entries"][0]
    assert math.isclose(best["achieved_tflops_per_gpu"] * 1e12 * best["iteration_s"] * 64,
                        data["model_flops_per_iteration"], rel_tol=1e-9)
    assert best["mfu"] == pytest.approx(best["achieved_tflops_per_gpu"] * 1e12 / 312e12)
    # a fixed strategy; a switched topology; a transformer file
    spec = tmp_path / "t.json"
    spec.write_text(json.dumps({"name": "tiny", "global_batch": 64, "transformer": {
        "hidden": 1024, "layers": 8, "heads": 16, "seq_len": 512, "vocab": 32000}}))
    code, out, err = run(capsys, "train", "8", "3", "--model", str(spec), "--gpus-per-host", "8",
                         "--topology", "fat-tree-2to1", "--parallelism", "tp=2,pp=2,dp=16,zero=1", "--json")
    assert code == 0, err
    data = json.loads(out)
    e = data["entries"][0]
    assert e["name"] == "fat-tree-2to1" and e["parallelism"]["tp"] == 2 and e["parallelism"]["zero"] == 1
    code, out, err = run(capsys, "train", "8", "3", "--model", str(spec), "--gpus-per-host", "8",
                         "--topology", "fat-tree")
    assert code == 0 and "*fat-tree" in out and "tiny on 8 hosts x 8 a100" in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama3-70b", "--gpus-per-host", "8", "--parallelism", "tp=8,pp=1,dp=8,zero=0,recompute=none"],
     "no feasible strategy"),
    (["--model", "llama3-8b", "--gpus-per-host", "8", "--parallelism", "tp=3"], "no strategy of 64 GPUs"),
    (["--model", "llama3-8b", "--gpus-per-host", "8", "--parallelism", "tp=x"], "integer"),
    (["--model", "llama3-8b", "--gpus-per-host", "8", "--device", "tpu"], "unknown device"),
    (["--model", "resnet50", "--gpus-per-host", "8"], "need a transformer"),
    (["--model", "llama3-8b", "--gpus-per-host", "8", "--batch", "4"], "--global-batch"),
    (["--model", "BAD_FILE", "--gpus-per-host", "8"], "transformer.heads"),
])
def test_cli_train_hybrid_bad_input(capsys, tmp_path, argv, message):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "b", "global_batch": 8, "transformer": {
        "hidden": 100, "layers": 2, "heads": 0, "seq_len": 8, "vocab": 10}}))
    argv = [str(bad) if a == "BAD_FILE" else a for a in argv]
    code, out, err = run(capsys, "train", "8", "3", "--topology", "hypercube(3)", *argv)
    assert code == 2 and message in err + out


def test_leanest_probe_decides_existence():
    """feasible(job, leanest(fixed)) is empty exactly when feasible(job, fixed) is."""
    from services.synthesis.evaluate.parallelism import feasible, leanest

    cases = [(LLM_CATALOG["llama3-70b"], 1, 8, 16), (LLM_CATALOG["llama3-70b"], 2, 8, 32),
             (LLM_CATALOG["mixtral-8x7b"], 1, 8, 16), (LLM_CATALOG["llama3-8b"], 1, 4, 8)]
    for entry, hosts, gpus, batch in cases:
        j = Job(entry.model, entry.name, batch, A100, hosts, gpus)
        for fixed in ({}, {"tp": 8}, {"zero": 0}, {"interleave": 2}, {"recompute": "none"}):
            full = feasible(j, fixed)[0]
            lean = feasible(j, leanest(fixed))[0]
            assert bool(full) == bool(lean), (entry.name, hosts, fixed)
            assert set(lean) <= set(full)
