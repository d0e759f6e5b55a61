"""Efficiency by GEMM shape (services/synthesis/evaluate/gemm.py; docs/training.md, "Efficiency by GEMM shape"):
the fitted curve against the published DeepGEMM table it was solved from, its monotonicity, and how the hybrid
model prices routed experts (and the TP collectives of MoE layers folded over TP) with it."""

from __future__ import annotations

import statistics

import pytest

from services.synthesis.evaluate.devices import gpu_profile
from services.synthesis.evaluate.fabrics import switched_fabric
from services.synthesis.evaluate.gemm import (
    GEMM_POINTS,
    PEAK_TFLOPS,
    expert_time_factor,
    gemm_curve,
    gemm_efficiency,
    mlp_seconds_per_flop,
    tokens_per_expert,
)
from services.synthesis.evaluate.parallelism import Job, Strategy, breakdown, traffic
from services.synthesis.evaluate.transformer import Transformer
from services.synthesis.schedule.cost import LinkModel


def test_curve_reproduces_the_published_table():
    res = [gemm_efficiency(m, n, k) / (t / PEAK_TFLOPS) - 1 for m, n, k, t in GEMM_POINTS]
    c = gemm_curve()
    assert statistics.median(abs(r) for r in res) == pytest.approx(c.median_residual)
    assert max(abs(r) for r in res) == pytest.approx(c.max_residual)
    assert c.median_residual < 0.10
    # every training-sized shape (m >= 256) within 25 % of its published throughput
    assert all(abs(r) <= 0.25 for r, (m, *_) in zip(res, GEMM_POINTS) if m >= 256)


def test_efficiency_grows_with_every_dimension():
    base = gemm_efficiency(512, 1536, 4096)
    assert gemm_efficiency(1024, 1536, 4096) > base and gemm_efficiency(512, 3072, 4096) > base
    assert gemm_efficiency(512, 1536, 8192) > base and gemm_efficiency(1 << 20, 1 << 20, 1 << 20) < 1 / gemm_curve().a


def test_expert_factor_is_one_at_the_dense_shape_and_grows_as_experts_shrink():
    # 2 experts as wide as the dense MLP, each taking every token (top 2), one rank: the dense MLP's own shapes
    assert expert_time_factor(4096, 1024, 4096, 1, 4096, 2, 2, 1, 1, False) == pytest.approx(1.0)
    assert tokens_per_expert(4096, 8, 128, 4, 8, 1) == 512
    f = [expert_time_factor(4096, 4096, 12288, 2, 1536, 8, 128, ep, 1, True) for ep in (8, 16, 32, 64)]
    assert f == sorted(f, reverse=True) and f[-1] > 1
    assert mlp_seconds_per_flop(512, 1536, 4096, True) > mlp_seconds_per_flop(4096, 1536, 4096, True)


MOE = Transformer(
    hidden=1024, layers=4, heads=16, seq_len=1024, vocab=1000, experts=16, top_k=2, moe_every=1, expert_ffn_hidden=512
)
DENSE = Transformer(hidden=1024, layers=4, heads=16, seq_len=1024, vocab=1000)
H100 = gpu_profile("h100")


def _job(model):
    return Job(model, "t", 64, H100, 2, 8, attention="full")


def test_routed_experts_priced_at_their_shape():
    fab = switched_fabric("fat-tree", 2, 8, LinkModel.from_units(5, 800))
    s = Strategy(1, 1, 16, ep=8, zero=1)
    m = MOE
    slow = expert_time_factor(m.seq_len, m.hidden, m.ffn, 1, 512, 2, 16, 8, 1, False)
    assert slow > 1
    flops = m.forward_flops_per_token() + m.routed_expert_flops_per_token() * (slow - 1)
    expected = 3 * H100.seconds(flops * m.seq_len, "bf16", m.hidden) * (64 // 16)
    assert breakdown(_job(m), s, fab).compute == pytest.approx(expected)
    # a dense model is priced as before: e(h) on every FLOP
    d = DENSE
    assert breakdown(_job(d), s.__class__(1, 1, 16, zero=1), fab).compute == pytest.approx(
        3 * H100.seconds(d.forward_flops_per_token() * d.seq_len, "bf16", d.hidden) * 4
    )


def test_moe_layers_folded_over_tp_have_only_the_attention_tp_collectives():
    a = 2 * 1024 * 1024
    # tp 2, ep 16 over tp x dp = 16 ranks: etp 1; 4 layers, all MoE: 2 allreduce-equivalents a layer
    t = traffic(_job(MOE), Strategy(2, 1, 8, ep=16, zero=1))
    assert t.tp == pytest.approx(8 * 4 * 2 * 2 * (1 / 2) * a)
    # the same with the experts split like the dense layers (ep 8 over dp 8, etp = tp 2): 4 a layer
    t = traffic(_job(MOE), Strategy(2, 1, 8, ep=8, zero=1))
    assert t.tp == pytest.approx(8 * 4 * 4 * 2 * (1 / 2) * a)
