"""Published training runs the hybrid-parallel model (`parallelism`) is validated against (docs/training.md,
docs/benchmarks.md): one typed row per run, with its source (paper and table), its configuration as published,
the cluster it ran on and the measured throughput; rows marked `calibration` set a constant of the model
(`devices.A100_EFFICIENCY`, `devices.H100_E_MAX`, `parallelism.ZERO3_EFFICIENCY`), every other row is a
prediction. Adding a run is adding a `PublishedRun` to `RUNS`.

Throughput conventions (`PublishedRun.flops`), as each source counts:
- "eq3": Narayanan et al. SC'21 equation (3), 96 B s l h^2 (1 + s/6h + V/16lh) per iteration: counts the
  recomputed forward of full activation recomputation (every run of their Tables 1 and 2);
- "model": model FLOPs, 3 x the forward's matrix products and attention scores (no causal halving, no
  recomputation; `Job.model_flops`): Korthikanti et al. 2022's MFU (section 6.3, 72 B s l h^2 (1 + s/6h +
  V/12lh)) and Chowdhery et al. 2022's MFU (PaLM, appendix B: 6 N + 12 L H Q T per token), which the Llama 3
  paper's "BF16 MFU" is read as (an assumption: the paper does not spell out its count).
- "model-causal": model FLOPs with the attention scores of a causal model at half (the masked half is never
  computed: FlashAttention-2, Dao 2023). The Llama 3 rows are read this way (an assumption, the paper does
  not say; with "model" the 131,072-token row's count would be 1.4x larger, since its attention scores are
  57 % of the model FLOPs: docs/training.md).
Measured values are TFLOP/s per GPU in that convention (MFU x the dense BF16 peak where a paper gives MFU).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from services.synthesis.evaluate.devices import GpuProfile, gpu_profile
from services.synthesis.evaluate.fabrics import switched_fabric
from services.synthesis.evaluate.parallelism import Job, StrategyResult, search
from services.synthesis.evaluate.transformer import LLM_CATALOG, Transformer
from services.synthesis.schedule.cost import LinkModel

__all__ = ["Prediction", "PublishedRun", "RUNS", "calibrate", "predict", "summary", "validation"]

TARGET_MEDIAN, TARGET_MAX = 0.10, 0.25


@dataclass(frozen=True)
class PublishedRun:
    key: str                       # short label, unique
    source: str                    # paper, table or figure, row
    model: Transformer
    device: str                    # devices.GPU_PROFILES key
    gpus: int
    global_batch: int              # sequences per iteration
    measured_tflops: float         # per GPU, in the `flops` convention
    fixed: dict = field(default_factory=dict)    # the configuration as published (parallelism keys)
    gpus_per_host: int = 8
    host_gbps: float = 1600.0      # a host's NIC egress (DGX A100: 8 x 200 Gb/s HDR InfiniBand)
    fabric: str = "fat-tree"       # fabrics.SWITCHED name
    flops: str = "eq3"             # "eq3", "model" or "model-causal" (module docstring)
    attention: str = "full"        # executed attention-score FLOPs (parallelism.Job.attention)
    calibration: str = ""          # the constant this row sets; "" for a prediction
    note: str = ""


@dataclass(frozen=True)
class Prediction:
    run: PublishedRun
    predicted_tflops: float
    result: StrategyResult

    @property
    def error(self) -> float:
        return self.predicted_tflops / self.run.measured_tflops - 1


def _gpt(hidden: int, layers: int, heads: int, seq: int = 2048, vocab: int = 51200) -> Transformer:
    return Transformer(hidden=hidden, layers=layers, heads=heads, seq_len=seq, vocab=vocab)


_NAR = "Narayanan et al. SC'21"
_FULL = {"recompute": "full", "sp": False}          # 2021 Megatron-LM: full recomputation, no SP
# Table 1 (weak scaling; micro-batch not given: searched): (B params, heads, hidden, layers, tp, pp, GPUs, batch,
# TFLOP/s per GPU)
_T1 = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
       (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
       (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
       (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
       (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)]
_T1_CAL = {1.7: "A100 efficiency curve (with the 1008B row)", 1008.0: "A100 efficiency curve (with the 1.7B row)"}
_GPT175, _GPT530 = _gpt(12288, 96, 96), _gpt(20480, 105, 128)

RUNS: list[PublishedRun] = [
    *[PublishedRun(f"megatron-t1-{p}B", f"{_NAR}, Table 1, {p}B row", _gpt(h, l, a), "a100", n, b, tf,
                   {"tp": tp, "pp": pp, **_FULL}, calibration=_T1_CAL.get(p, ""))
      for p, a, h, l, tp, pp, n, b, tf in _T1],
    # Table 2: PTD-P (model-parallel size 96 = tp 8 x pp 12 and 280 = tp 8 x pp 35, micro-batch 1) against
    # DeepSpeed ZeRO-3 without model parallelism (micro-batch as listed), same batch, same cluster
    *[PublishedRun(f"megatron-t2-ptdp-175B-{n}", f"{_NAR}, Table 2, PTD-P 174.6B, {n} GPUs", _GPT175, "a100", n,
                   1536, tf, {"tp": 8, "pp": 12, "micro_batch": 1, **_FULL})
      for n, tf in ((384, 153), (768, 149), (1536, 141))],
    *[PublishedRun(f"megatron-t2-ptdp-530B-{n}", f"{_NAR}, Table 2, PTD-P 529.6B, {n} GPUs", _GPT530, "a100", n,
                   2240, tf, {"tp": 8, "pp": 35, "micro_batch": 1, **_FULL})
      for n, tf in ((560, 171), (1120, 167), (2240, 159))],
    *[PublishedRun(f"megatron-t2-zero3-175B-{n}", f"{_NAR}, Table 2, ZeRO-3 174.6B, {n} GPUs", _GPT175, "a100", n,
                   1536, tf, {"tp": 1, "pp": 1, "zero": 3, "micro_batch": mb, **_FULL},
                   calibration="ZeRO-3 implementation efficiency" if n == 1536 else "")
      for n, mb, tf in ((384, 4, 144), (768, 2, 88), (1536, 1, 44))],
    *[PublishedRun(f"megatron-t2-zero3-530B-{n}", f"{_NAR}, Table 2, ZeRO-3 529.6B, {n} GPUs", _GPT530, "a100", n,
                   b, tf, {"tp": 1, "pp": 1, "zero": 3, "micro_batch": mb, **_FULL})
      for n, b, mb, tf in ((640, 2560, 4, 138), (1120, 2240, 2, 98), (2240, 2240, 1, 48))],
    # Korthikanti et al. 2022, Table 3 (configurations) and section 6.3 (MFU, with sequence parallelism and
    # selective recomputation): MFU x 312 TFLOP/s
    *[PublishedRun(f"korthikanti-{name}", f"Korthikanti et al. 2022, Tables 3-4, {name} (SP + selective, MFU "
                   f"{mfu} %)", _gpt(h, l, a), "a100", n, b, round(mfu / 100 * 312, 1),
                   {"tp": 8, "pp": pp, "recompute": "selective", "sp": True}, flops="model")
      for name, a, h, l, pp, n, b, mfu in (("22B", 64, 6144, 48, 1, 8, 4, 41.5),
                                           ("175B", 96, 12288, 96, 8, 64, 64, 51.4),
                                           ("530B", 128, 20480, 105, 35, 280, 280, 56.0),
                                           ("1T", 160, 25600, 128, 64, 512, 512, 56.3))],
    # Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4: 405B on H100 (8 a host, 400 Gb/s per GPU on RoCE),
    # 16M tokens a batch, BF16; TFLOP/s per GPU as published
    PublishedRun("llama3-405b-8192", "Dubey et al. 2024, Table 4, 8,192 GPUs, seq 8192", LLM_CATALOG["llama3-405b"].model,
                 "h100", 8192, 2048, 430, {"tp": 8, "pp": 16, "cp": 1}, host_gbps=3200, flops="model-causal",
                 attention="causal", calibration="H100 e_max"),
    PublishedRun("llama3-405b-16384", "Dubey et al. 2024, Table 4, 16,384 GPUs, seq 8192",
                 LLM_CATALOG["llama3-405b"].model, "h100", 16384, 2048, 400, {"tp": 8, "pp": 16, "cp": 1},
                 host_gbps=3200, flops="model-causal", attention="causal"),
    PublishedRun("llama3-405b-16384-cp16", "Dubey et al. 2024, Table 4, 16,384 GPUs, seq 131072, CP 16",
                 LLM_CATALOG["llama3-405b"].model.model_copy(update={"seq_len": 131072}), "h100", 16384, 128, 380,
                 {"tp": 8, "pp": 16, "cp": 16}, host_gbps=3200, flops="model-causal", attention="causal"),
]


def _eq3(model: Transformer, batch: int) -> float:
    s, h, l, v = model.seq_len, model.hidden, model.layers, model.vocab
    return 96.0 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def predict(run: PublishedRun, *, device: GpuProfile | None = None,
            zero3_efficiency: float | None = None) -> Prediction:
    """The model's fastest strategy for the run's published configuration on its cluster (the keys it does
    not publish searched), as TFLOP/s per GPU in the run's convention. `device` and `zero3_efficiency`
    override the calibrated constants (what `calibrate` solves for)."""
    dev = device or gpu_profile(run.device)
    hosts = run.gpus // run.gpus_per_host
    kw = {} if zero3_efficiency is None else {"zero3_efficiency": zero3_efficiency}
    job = Job(run.model, run.key, run.global_batch, dev, hosts, run.gpus_per_host, attention=run.attention, **kw)
    fabric = switched_fabric(run.fabric, hosts, run.gpus_per_host, LinkModel.from_units(5, run.host_gbps))
    r = search(job, fabric, run.fixed)
    if run.flops == "eq3":
        flops = _eq3(run.model, run.global_batch)
    else:
        flops = job.model_flops()
        if run.flops == "model-causal":
            m = run.model            # the masked half of the scores, forward and backward (3x)
            flops -= 3.0 * m.attention_score_flops_per_token() / 2 * m.seq_len * run.global_batch
    return Prediction(run, flops / r.iteration_s / run.gpus / 1e12, r)


def _bisect(f, lo: float, hi: float, steps: int = 30) -> float:
    """x in [lo, hi] with f(x) = 0, f increasing."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _run(key: str) -> PublishedRun:
    return next(r for r in RUNS if r.key == key)


def calibrate() -> dict:
    """Solve the model's constants from the calibration rows only (module docstring): the A100's (e_max, h0)
    from the two Table 1 rows, the ZeRO-3 efficiency from the ZeRO-3 175B run on 1536 GPUs (with that A100
    curve), the H100's e_max from the Llama 3 run on 8,192 GPUs (with the roofline h0)."""
    small, large = _run("megatron-t1-1.7B"), _run("megatron-t1-1008.0B")
    a100 = gpu_profile("a100")

    def e_max_for(h0: float) -> float:
        def gap(e: float) -> float:
            dev = a100.model_copy(update={"efficiency": e, "efficiency_h0": h0})
            return predict(large, device=dev).predicted_tflops - large.measured_tflops
        return _bisect(gap, 0.3, 1.0, 24)

    def small_gap(h0: float) -> float:          # decreasing in h0: negate
        dev = a100.model_copy(update={"efficiency": e_max_for(h0), "efficiency_h0": h0})
        return small.measured_tflops - predict(small, device=dev).predicted_tflops

    h0 = _bisect(small_gap, 0.0, 4000.0, 18)
    e_max = e_max_for(h0)
    z3 = _run("megatron-t2-zero3-175B-1536")
    a100_fit = a100.model_copy(update={"efficiency": e_max, "efficiency_h0": h0})
    eta = _bisect(lambda x: predict(z3, device=a100_fit, zero3_efficiency=x).predicted_tflops - z3.measured_tflops,
                  0.005, 1.0, 24)
    ll = _run("llama3-405b-8192")
    h100 = gpu_profile("h100")
    h100_e = _bisect(lambda e: predict(ll, device=h100.model_copy(update={"efficiency": e})).predicted_tflops
                     - ll.measured_tflops, 0.2, 1.0, 24)
    return {"a100_e_max": e_max, "a100_h0": h0, "zero3_efficiency": eta, "h100_e_max": h100_e}


def validation(runs: list[PublishedRun] | None = None) -> list[Prediction]:
    """Every run (or `runs`) predicted with the constants in the code."""
    return [predict(r) for r in (RUNS if runs is None else runs)]


def summary(predictions: list[Prediction]) -> dict:
    """Median and largest absolute error of the rows not used for calibration, and whether they meet the
    targets (median <= 10 %, none above 25 %)."""
    errs = [abs(p.error) for p in predictions if not p.run.calibration]
    if not errs:
        return {"rows": 0, "median": 0.0, "max": 0.0, "meets_targets": True}
    med, worst = statistics.median(errs), max(errs)
    return {"rows": len(errs), "median": med, "max": worst,
            "meets_targets": med <= TARGET_MEDIAN and worst <= TARGET_MAX}
