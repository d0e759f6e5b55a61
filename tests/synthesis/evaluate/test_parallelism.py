"""The hybrid-parallel model's data-parallel pricing per layer (ZeRO section 5: collectives as issued, overlap
limited by each layer's compute, NVLink shared with TP), sequence and context parallelism in the memory model
(Korthikanti et al. 2022, section 4.1 and Table 2) and the strategy the search picks where a publication
compared strategies (Narayanan et al. SC'21, Table 2)."""
from __future__ import annotations

import pytest

from services.synthesis.evaluate.devices import gpu_profile
from services.synthesis.evaluate.fabrics import switched_fabric
from services.synthesis.evaluate.parallelism import (
    Job, Strategy, breakdown, check, layer_exposure, memory, parse_parallelism, search, strategies)
from services.synthesis.evaluate.transformer import LLM_CATALOG, Transformer
from services.synthesis.schedule.cost import LinkModel

A100 = gpu_profile("a100")
LINK = LinkModel.from_units(5, 800)
SMALL = Transformer(hidden=64, layers=4, heads=4, seq_len=16, vocab=100)


def test_layer_exposure():
    # a collective shorter than its layer's compute is hidden; a longer one exposes the difference
    assert layer_exposure(1.0, 0.0, 0.0, 0.5) == 0.0
    assert layer_exposure(1.0, 0.0, 0.0, 1.5) == pytest.approx(0.5)
    # its phases run one after the other: scale-up 0.6 then network 0.7 do not fit in 1.0
    assert layer_exposure(1.0, 0.0, 0.6, 0.7) == pytest.approx(0.3)
    # the network phase also runs while TP blocks compute, the scale-up phase cannot (NVLink is TP's):
    # 1.2 of NVLink does not fit in the layer's 1.0 of compute even though the layer lasts 1.5
    assert layer_exposure(1.0, 0.5, 0.0, 1.2) == 0.0
    assert layer_exposure(1.0, 0.5, 1.2, 0.0) == pytest.approx(0.2)


def test_zero3_per_layer_by_hand():
    # pure ZeRO-3 DP over 4 hosts of 1 GPU: per layer (a quarter of the parameters) an allgather forward,
    # an allgather and a reduce-scatter backward, each by recursive halving (2 steps, tau 3/4) at the
    # implementation's efficiency; the first allgather of each pass and the last reduce-scatter are exposed
    # whole, the others beyond their neighbouring layer's compute
    eta = 0.5
    j = Job(SMALL, "small", 8, A100, 4, 1, attention="full", zero3_efficiency=eta)
    fab = switched_fabric("fat-tree", 4, 1, LINK)
    s = Strategy(1, 1, 4, zero=3, micro_batch=1)
    b = breakdown(j, s, fab)
    t_f = A100.seconds(SMALL.forward_flops_per_token() * 16 / 4, hidden=SMALL.hidden)     # one layer
    coll = (2 * LINK.alpha_s + 0.75 * 2 * SMALL.dense_params / 4 / LINK.node_bandwidth_Bps) / eta
    per_mb = coll + 3 * max(0.0, coll - t_f) + 2 * coll + 3 * max(0.0, 2 * coll - 2 * t_f)
    assert b.dp == pytest.approx(2 * per_mb)            # 2 micro-batches, each pays it
    # ZeRO-1 pays its gradient reduce-scatter once per iteration, and its parameter allgather once
    b1 = breakdown(j, Strategy(1, 1, 4, zero=1, micro_batch=1), fab)
    rs = 2 * LINK.alpha_s + 0.75 * 2 * SMALL.dense_params / 4 / LINK.node_bandwidth_Bps
    assert b1.dp == pytest.approx(2 * (rs + 3 * max(0.0, rs - 2 * t_f)) / 2 + rs + 3 * max(0.0, rs - t_f))


def test_causal_attention_halves_the_scores():
    # FlashAttention-2 skips the causal mask's empty half (the forward runs the scores' FLOPs at half), runs them
    # at the device's e_max (its tiles are blocks of the sequence, not of h), and its backward recomputes Q K^T
    # (half of the scores' two products); Megatron-LM's 2021 kernel computes them whole at e(h) and keeps them
    m = Transformer(hidden=64, layers=4, heads=4, seq_len=4096, vocab=100)
    fab = switched_fabric("fat-tree", 1, 1, LINK)
    s = Strategy(1, 1, 1, micro_batch=1)
    full = breakdown(Job(m, "m", 1, A100, 1, 1, attention="full"), s, fab).compute
    causal = breakdown(Job(m, "m", 1, A100, 1, 1), s, fab).compute
    scores = 4.0 * m.seq_len * m.hidden * m.layers * m.seq_len          # per sequence
    flash = A100.seconds(scores / 2)                                     # at e_max: no hidden size given
    assert full - causal == pytest.approx(3 * A100.seconds(scores, hidden=m.hidden) - 3 * flash - flash / 2)
    # selective recomputation adds nothing beyond the flash backward; with the 2021 kernel both products again
    sel = Strategy(1, 1, 1, micro_batch=1, recompute="selective")
    assert breakdown(Job(m, "m", 1, A100, 1, 1), sel, fab).compute == pytest.approx(causal)
    assert (breakdown(Job(m, "m", 1, A100, 1, 1, attention="full"), sel, fab).compute - full
            == pytest.approx(A100.seconds(scores, hidden=m.hidden)))


def test_scale_up_phase_is_one_step():
    # DP inside one host of 4 GPUs: the shipped hierarchical schedule's scale-up phase, one step in which every
    # GPU sends each peer its share through the switch (alpha + 3/4 X / NVLink), not a ring of 3 steps
    j = Job(SMALL, "small", 8, A100, 1, 4, attention="full")
    fab = switched_fabric("fat-tree", 1, 4, LINK)
    b = breakdown(j, Strategy(1, 1, 4, micro_batch=2), fab)
    x = 2 * SMALL.dense_params / 4                       # one layer's gradients, 16-bit
    phase = A100.nvlink_alpha_s + 0.75 * x / A100.nvlink_Bps
    c_b = 2 * A100.seconds(SMALL.forward_flops_per_token() * 32 / 4, hidden=SMALL.hidden)
    assert b.dp == pytest.approx(2 * phase + 3 * max(0.0, 2 * phase - c_b))


def test_zero3_exposure_grows_with_scale():
    # the same model and batch on more GPUs: less compute per GPU, the same ZeRO-3 bytes per GPU
    e = LLM_CATALOG["gpt3-175b"]
    exposed = []
    for hosts in (48, 96, 192):
        j = Job(e.model, e.name, 1536, A100, hosts, 8)
        fab = switched_fabric("fat-tree", hosts, 8, LinkModel.from_units(5, 1600))
        s = Strategy(1, 1, hosts * 8, zero=3, micro_batch=1536 // (hosts * 8), recompute="full")
        check(j, s)
        b = breakdown(j, s, fab)
        exposed.append(b.dp / b.total)
    assert exposed[0] < exposed[1] < exposed[2] and exposed[2] > 0.5


def test_activation_memory_sp_cp():
    m = Transformer(hidden=1024, layers=2, heads=16, seq_len=2048, vocab=1000)
    s, b, h, a, t = 2048, 2, 1024, 16, 4
    sbh = s * b * h
    # Korthikanti et al. Table 2
    assert m.activation_bytes_per_layer(b, t, "none", sp=False) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert m.activation_bytes_per_layer(b, t, "none", sp=True) == pytest.approx(sbh * (34 + 5 * a * s / h) / t)
    assert m.activation_bytes_per_layer(b, t, "selective", sp=True) == pytest.approx(34 * sbh / t)
    assert m.activation_bytes_per_layer(b, t, "selective", sp=False) == pytest.approx(sbh * (10 + 24 / t))
    assert m.activation_bytes_per_layer(b, t, "full", sp=True) == pytest.approx(2 * sbh / t)
    assert m.activation_bytes_per_layer(b, t, "full", sp=False) == pytest.approx(2 * sbh)
    # context parallelism splits the sequence: every term / cp
    for rc in ("none", "selective", "full"):
        assert m.activation_bytes_per_layer(b, t, rc, cp=8) == pytest.approx(m.activation_bytes_per_layer(b, t, rc) / 8)
    # grouped-query attention, SwiGLU (3.25 h), no dropout: 8 whole + (2 + 4/16 + 2 + 6 x 3.25) split
    ll = LLM_CATALOG["llama3-405b"].model
    sbh = ll.seq_len * ll.hidden
    assert ll.activation_bytes_per_layer(1, 8, "selective") == pytest.approx(sbh * (8 + 2 + 4 * 8 / 128 + 2 + 6 * 3.25) / 8)


def test_cp_in_strategies_and_memory():
    e = LLM_CATALOG["llama3-405b"]
    long = e.model.model_copy(update={"seq_len": 131072})
    j = Job(long, "long", 128, gpu_profile("h100"), 2048, 8)
    # CP 16 brings a 128K-token sequence to the 8K-token footprint: 16 in-flight micro-batches of 8K tokens a
    # GPU either way (Dubey et al. 2024, Table 4: the same tp 8, pp 16 at both lengths); without CP the same
    # micro-batches would need 16 x the activations
    s = Strategy(8, 16, 8, zero=2, recompute="selective", cp=16)
    check(j, s)
    short = Job(e.model, "short", 2048, gpu_profile("h100"), 2048, 8)
    s8k = Strategy(8, 16, 128, zero=2, recompute="selective")
    check(short, s8k)
    per_layer = long.activation_bytes_per_layer(1, 8, "selective", cp=16)
    assert per_layer == pytest.approx(e.model.activation_bytes_per_layer(1, 8, "selective"))
    assert memory(j, s).activations == pytest.approx(16 * 8 * per_layer)
    assert memory(short, s8k).activations == pytest.approx(16 * 8 * per_layer)
    assert long.activation_bytes_per_layer(1, 8, "selective") == pytest.approx(16 * per_layer)
    # ZeRO shards over dp x cp (the ranks that hold the same weights)
    assert memory(j, s).optimizer == pytest.approx(12 * long.dense_params / (8 * 16) / (8 * 16))
    assert memory(j, s).gradients == pytest.approx(2 * long.dense_params / (8 * 16) / (8 * 16))
    assert {x.cp for x in strategies(j, {"tp": 8, "pp": 16})} == {1, 2, 4, 8, 16, 32}
    assert {x.cp for x in strategies(short, {"tp": 8, "pp": 16})} == {1}       # 8K tokens: CP not searched
    assert parse_parallelism("tp=8,cp=16,sp=0") == {"tp": 8, "cp": 16, "sp": False}


@pytest.mark.parametrize("hosts", [48, 128, 192])
def test_auto_picks_ptd_p_for_gpt3_on_a100(hosts):
    # Narayanan et al. SC'21 Table 2: PTD-P beats ZeRO-3 for GPT-3 175B on 384-1536 A100s
    e = LLM_CATALOG["gpt3-175b"]
    j = Job(e.model, e.name, 1536, A100, hosts, 8)
    fab = switched_fabric("fat-tree", hosts, 8, LinkModel.from_units(5, 1600))
    best = search(j, fab)
    assert best.strategy.pp > 1 and best.strategy.tp > 1 and best.strategy.zero < 3
    z3 = search(j, fab, {"zero": 3, "pp": 1})
    assert z3.iteration_s > 1.2 * best.iteration_s
