"""Published mixture-of-experts training runs with expert parallelism beside the hybrid model's predictions
(docs/training.md, "Mixture of experts"; docs/benchmarks.md). `bench/training.py` prints them with the other
published runs; tests/synthesis/evaluate/test_moe.py holds the rows not used for calibration to the target
(absolute error at most 25 % each).

    python -m bench.moe_runs

One row is used for calibration: the all-to-all row gives the host time per local expert and grouped-GEMM
call (`moe.HOST_EXPERT_S`, `calibrate_host`); no other constant of the MoE model was fitted (the communication SM
share, the node limit, the bandwidths and the configurations are the publications' own). Each row fixes what its publication
states (tp, pp, ep, ZeRO stage, micro-batch, interleaving, the overlap and the dispatcher) and searches the rest
(recomputation where the publication names only some modules). Throughput is tokens per second per GPU:
global batch x sequence / iteration time / GPUs, against the published figure converted the same way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cache

__all__ = ["MOE_RUNS", "MoeRun", "moe_prediction", "without_memory_check"]


@dataclass(frozen=True)
class MoeRun:
    """One published run: the model (transformer hyperparameters), the cluster (device, hosts of 8 GPUs, NICs
    per host and their speed, on a non-blocking fat-tree), the batch and the strategy keys the publication
    states, the published throughput and where it comes from."""

    name: str
    source: str
    model: str                         # a `transformer.LLM_CATALOG` name or a key of `_MODELS`
    device: str                        # "h100" or "h800" (`_device`)
    hosts: int
    global_batch: int                  # sequences
    fixed: dict = field(default_factory=dict)
    published_tokens_per_gpu_s: float = 0.0
    published: str = ""                # how the published throughput was read
    precision: str = "bf16"
    nic_gbps: float = 400.0            # per NIC, 8 NICs a host (one per GPU)
    calibration: bool = False
    target_miss: str = ""              # why the row misses the 25 % target, when it does (docs/benchmarks.md)
    zero3_efficiency: float | None = None   # `Job.zero3_efficiency` for an implementation other than the calibrated one


@cache
def _models() -> dict:
    from services.synthesis.evaluate.transformer import LLM_CATALOG, Transformer

    # Qwen3-235B-A22B (Qwen team 2025, "Qwen3 Technical Report", Table 2: 94 layers, 64 query and 4 KV heads,
    # 128 experts, 8 activated; Hugging Face Qwen/Qwen3-235B-A22B config.json: hidden 4096, head_dim 128,
    # moe_intermediate_size 1536, every layer sparse, vocabulary 151936, untied): 235B parameters. Attention
    # weights: q 4096 x 8192, k and v 4096 x 512, o 8192 x 4096, q/k norms 128 each.
    qwen3 = Transformer(hidden=4096, layers=94, heads=64, kv_heads=4, head_dim=128, seq_len=4096, vocab=151936,
                        ffn_hidden=12288, expert_ffn_hidden=1536, experts=128, top_k=8, gated=True,
                        attention_params=2 * 4096 * 8192 + 2 * 4096 * 512 + 256)
    long = {f"qwen3-235b-a22b-{k}k": qwen3.model_copy(update={"seq_len": k * 1024}) for k in (16, 32, 64, 128)}
    return {"deepseek-v3": LLM_CATALOG["deepseek-v3"].model, "qwen3-235b-a22b": qwen3, **long}


def megatron_step_s(model, global_batch: int, tflops_per_gpu: float, gpus: int) -> float:
    """The step time a published TFLOP/s per GPU stands for, by Megatron-LM's own count (`training.py`,
    num_floating_point_operations, with which the ModelZoo reports; GQA, every layer an MoE layer, no shared
    experts): per token 12 L h (k f_e g) + 12 L h^2 (1 + kv/heads + s/(2h)) (heads d_head / h) + 6 h V, g = 3/2
    gated; the scores at half (the causal mask). Reproduces the readme's 4K rows: 29.0 s <-> 167 TFLOP/s."""
    m = model
    g = 1.5 if m.gated else 1.0
    q_ratio = m.heads * (m.head_dim or m.hidden // m.heads) / m.hidden
    per_token = (12 * m.layers * m.hidden * (m.k * (m.expert_ffn_hidden or m.ffn) * g)
                 + 12 * m.layers * m.hidden ** 2 * (1 + (m.kv_heads or m.heads) / m.heads
                                                    + m.seq_len / m.hidden / 2) * q_ratio
                 + 6 * m.hidden * m.vocab)
    return per_token * global_batch * m.seq_len / (tflops_per_gpu * 1e12 * gpus)


def _device(name: str):
    from services.synthesis.evaluate.devices import gpu_profile

    if name == "h800":
        # the H100 SXM's compute and HBM with the export version's NVLink: DeepSeek-V3 report section 3.2.2,
        # "NVLink offers a bandwidth of 160 GB/s"
        return gpu_profile("h100").model_copy(update={"name": "h800", "nvlink_Bps": 160e9,
                                                      "source": "H100 SXM with NVLink at 160 GB/s (DeepSeek-V3 "
                                                                "report section 3.2.2)"})
    return gpu_profile(name)


_ZOO = ("NVIDIA Megatron-MoE-ModelZoo (github.com/yanring/Megatron-MoE-ModelZoo), best_practice/Qwen3/readme.md, "
        "'Performance Results' (256 H100, NVLink 4, InfiniBand 8 x 50 GB/s a node; Qwen3-235B-A22B, BF16, sequence "
        "4096, global batch 2048, DeepEP dispatcher, the distributed optimizer taken as ZeRO-1)")
_QWEN3_ZOO = (_ZOO + ", cross-node EP strategy: TP 2, CP 1, EP 32, ETP 1, EDP 1, PP 8, VPP 4, DP 16, micro-batch 1, "
              "recomputation of norms and activations")

_LONG = ("NVIDIA Megatron-MoE-ModelZoo, best_practice/Qwen3/readme.md, 'Long Context' (H100, NVLink 4, InfiniBand "
         "8 x 50 GB/s; Qwen3-235B-A22B, DeepEP, BF16; 32 nodes, GBS 256; its command: PP 8, VPP 4, EP 8, "
         "--recompute-granularity selective --recompute-modules layernorm moe, forced balance with "
         "--moe-router-force-load-balancing), row ")


def _long_run(k: int, tp: int, cp: int, forced: float, dropless: float) -> MoeRun:
    """A row of the readme's long-context table at its forced-balance figure (the model routes balanced); the
    step time is Megatron-LM's FLOP count over the published TFLOP/s (`megatron_step_s`)."""
    seq, gpus = k * 1024, 256
    step = megatron_step_s(_models()[f"qwen3-235b-a22b-{k}k"], 256, forced, gpus)
    return MoeRun(f"qwen3-235b {k}K (256 H100, TP {tp}, CP {cp})",
                  _LONG + f"SEQ_LEN {seq}, TP {tp}, CP {cp}: {forced:g} TFLOP/s (forced balance) / {dropless:g} "
                  "(dropless)", f"qwen3-235b-a22b-{k}k", "h100", 32, 256,
                  {"tp": tp, "pp": 8, "ep": 8, "etp": 1, "cp": cp, "zero": 1, "micro_batch": 1, "interleave": 4,
                   "recompute": "moe", "moe_overlap": "none", "moe_dispatch": "deepep"},
                  256 * seq / step / gpus, f"256 x {seq} tokens / {step:.2f} s / 256 GPUs ({forced:g} TFLOP/s by "
                  "Megatron-LM's FLOP count)")


MOE_RUNS: list[MoeRun] = [
    MoeRun("deepseek-v3 (2048 H800)",
           "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report' (arXiv:2412.19437): section 3.1 (2048 H800, 8 a "
           "node, NVLink/NVSwitch in a node, InfiniBand between), 3.2 (PP 16, EP 64 over 8 nodes, ZeRO-1 data "
           "parallelism, no TP; DualPipe overlapping dispatch and combine with another micro-batch's compute; "
           "node-limited routing M = 4 with per-node dispatch and NVLink forwarding, 20 SMs for communication), "
           "3.2.2 (InfiniBand 50 GB/s, NVLink 160 GB/s per GPU), 4.2 (sequence 4096, batch 15360, M = 4), "
           "section 1 and Table 1 (180K H800 GPU hours per trillion tokens)",
           "deepseek-v3", "h800", 256, 15360,
           {"tp": 1, "pp": 16, "ep": 64, "zero": 1, "moe_overlap": "dualpipe", "moe_dispatch": "deepep"},
           1e12 / (180e3 * 3600), "1e12 tokens / (180,000 GPU hours x 3600 s)"),
    MoeRun("qwen3-235b (256 H100, no overlap)", _QWEN3_ZOO + "; first row: 19.7 s per step (245 TFLOP/s a GPU)",
           "qwen3-235b-a22b", "h100", 32, 2048,
           {"tp": 2, "pp": 8, "ep": 32, "zero": 1, "micro_batch": 1, "interleave": 4, "recompute": "selective",
            "moe_overlap": "none", "moe_dispatch": "deepep"},
           2048 * 4096 / 19.7 / 256, "2048 x 4096 tokens / 19.7 s / 256 GPUs"),
    MoeRun("qwen3-235b (256 H100, 1F1B overlap)",
           _QWEN3_ZOO + "; second row, '+1f1b overlap' (Megatron-Core --overlap-moe-expert-parallel-comm): 17.6 s "
           "per step (276 TFLOP/s a GPU)",
           "qwen3-235b-a22b", "h100", 32, 2048,
           {"tp": 2, "pp": 8, "ep": 32, "zero": 1, "micro_batch": 1, "interleave": 4, "recompute": "selective",
            "moe_overlap": "microbatch", "moe_dispatch": "deepep"},
           2048 * 4096 / 17.6 / 256, "2048 x 4096 tokens / 17.6 s / 256 GPUs"),
    MoeRun("qwen3-235b (256 H100, EP 8, FSDP)",
           _ZOO + ", intra-node EP strategy, first row: TP 2, EP 8, ETP 1, EDP 32, PP 1, DP 128, FSDP on (ZeRO-3 "
           "here), micro-batch 4, full recomputation: 17.6 s per step (276 TFLOP/s a GPU)",
           "qwen3-235b-a22b", "h100", 32, 2048,
           {"tp": 2, "pp": 1, "ep": 8, "etp": 1, "zero": 3, "micro_batch": 4, "recompute": "full",
            "moe_overlap": "none", "moe_dispatch": "deepep"},
           2048 * 4096 / 17.6 / 256, "2048 x 4096 tokens / 17.6 s / 256 GPUs",
           # Megatron-Core's FSDP, not the 2021 DeepSpeed ZeRO-3 that `parallelism.ZERO3_EFFICIENCY` was solved
           # from (Narayanan et al. SC'21 Table 2): priced at the schedules' bandwidth, with no fitted factor
           zero3_efficiency=1.0),
    MoeRun("qwen3-235b (256 H100, EP 8, PP 32, a2a)",
           _ZOO + ", intra-node EP strategy, second row: all-to-all dispatcher, TP 2, EP 8, ETP 1, PP 32, VPP 3, DP 4, "
           "micro-batch 1, recomputation of norms and activations: 24.2 s per step (200 TFLOP/s a GPU); 96 chunks "
           "of one layer, the embedding and the loss counted as layers (the ModelZoo's Qwen3 config: "
           "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split, 96 layers). "
           "Calibration row of `moe.HOST_EXPERT_S` (`calibrate_host`)",
           "qwen3-235b-a22b", "h100", 32, 2048,
           {"tp": 2, "pp": 32, "ep": 8, "etp": 1, "zero": 1, "micro_batch": 1, "interleave": 3,
            "recompute": "selective", "moe_overlap": "none", "moe_dispatch": "alltoall"},
           2048 * 4096 / 24.2 / 256, "2048 x 4096 tokens / 24.2 s / 256 GPUs", calibration=True),
    MoeRun("qwen3-235b (256 H100, EP 8, TP 4)",
           _ZOO + ", intra-node EP strategy, third row: TP 4, EP 8, ETP 1, EDP 4, PP 8, VPP 4, DP 8, micro-batch 1, "
           "no recomputation (taken as our 'selective', whose memory is what flash attention keeps): 29.0 s per "
           "step (167 TFLOP/s a GPU)",
           "qwen3-235b-a22b", "h100", 32, 2048,
           {"tp": 4, "pp": 8, "ep": 8, "etp": 1, "zero": 1, "micro_batch": 1, "interleave": 4,
            "recompute": "selective", "moe_overlap": "none", "moe_dispatch": "deepep"},
           2048 * 4096 / 29.0 / 256, "2048 x 4096 tokens / 29.0 s / 256 GPUs"),
    *[_long_run(k, 4, cp, forced, dropless) for k, cp, forced, dropless in
      ((16, 1, 295, 237), (32, 2, 335, 277), (64, 4, 368, 320), (128, 8, 389, 357))],
]


def moe_prediction(run: MoeRun, **override):
    """(predicted tokens per second per GPU, the strategy result) of `run` on its cluster: hosts of 8 GPUs, 8 NICs
    of `nic_gbps`, the ideal fat-tree, alpha 5 us; `override` replaces fixed keys (sensitivity: another overlap
    or dispatcher) or, with `precision=` and `host_expert_s=`, the precision and the host time per expert."""
    from services.synthesis.evaluate.parallelism import search

    job, fabric = _job_fabric(run, override.pop("precision", run.precision), override.pop("host_expert_s", None))
    r = search(job, fabric, {**run.fixed, **override})
    return run.global_batch * job.model.seq_len / r.iteration_s / job.gpus, r


def _job_fabric(run: MoeRun, precision: str, host_expert_s: float | None = None):
    from services.synthesis.evaluate.fabrics import switched_fabric
    from services.synthesis.evaluate.parallelism import Job
    from services.synthesis.schedule.cost import LinkModel

    kw: dict = {} if run.zero3_efficiency is None else {"zero3_efficiency": run.zero3_efficiency}
    if host_expert_s is not None:
        kw["host_expert_s"] = host_expert_s
    job = Job(_models()[run.model], run.name, run.global_batch, _device(run.device), run.hosts, 8, precision, **kw)
    return job, switched_fabric("fat-tree", run.hosts, 8, LinkModel.from_units(5, 8 * run.nic_gbps))


def without_memory_check(run: MoeRun, recompute: str = "selective") -> float:
    """Sensitivity of a row that misses on memory: the predicted tokens/s per GPU of its predicted strategy with
    `recompute` instead, evaluated without the HBM refusal."""
    from dataclasses import replace

    from services.synthesis.evaluate.parallelism import check, evaluate

    job, fabric = _job_fabric(run, run.precision)
    s = replace(moe_prediction(run)[1].strategy, recompute=recompute)
    check(replace(job, device=job.device.model_copy(update={"hbm_bytes": 1e14})), s)   # every other rule still holds
    r = evaluate(job, s, fabric, checked=True)
    return run.global_batch * job.model.seq_len / r.iteration_s / job.gpus


def calibrate_host() -> float:
    """`moe.HOST_EXPERT_S` solved from the calibration row: the host time per local expert and grouped-GEMM call
    at which the row's predicted throughput equals the published one (the iteration time is linear in it)."""
    run = next(r for r in MOE_RUNS if r.calibration)
    lo, hi = 0.0, 1e-3
    for _ in range(40):
        mid = (lo + hi) / 2
        if moe_prediction(run, host_expert_s=mid)[0] > run.published_tokens_per_gpu_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _expert_factor(run: MoeRun, s) -> float:
    """The routed experts' time per FLOP over the dense MLP's (`parallelism.expert_slowdown`) under the row's
    predicted strategy `s`."""
    from services.synthesis.evaluate.parallelism import expert_slowdown

    return expert_slowdown(_job_fabric(run, run.precision)[0], s)


def moe_validation() -> list[float]:
    """Print the table; return the errors of the rows not used for calibration."""
    from services.synthesis.evaluate.moe import HOST_EXPERT_S

    t0 = time.perf_counter()
    print("\nMixture-of-experts runs with expert parallelism ('cal' marks the calibration row of moe.HOST_EXPERT_S, "
          f"{HOST_EXPERT_S * 1e6:.1f} us; solved again here: {calibrate_host() * 1e6:.1f} us): tokens/s per GPU")
    print(f"{'run':<44} {'published':>9} {'predicted':>9} {'error':>7} {'no host':>8} {'no overlap':>10} "
          f"{'alltoall':>9} {'fp8 peak':>9} {'expert x':>8}  strategy; exposed EP / host / bubble (% of iteration)")
    errors = []
    for run in MOE_RUNS:
        pred, r = moe_prediction(run)
        err = pred / run.published_tokens_per_gpu_s - 1
        if not run.calibration:
            errors.append(err)
        no_host = moe_prediction(run, host_expert_s=0.0)[0]
        plain = moe_prediction(run, moe_overlap="none")[0]
        per_copy = moe_prediction(run, moe_dispatch="alltoall")[0]
        fp8 = moe_prediction(run, precision="fp8")[0]
        s, b = r.strategy, r.breakdown
        name = run.name + (" cal" if run.calibration else "")
        print(f"{name:<44} {run.published_tokens_per_gpu_s:>9.0f} {pred:>9.0f} {err:>+7.1%} {no_host:>8.0f} "
              f"{plain:>10.0f} {per_copy:>9.0f} {fp8:>9.0f} {_expert_factor(run, s):>8.2f}  tp {s.tp} pp {s.pp} "
              f"dp {s.dp} ep {s.ep} zero {s.zero} mb {s.micro_batch} vp {s.interleave} {s.recompute} "
              f"{s.moe_overlap} {s.moe_dispatch}; {b.ep / r.iteration_s:.1%} / {b.host / r.iteration_s:.1%} / "
              f"{b.bubble / r.iteration_s:.1%}")
    print(f"'no host' drops the host time the GPU waits for (moe.exposed_host: a CUDA-graphed or sync-free stack); "
          f"'no overlap', 'alltoall' (every copy of a token on its own) and 'fp8 peak' (the same efficiency at the "
          f"FP8 dense peak) change one thing of the row's configuration; 'expert x' is the routed experts' time per "
          f"FLOP over the dense MLP's at their GEMM shapes (gemm.expert_time_factor) ({time.perf_counter() - t0:.1f} s)")
    for run in MOE_RUNS:
        if run.target_miss:
            print(f"{run.name} misses the target on {run.target_miss}.")
        if run.target_miss.startswith("memory"):
            alt = without_memory_check(run)
            print(f"  With selective recomputation and no HBM check: {alt:.0f} tokens/s per GPU "
                  f"({alt / run.published_tokens_per_gpu_s - 1:+.1%}).")
    return errors


if __name__ == "__main__":
    moe_validation()
