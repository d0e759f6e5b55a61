"""DLRM, CANDLE and BERT in the model catalog as the shared-cluster experiment of TopoOpt configures them
(List 1, section 5.6 column)."""
from __future__ import annotations

from services.synthesis.evaluate.model_catalog import CATALOG, catalog_model


def test_dlrm_tables_are_model_parallel_and_exchanged_by_all_to_all():
    m = catalog_model("dlrm", 16)
    mlp = 13 * 1024 + 1024 + 7 * (1024 * 1024 + 1024)                       # bottom MLP from 13 dense features
    pairs = 17 * 16 // 2
    mlp += (pairs + 1024) * 2048 + 2048 + 15 * (2048 * 2048 + 2048)          # top MLP over the interactions
    assert m.gradient_bytes == 4 * mlp                                     # fp32 gradients, tables excluded
    assert m.parameter_bytes == 4 * (mlp + 16 * 10 ** 7 * 256)
    (emb,) = [l for l in m.layers if l.is_moe]
    # four all-to-alls of half the pooled lookups = DLRM's two of 256 samples x 16 tables x 256 bf16 elements
    assert 4 * emb.moe_tokens_bytes == 2 * 256 * 16 * 256 * 2
    assert CATALOG["dlrm"].parameters() == CATALOG["dlrm"].published_parameters


def test_candle_is_data_parallel_fully_connected():
    m = catalog_model("candle", 16)
    assert not any(l.is_moe for l in m.layers) and len(m.layers) == 24
    assert m.gradient_bytes == 4 * 24 * (4096 * 4096 + 4096)
    assert m.layers[0].forward_flops == 256 * 2.0 * 4096 * 4096


def test_bert_topoopt_is_list_1s_six_block_bert():
    m = catalog_model("bert-topoopt", 16)
    h, seq = 768, 256
    blocks = [l for l in m.layers if l.name.startswith("encoder.")]
    assert len(blocks) == 6
    block = 4 * (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 4 * h     # attention, FFN 4h, two norms
    assert all(l.params_bytes == 4 * block for l in blocks)
    # 64 sequences of 256 tokens per node (16 per GPU, 4 GPUs): 2 FLOPs a multiply-accumulate
    assert blocks[0].forward_flops == 64 * seq * (2.0 * (4 * h * h + 2 * h * 4 * h) + 4.0 * seq * h)
    assert CATALOG["bert-topoopt"].parameters() == CATALOG["bert-topoopt"].published_parameters
    assert m.gradient_bytes < catalog_model("bert-large", 16).gradient_bytes / 4
