"""DLRM and CANDLE in the model catalog (TopoOpt List 1, section 5.6 configurations)."""
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
