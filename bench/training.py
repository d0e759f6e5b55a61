"""Simulated large-scale MoE training, the paper's Fig. 9 setting (section 8.3, App. A.4), and the
hybrid-parallel model's predictions beside Megatron-LM's published measurements (Narayanan et al. SC'21, Table 1)
and published mixture-of-experts runs with expert parallelism (`bench/moe_runs.py`, `MOE_RUNS`).

    python -m bench.training

d = 4, alpha = 10 us, B = 100 Gbps; Switch Transformer Base-256 (14.7B) on 256 nodes and Switch-C-2048
(1.6T) on 1024 nodes, experts sharded over all nodes, non-expert layers data-parallel. "Ours" is the
frontier topology of (N, 4) with the smallest iteration time (our finder's frontier: Table 7's (T_L, T_B)
points, some under other names); the baselines are ShiftedRing and the 2D torus (traditional schedule).
Printed beside the paper: all-to-all and iteration-time ratios baseline / ours, and the share of the
iteration spent in all-to-all. The whole table is timed (wall and CPU; the target is 60 s).
"""
from __future__ import annotations

import resource
import time

MB = 1 << 20
CASES = [  # (model, nodes, paper: {baseline: (all-to-all ratio, iteration ratio)}, paper shares)
    ("switch-base-256", 256, {"shifted_ring": (8.0, 4.0), "torus_classic": (2.0, 1.5)}, None),
    ("switch-c-2048", 1024, {"shifted_ring": (27.0, 9.0), "torus_classic": (3.3, 1.7)},
     {"ours": 0.30, "torus_classic": 0.58, "shifted_ring": 0.91}),
]
LABEL = {"shifted_ring": "ShiftedRing", "torus_classic": "2D torus"}


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    from services.synthesis.evaluate.model_catalog import catalog_model
    from services.synthesis.evaluate.training import evaluate_training
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.pricing import CACHE, default_cache_dir

    if CACHE.path is None:
        CACHE.attach(default_cache_dir())
    link = LinkModel.from_units(10, 100)
    wall0, cpu0 = time.perf_counter(), cpu_s()
    results = []
    for name, nodes, paper, shares in CASES:
        t0, c0 = time.perf_counter(), cpu_s()
        model = catalog_model(name, nodes)
        ev = evaluate_training(model, nodes, 4, link, baselines=tuple(paper))
        results.append((name, nodes, paper, shares, ev, time.perf_counter() - t0, cpu_s() - c0))
    wall, cpu = time.perf_counter() - wall0, cpu_s() - cpu0

    for name, nodes, paper, shares, ev, w, c in results:
        best = ev.best
        print(f"\n{ev.model}, N = {nodes}, d = 4, alpha 10 us, B 100 Gbps  ({w:.1f} s wall, {c:.1f} s CPU)")
        print(f"{'topology':<48} {'iteration ms':>12} {'compute':>8} {'all-to-all':>10} {'exp. AR':>8} "
              f"{'bucket':>7} {'AR steps':>8} {'AR tau':>7} {'f (MCF)':>10}")
        for e in ev.entries:
            r = e.report
            label = ("* " if e is best else "  ") + (LABEL.get(e.name, e.name) if e.kind == "baseline" else e.expr)
            f = e.alltoall.get("throughput", 0.0)
            print(f"{label:<48} {r.iteration_s * 1e3:>12.2f} {r.compute_s * 1e3:>8.2f} {r.alltoall_s * 1e3:>10.2f} "
                  f"{r.exposed_allreduce_s * 1e3:>8.2f} {r.bucket_bytes // MB:>5}MB {e.costs.allreduce.steps:>8} "
                  f"{float(e.costs.allreduce.tau):>7.4f} {f:>10.3e}{'' if e.alltoall.get('exact', True) else ' (lower)'}")
        print(f"lower bound {ev.lower_bound_s * 1e3:.2f} ms; ours is {best.report.iteration_s / ev.lower_bound_s:.3f}x "
              f"of it (paper: within 5 %)")
        print(f"{'vs ours (' + best.expr + ')':<48} {'a2a ratio':>10} {'paper':>6} {'iter ratio':>11} {'paper':>6}")
        for e in ev.entries:
            if e.kind != "baseline":
                continue
            a, i = e.report.alltoall_s / best.report.alltoall_s, e.report.iteration_s / best.report.iteration_s
            pa, pi = paper[e.name]
            print(f"  {LABEL[e.name]:<46} {a:>9.1f}x {pa:>5.1f}x {i:>10.2f}x {pi:>5.1f}x")
        share = {"ours": best.report}
        share.update({e.name: e.report for e in ev.entries if e.kind == "baseline"})
        print("all-to-all share of the iteration: " + ", ".join(
            f"{LABEL.get(k, k)} {r.alltoall_s / r.iteration_s:.0%}"
            + (f" (paper {shares[k]:.0%})" if shares else "") for k, r in share.items()))
    print(f"\nwhole table: {wall:.1f} s wall, {cpu:.1f} s CPU (target: under 60 s)")
    print("""
Where we differ from the paper, and why:
- Compute. The paper measured per-layer times on an A100-SXM-80GB; we derive them from the layers' FLOPs
  (matrix products only) at 312 TFLOP/s and 50 % efficiency (`training_job.DEVICES`). Normalisation, routing
  and memory-bound kernels make real layers slower, so our compute share is smaller and the communication
  terms weigh more.
- Gradient precision. The Switch models train in bfloat16 (Fedus et al. section 2.4); we allreduce 2-byte
  gradients. With 4-byte gradients the allreduce doubles (~630 ms at 1024 nodes) and dominates every
  topology, shrinking the iteration ratios (ShiftedRing ~5x instead of ~7x at 1024 nodes).
- Frontier. Our (N, 4) frontier has Table 7's (T_L, T_B) points at the low-T_L end (DBJ(4, k) for Pi_{4,N},
  line graphs of circulants for L^k(...)) and better ones at the high end; the MCFs of L^3(C(16, {1, 4}))
  and DBJ(4, 5) at N = 1024 are the lower ends of the column generation's certified brackets (at most 0.5 %
  wide, real routings; de Bruijn's with aggregated columns, its per-source master would be too large): both
  only make "ours" look worse.
- Lower bound. With our short compute the bound is A* + R* (all-to-all at the Moore throughput bound f*,
  which no known topology reaches: our best is 8-12 % below it, and one allreduce of all gradients at the
  RS + AG optimum); the allreduce cannot hide behind ~20-40 ms of compute. The paper's longer measured
  compute lets it hide, which is how it gets within 5 %.
- The all-to-all ratios are properties of the topologies alone (MCF of LP (3)) and match the paper; the
  iteration ratios and shares depend on the compute and allreduce model above.""")


# Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (SC'21),
# Table 1 (weak scaling; sequence 2048, vocabulary 51200; DGX A100 80GB hosts of 8 GPUs, NVLink/NVSwitch,
# 8 x 200 Gb/s HDR InfiniBand per host on a fat-tree; activation recomputation; achieved TFLOP/s per GPU by
# their equation (3), which counts the recomputed forward: 96 B s l h^2 (1 + s/6h + V/16lh)).
# (parameters B, heads, hidden, layers, tp, pp, GPUs, batch, measured TFLOP/s per GPU)
MEGATRON_TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
CALIBRATION_ROW = -1        # the 1008B row: communication is the smallest share there


def _megatron_prediction(row, efficiency: float):
    """(predicted TFLOP/s per GPU by the paper's equation (3), our result) for one Table 1 row on its cluster:
    hosts of 8 A100s, 8 NICs of 200 Gb/s, the ideal fat-tree, the row's tp and pp, full recomputation (as
    the paper), the rest (micro-batch, interleaving, ZeRO stage 0/1) searched."""
    from services.synthesis.evaluate.devices import gpu_profile
    from services.synthesis.evaluate.fabrics import switched_fabric
    from services.synthesis.evaluate.parallelism import Job, search
    from services.synthesis.evaluate.transformer import Transformer
    from services.synthesis.schedule.cost import LinkModel

    _, heads, h, layers, tp, pp, gpus, batch, _ = row
    model = Transformer(hidden=h, layers=layers, heads=heads, seq_len=2048, vocab=51200)
    device = gpu_profile("a100").model_copy(update={"efficiency": efficiency})
    hosts = gpus // 8
    job = Job(model, f"gpt-{row[0]}B", batch, device, hosts, 8)
    fabric = switched_fabric("fat-tree", hosts, 8, LinkModel.from_units(5, 1600))
    fixed = {"tp": tp, "pp": pp, "dp": gpus // (tp * pp), "recompute": "full"}
    r = search(job, fabric, fixed)
    s, v = 2048, 51200
    eq3 = 96 * batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    return eq3 / r.iteration_s / gpus / 1e12, r


def calibrate_a100() -> float:
    """The A100 efficiency at which the calibration row's prediction equals its measurement (bisection)."""
    row = MEGATRON_TABLE1[CALIBRATION_ROW]
    lo, hi = 0.3, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if _megatron_prediction(row, mid)[0] < row[-1]:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def megatron_validation() -> None:
    from services.synthesis.evaluate.devices import A100_EFFICIENCY_SOURCE, gpu_profile

    t0 = time.perf_counter()
    fitted = calibrate_a100()
    used = gpu_profile("a100").efficiency
    print("\nMegatron-LM weak scaling (Narayanan et al. SC'21, Table 1) on 8 x A100 hosts, 8 x 200 Gb/s, ideal fat-tree")
    print(f"calibration: A100 efficiency {used} in the device profile ({A100_EFFICIENCY_SOURCE}); "
          f"the fit gives {fitted:.4f}")
    print(f"{'params':>8} {'tp':>3} {'pp':>3} {'dp':>4} {'GPUs':>5} {'batch':>5} {'measured':>8} {'predicted':>9} "
          f"{'error':>6} {'model TF/s':>10} {'MFU':>5} {'mb':>2} {'vp':>2}  exposed (bubble / TP / PP / DP, % of iteration)")
    errors = []
    for row in MEGATRON_TABLE1:
        pred, r = _megatron_prediction(row, used)
        err = pred / row[-1] - 1
        errors.append(abs(err))
        s, b = r.strategy, r.breakdown
        parts = " / ".join(f"{x / r.iteration_s:.1%}" for x in (b.bubble, b.tp, b.pp, b.dp))
        print(f"{row[0]:>7}B {s.tp:>3} {s.pp:>3} {s.dp:>4} {row[6]:>5} {row[7]:>5} {row[-1]:>8} {pred:>9.1f} "
              f"{err:>+6.1%} {r.achieved_tflops_per_gpu:>10.1f} {r.mfu:>5.2f} {s.micro_batch:>2} {s.interleave:>2}  {parts}")
    print(f"mean absolute error {sum(errors) / len(errors):.1%}, largest {max(errors):.1%} "
          f"({time.perf_counter() - t0:.1f} s). 'predicted' counts FLOPs as the paper's equation (3) (with the "
          f"recomputed forward); 'model TF/s' and MFU count model FLOPs only (3 x forward), as `train` reports.")


def cluster_timing(hosts: int = 128, nics: int = 8, model: str = "gpt3-175b") -> None:
    """`train HOSTS NICS --model M --gpus-per-host 8 --parallelism auto` as the CLI runs it (the frontier from
    the pricing cache, every frontier topology and baseline with its strategy search); target 30 s."""
    from services.synthesis.evaluate.devices import gpu_profile
    from services.synthesis.evaluate.hybrid import evaluate_hybrid
    from services.synthesis.evaluate.parallelism import Job
    from services.synthesis.evaluate.transformer import LLM_CATALOG
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.pricing import CACHE, default_cache_dir

    if CACHE.path is None:
        CACHE.attach(default_cache_dir())
    e = LLM_CATALOG[model]
    job = Job(e.model, e.name, e.global_batch, gpu_profile("a100"), hosts, 8)
    t0, c0 = time.perf_counter(), cpu_s()
    ev = evaluate_hybrid(job, nics, LinkModel.from_units(5, 200 * nics))
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    print(f"\n{model} on {hosts} hosts x 8 A100, {nics} NICs of 200 Gb/s, --parallelism auto: "
          f"{len(ev.entries)} topologies in {wall:.1f} s wall, {cpu:.1f} s CPU (target 30 s)")
    for entry in ev.entries:
        r = entry.result
        if r is None:
            print(f"  {entry.fabric.name:<40} refused: {entry.refused}")
            continue
        s = r.strategy
        print(f"  {('* ' if entry is ev.best else '  ') + entry.fabric.name:<40} {r.iteration_s:8.3f} s "
              f"{r.achieved_tflops_per_gpu:6.1f} TFLOP/s  tp {s.tp} pp {s.pp} dp {s.dp} zero {s.zero} "
              f"mb {s.micro_batch} vp {s.interleave} {s.recompute}")
    print(ev.why)


# ----- MoE runs with expert parallelism: a block of their own (bench/moe_runs.py, MOE_RUNS), printed after the
# dense published runs; none is used for calibration --------------------------------------------------------------

def moe_validation() -> None:
    from bench.moe_runs import moe_validation as table

    errors = table()
    ranked = sorted(abs(e) for e in errors)
    print(f"MoE rows not used for calibration: {len(errors)}, median absolute error {ranked[len(ranked) // 2]:.1%}, "
          f"largest {ranked[-1]:.1%} (target: each at most 25 %)")


if __name__ == "__main__":
    main()
    megatron_validation()
    moe_validation()
    cluster_timing()
