"""Matrix-product efficiency by GEMM shape (m, n, k), and what it makes of a mixture-of-experts layer's expert
GEMMs (docs/training.md, "Efficiency by GEMM shape").

A GEMM of m x k by k x n does 2 m n k FLOPs and moves at least the three matrices, (m k + k n + m n) elements;
its time is the tensor-core time plus what the data movement, the tile edges and the pipeline's prologue and
epilogue add, each in proportion to one reciprocal dimension (the roofline's bytes per FLOP are
(1/m + 1/n + 1/k)/2 elements):

    1/e(m, n, k) = a + b/m + c/n + d/k                     (`gemm_efficiency`)

with (a, b, c, d) solved by least squares on relative error (linear in 1/e) from a published benchmark table,
`GEMM_POINTS`: DeepSeek-AI's DeepGEMM README (github.com/deepseek-ai/DeepGEMM, first release, February 2025:
"Normal GEMMs for dense models", "Grouped GEMMs for MoE models (contiguous layout)" and "(masked layout)", H800
SXM, FP8 with BF16 output), TFLOP/s per shape over the 1979 TFLOP/s FP8 dense peak. Why an FP8 table prices BF16
products: on the H100/H800 the BF16 peak is half the FP8 one and a BF16 element twice the bytes, so the memory
term's share at a given shape, (peak / HBM bandwidth) x bytes per FLOP, is the same at both precisions; the tile
and wave effects are those of the same tensor cores. Fit quality: `bench.training` prints it (median residual
6.4 %, largest 46 % on the thinnest shape, m = 64, n = 2112, where the fit is too fast).

Use: the hybrid model's per-device efficiency e(h) (`devices`) was solved from whole dense layers, whose GEMMs
have the micro-batch's tokens as m and the feed-forward width over tp as n. A routed expert's GEMMs see only the
tokens routed to that expert, s b top_k etp ep / (E tp) per micro-batch (balanced routing), and the expert width
over etp; `expert_time_factor` is the time per FLOP of the expert MLP's six GEMMs (forward, input gradient,
weight gradient of both projections) over that of the same model's dense MLP at the calibrated shapes. Dense
models never use it, so the calibration rows are unchanged; it multiplies the routed experts' compute only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

__all__ = [
    "GEMM_POINTS",
    "GEMM_SOURCE",
    "GemmCurve",
    "expert_time_factor",
    "gemm_curve",
    "gemm_efficiency",
    "mlp_seconds_per_flop",
    "tokens_per_expert",
]

GEMM_SOURCE = (
    "DeepSeek-AI, DeepGEMM README (github.com/deepseek-ai/DeepGEMM, February 2025), tables 'Normal GEMMs "
    "for dense models' and 'Grouped GEMMs for MoE models' (contiguous and masked layouts): H800 SXM, FP8, "
    "TFLOP/s per (groups, m per group, n, k), over the 1979 TFLOP/s FP8 dense peak"
)
PEAK_TFLOPS = 1979.0  # H800/H100 SXM FP8 dense peak (NVIDIA H100 datasheet, sparsity halved)

# (m per group, n, k, TFLOP/s) as the DeepGEMM README lists them; grouped rows give m per group
GEMM_POINTS: tuple[tuple[int, int, int, float], ...] = (
    # Normal GEMMs for dense models
    (64, 2112, 7168, 206),
    (64, 24576, 1536, 289),
    (64, 32768, 512, 219),
    (64, 7168, 16384, 336),
    (64, 4096, 7168, 287),
    (64, 7168, 2048, 295),
    (128, 2112, 7168, 352),
    (128, 24576, 1536, 535),
    (128, 32768, 512, 358),
    (128, 7168, 16384, 645),
    (128, 4096, 7168, 533),
    (128, 7168, 2048, 510),
    (4096, 2112, 7168, 1058),
    (4096, 24576, 1536, 990),
    (4096, 32768, 512, 590),
    (4096, 7168, 16384, 1358),
    (4096, 4096, 7168, 1304),
    (4096, 7168, 2048, 1025),
    # Grouped GEMMs, contiguous layout (4 groups of 8192, 8 groups of 4096)
    (8192, 4096, 7168, 1297),
    (8192, 7168, 2048, 1099),
    (4096, 4096, 7168, 1288),
    (4096, 7168, 2048, 1093),
    # Grouped GEMMs, masked layout (1 x 1024, 2 x 512, 4 x 256)
    (1024, 4096, 7168, 1233),
    (1024, 7168, 2048, 925),
    (512, 4096, 7168, 1040),
    (512, 7168, 2048, 916),
    (256, 4096, 7168, 932),
    (256, 7168, 2048, 815),
)


@dataclass(frozen=True)
class GemmCurve:
    """1/e = a + b/m + c/n + d/k (module docstring), with the fit's residuals (model / measured - 1)."""

    a: float
    b: float
    c: float
    d: float
    median_residual: float
    max_residual: float

    def efficiency(self, m: float, n: float, k: float) -> float:
        return 1.0 / (self.a + self.b / m + self.c / n + self.d / k)


@cache
def gemm_curve() -> GemmCurve:
    """Least squares on relative error of 1/e over `GEMM_POINTS` (linear in a, b, c, d: each row divided by its
    measured 1/e). Solved once (4 unknowns, 28 rows).

    >>> c = gemm_curve(); round(c.efficiency(4096, 7168, 16384), 2), round(c.efficiency(256, 7168, 2048), 2)
    (0.82, 0.35)
    """
    p = np.array(GEMM_POINTS, dtype=float)
    inv = PEAK_TFLOPS / p[:, 3]
    rows = np.column_stack([np.ones(len(p)), 1 / p[:, 0], 1 / p[:, 1], 1 / p[:, 2]]) / inv[:, None]
    coef = np.linalg.lstsq(rows, np.ones(len(p)), rcond=None)[0]
    a, b, c, d = (float(x) for x in coef)
    pred = 1.0 / (a + b / p[:, 0] + c / p[:, 1] + d / p[:, 2])
    res = np.abs(pred / (p[:, 3] / PEAK_TFLOPS) - 1)
    return GemmCurve(a, b, c, d, float(np.median(res)), float(res.max()))


def gemm_efficiency(m: float, n: float, k: float) -> float:
    """The fraction of the dense peak a GEMM of m x k by k x n reaches (module docstring)."""
    return gemm_curve().efficiency(m, n, k)


def mlp_seconds_per_flop(tokens: float, width: float, hidden: int, gated: bool) -> float:
    """Time per FLOP (in units of 1/peak) of one MLP's forward and backward GEMMs over `tokens` rows: the first
    projection h -> (2 if gated else 1) width, the second width -> h; each forward, input gradient and weight
    gradient (the last with the tokens as its inner dimension)."""
    w1 = (2 if gated else 1) * width
    # forward, input gradients, weight gradients (the tokens the inner dimension)
    shapes = (
        (tokens, w1, hidden),
        (tokens, hidden, width),
        (tokens, hidden, w1),
        (tokens, width, hidden),
        (hidden, w1, tokens),
        (width, hidden, tokens),
    )
    flops = [m * n * k for m, n, k in shapes]
    return sum(f / gemm_efficiency(*s) for f, s in zip(flops, shapes)) / sum(flops)


def tokens_per_expert(seq_tokens: float, top_k: int, experts: int, tp: int, ep: int, etp: int) -> float:
    """Rows of one routed expert's GEMMs per micro-batch: the stage's dp s b tokens, top_k copies each, over the
    E experts' edp = tp dp / (etp ep) replicas (balanced routing): s b top_k etp ep / (E tp).

    >>> tokens_per_expert(4096, 8, 128, 4, 8, 1), tokens_per_expert(4096, 8, 128, 2, 32, 1)   # Qwen3 TP 4 / TP 2
    (512.0, 4096.0)
    """
    return seq_tokens * top_k * etp * ep / (experts * tp)


def expert_time_factor(
    seq_tokens: float,
    hidden: int,
    dense_width: int,
    tp: int,
    expert_width: int,
    top_k: int,
    experts: int,
    ep: int,
    etp: int,
    gated: bool,
) -> float:
    """The routed experts' time per FLOP over the calibrated dense MLP's (module docstring): the expert MLP at
    `tokens_per_expert` rows and width expert_width / etp, against the dense MLP at the micro-batch's
    `seq_tokens` rows and width dense_width / tp.

    >>> round(expert_time_factor(4096, 4096, 12288, 4, 1536, 8, 128, 8, 1, True), 2)    # Qwen3 TP 4, EP 8
    1.88
    """
    m_e = tokens_per_expert(seq_tokens, top_k, experts, tp, ep, etp)
    return mlp_seconds_per_flop(m_e, expert_width / etp, hidden, gated) / mlp_seconds_per_flop(
        seq_tokens, dense_width / tp, hidden, gated
    )
