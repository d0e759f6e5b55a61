"""Simulated large-scale MoE training, the paper's Fig. 9 setting (section 8.3, App. A.4), and the
hybrid-parallel model's predictions beside published training runs (`services.synthesis.evaluate.published_runs`:
Narayanan et al. SC'21 Tables 1-2, Korthikanti et al. 2022, Dubey et al. 2024 Table 4): the constants re-solved
from the calibration rows, then every row predicted, split into calibration rows and held-out rows, with a
summary line (median and largest absolute error of the held-out rows against the targets 10 % / 25 %),
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


def published_validation() -> list[float]:
    """The validation table of docs/benchmarks.md: calibration solved again, then every published run; returns
    the held-out rows' errors."""
    from services.synthesis.evaluate.devices import A100_EFFICIENCY, H100_E_MAX
    from services.synthesis.evaluate.gemm import GEMM_POINTS, gemm_curve
    from services.synthesis.evaluate.parallelism import ZERO3_EFFICIENCY
    from services.synthesis.evaluate.published_runs import calibrate, summary, validation

    t0, c0 = time.perf_counter(), cpu_s()
    fit = calibrate()
    print("\nCalibration (solved from the calibration rows only; in the code):")
    print(f"  A100 e(h) = e_max h/(h + h0): e_max {fit['a100_e_max']:.4f} (code {A100_EFFICIENCY[0]}), "
          f"h0 {fit['a100_h0']:.1f} (code {A100_EFFICIENCY[1]})")
    print(f"  ZeRO-3 implementation efficiency {fit['zero3_efficiency']:.4f} (code {ZERO3_EFFICIENCY})")
    print(f"  H100 e_max {fit['h100_e_max']:.4f} (code {H100_E_MAX})")
    g = gemm_curve()
    print(f"  GEMM shape curve 1/e = a + b/m + c/n + d/k (gemm.py; routed experts only), from DeepGEMM's published "
          f"table ({len(GEMM_POINTS)} shapes): a {g.a:.4f}, b {g.b:.1f}, c {g.c:.1f}, d {g.d:.1f}; residual median "
          f"{g.median_residual:.1%}, largest {g.max_residual:.1%}")
    preds = validation()
    for title, rows in (("calibration rows", [p for p in preds if p.run.calibration]),
                        ("held-out rows (predictions)", [p for p in preds if not p.run.calibration])):
        print(f"\n{title}")
        print(f"{'run':<30} {'GPUs':>6} {'published':>9} {'predicted':>9} {'error':>7}  strategy (searched keys too)"
              f"  exposed (bubble / TP / CP / PP / DP, % of iteration)")
        for p in rows:
            s, b, it = p.result.strategy, p.result.breakdown, p.result.iteration_s
            parts = " / ".join(f"{x / it:.0%}" for x in (b.bubble, b.tp, b.cp, b.pp, b.dp))
            print(f"{p.run.key:<30} {p.run.gpus:>6} {p.run.measured_tflops:>9.1f} {p.predicted_tflops:>9.1f} "
                  f"{p.error:>+7.1%}  tp {s.tp} pp {s.pp} dp {s.dp} cp {s.cp} zero {s.zero} mb {s.micro_batch} "
                  f"vp {s.interleave} {s.recompute}{' sp' if s.sp else ''}  {parts}")
    sm = summary(preds)
    print(f"\nsummary: {sm['rows']} held-out rows, median absolute error {sm['median']:.1%}, largest "
          f"{sm['max']:.1%} (targets 10 % / 25 %: {'met' if sm['meets_targets'] else 'NOT met'}); "
          f"{time.perf_counter() - t0:.1f} s wall, {cpu_s() - c0:.1f} s CPU")
    return [p.error for p in preds if not p.run.calibration]


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

def moe_validation(dense_errors: list[float]) -> None:
    import statistics

    from bench.moe_runs import moe_validation as table

    errors = table()
    ranked = sorted(abs(e) for e in errors)
    print(f"MoE rows not used for calibration: {len(errors)}, median absolute error {statistics.median(ranked):.1%}, "
          f"largest {ranked[-1]:.1%} (target: each at most 25 %)")
    every = [abs(e) for e in dense_errors + errors]
    print(f"all held-out rows (dense and MoE): {len(every)}, median absolute error {statistics.median(every):.1%}, "
          f"largest {max(every):.1%}, above 25 %: {sum(e > 0.25 for e in every)} (targets 10 % / 25 %)")


if __name__ == "__main__":
    import sys

    if "--validation" not in sys.argv[1:]:
        main()
    moe_validation(published_validation())
    cluster_timing()
