"""Decoder-only transformers described by their hyperparameters (docs/training.md), and the catalogued large models.

A model file may give `{"name": ..., "transformer": {"hidden", "layers", "heads", "seq_len", "vocab",
"ffn_hidden"?, "kv_heads"?, "experts"?, "top_k"?, "moe_every"?, ...}}` (the optional keys below).

Counting (per layer, weights only; biases and norms are 2 h, negligible but counted):
- attention: Q and O are h x (heads * head_dim), K and V are h x (kv_heads * head_dim), head_dim = h / heads
  unless given (grouped-query attention when kv_heads < heads); `attention_params` overrides the weights
  (DeepSeek-V3's MLA, whose `head_dim` is the mean of its query-key and value head dims, (192 + 128)/2 = 160,
  so that the score FLOPs 2 s heads (d_qk + d_v) are 4 s heads head_dim);
- feed-forward: 2 h f (GELU) or 3 h f (`gated`: SwiGLU, as Llama, Mixtral, DeepSeek);
- a mixture-of-experts layer (every `moe_every`-th layer from `dense_layers` on) has `experts` routed experts
  of `expert_ffn_hidden` (default `ffn_hidden`), `shared_experts` always-active ones, and a router h x E;
  each token goes to `top_k` routed experts, on at most `node_limit` hosts when given (node-limited routing,
  `moe.remote_copies`);
- embedding V h, plus an output layer V h unless `tied_embeddings`.
FLOPs (Narayanan et al. SC'21 section 5.1, the Megatron-LM convention): 2 per multiply-accumulate of every
matrix product a token goes through (active parameters only: top_k routed + shared experts), plus the
attention scores and their product with V, 4 s (heads * head_dim) per token per layer (no causal halving),
plus the logits 2 h V; backward = 2 x forward. For GPT-3 this is 72 B s l h^2 (1 + s/6h + V/12lh) per
iteration, the paper's equation (3) without recomputation (96 with it).
Activation memory per layer and micro-batch (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", section 4.1 and Table 2, 16-bit activations), in units of s b h bytes, item by item
as section 4.1 counts them and generalised to grouped-query attention (K and V of kv_heads heads) and gated
feed-forwards (SwiGLU keeps the gate and up projections and their product, 3 x 2 f/h; GELU keeps its input
and output, 2 x 2 f/h):
- kept whole on every TP rank unless sequence parallelism (SP) splits them: the two layer norms' inputs (4),
  the attention and MLP inputs (2 + 2) and the two dropout masks (2): 10;
- split over TP: Q (2), K and V (4 kv_heads/heads), the attention output (2) and the feed-forward's inner
  tensors (4 f/h or 6 f/h): 24 / t for GPT (f = 4h);
- the attention scores 5 a s / h (softmax output, dropout mask and output), split over TP; not stored with
  selective recomputation (Korthikanti section 5; FlashAttention recomputes them the same way).
A model trained without dropout (`dropout` false: the Llama family, Touvron et al. 2023 and Dubey et al. 2024
list none) keeps no masks: 8 instead of 10 whole, 2 a s / h (the softmax output) instead of 5 a s / h.
So GPT: s b h (10 + 24/t + 5 a s/(h t)) without SP, s b h (34 + 5 a s/h)/t with SP (Table 2); selective drops the
score term; full recomputation keeps the layer's input only, 2 s b h (/t with SP); recomputing an MoE layer's
MoE module as well (`moe`, Megatron-Core's --recompute-modules moe) also drops its feed-forward inner tensors. Context parallelism over c
ranks splits the sequence: every term / c (each rank's s/c queries attend to all s keys, so the score term
becomes 5 a s (s/c) b, the same / c).
Catalog sources (hyperparameters; published parameter counts; batch):
- gpt3-175b: Brown et al. 2020, Table 2.1 (96 layers, h 12288, 96 heads, context 2048, 1536 sequences);
  175B. Vocabulary 50257, tied embedding.
- llama3-8b / llama3-70b / llama3-405b: Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3 (layers
  32/80/126, h 4096/8192/16384, FFN 14336/28672/53248, heads 32/64/128, 8 KV heads, vocabulary 128,000 +
  256 = 128256 in the released config, SwiGLU, untied); 8,030,261,248 / 70,553,706,496 / 405,853,388,800
  parameters (Hugging Face meta-llama/Meta-Llama-3.1 model cards' safetensors totals). Sequence 8192; the
  405B's final batch 16M tokens (2048 sequences; section 3.4.1); the 8B and 70B with 4M tokens (512 sequences,
  the 405B's initial batch: the paper gives none for them).
- mixtral-8x7b: Jiang et al. 2024, "Mixtral of Experts", Table 1 (32 layers, h 4096, FFN 14336, 32 heads,
  8 KV heads, 8 experts, top-2, vocabulary 32000); 46.7B (46,702,792,704 in the released checkpoint).
  Sequence 4096, batch 1024 sequences (4M tokens): not published, chosen like Llama's.
- deepseek-v3: DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", section 4.2 (61 layers, h 7168, the first 3
  dense with FFN 18432, then 256 routed experts of 2048 and 1 shared, top-8; MLA with 128 heads, q_lora 1536,
  kv_lora 512, head dims 128 + 64 rope, v 128, so `head_dim` 160 for the score FLOPs; vocabulary 129280, untied; node-limited routing, M = 4 nodes
  per token, sections 2.1.2 and 4.2); 671B total, 37B activated; sequence 4096, batch 15360 sequences. The
  multi-token-prediction module (14B) is left out as in the 671B count.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["LLM_CATALOG", "LlmEntry", "Transformer", "TransformerModelFile", "is_transformer_file", "llm_entry"]

ACT_BYTES = 2          # 16-bit activations


class Transformer(BaseModel):
    """A decoder-only transformer by its hyperparameters (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hidden: int = Field(ge=1, le=1 << 17)
    layers: int = Field(ge=1, le=4096)
    heads: int = Field(ge=1, le=4096)
    seq_len: int = Field(ge=1, le=1 << 21)
    vocab: int = Field(ge=1, le=1 << 22)
    ffn_hidden: int | None = Field(default=None, ge=1, le=1 << 20)
    kv_heads: int | None = Field(default=None, ge=1, le=4096)
    experts: int | None = Field(default=None, ge=1, le=1 << 14)
    top_k: int | None = Field(default=None, ge=1, le=1 << 10)
    moe_every: int = Field(default=1, ge=1, le=4096)
    dense_layers: int = Field(default=0, ge=0, le=4096, description="leading layers without experts")
    expert_ffn_hidden: int | None = Field(default=None, ge=1, le=1 << 20)
    shared_experts: int = Field(default=0, ge=0, le=64)
    gated: bool = Field(default=False, description="SwiGLU feed-forward (3 matrices) instead of GELU (2)")
    tied_embeddings: bool = False
    attention_params: int | None = Field(default=None, ge=1, le=1 << 40, description="per layer, overrides GQA")
    dropout: bool = Field(default=True, description="trained with dropout (its masks are kept for backward)")
    head_dim: int | None = Field(default=None, ge=1, le=1 << 12, description="per attention head (default h / heads)")
    node_limit: int | None = Field(default=None, ge=1, le=1 << 14,
                                   description="node-limited routing: each token's routed experts on at most this "
                                               "many hosts (DeepSeek-V3: 4)")

    @model_validator(mode="after")
    def _consistent(self) -> "Transformer":
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.kv_heads is not None and (self.kv_heads > self.heads or self.heads % self.kv_heads):
            raise ValueError(f"kv_heads {self.kv_heads} must divide heads {self.heads}")
        if self.top_k is not None and self.experts is None:
            raise ValueError("top_k needs experts")
        if self.experts is not None and (self.top_k or 1) > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds experts {self.experts}")
        if self.node_limit is not None and self.experts is None:
            raise ValueError("node_limit needs experts")
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A validated copy with `update` applied. Pydantic's copy keeps the instance's dictionary, and with it
        the cached FLOP and parameter counts of this model: a copy with another sequence length would price
        attention at the old one. Built afresh, it computes its own."""
        return self.model_validate({**self.model_dump(), **(update or {})})

    # ----- shapes -----
    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def k(self) -> int:
        return self.top_k or 1

    def is_moe_layer(self, i: int) -> bool:
        return self.experts is not None and i >= self.dense_layers and (i - self.dense_layers + 1) % self.moe_every == 0

    @cached_property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    def _attn(self) -> int:
        if self.attention_params is not None:
            return self.attention_params
        dh = self.head_dim or self.hidden // self.heads
        return 2 * self.hidden * self.heads * dh + 2 * self.hidden * (self.kv_heads or self.heads) * dh

    def _mlp(self, f: int) -> int:
        return (3 if self.gated else 2) * self.hidden * f

    @cached_property
    def dense_params(self) -> int:
        """Parameters every data-parallel rank holds a shard of (all but the routed experts)."""
        h, moe = self.hidden, self.moe_layers
        per_layer = self._attn() + 4 * h
        total = self.layers * per_layer + (self.layers - moe) * self._mlp(self.ffn)
        ef = self.expert_ffn_hidden or self.ffn
        total += moe * (self.shared_experts * self._mlp(ef) + h * (self.experts or 0))
        return total + self.vocab * h * (1 if self.tied_embeddings else 2) + h

    @cached_property
    def expert_params(self) -> int:
        """Routed-expert parameters (sharded over the expert-parallel ranks)."""
        return self.moe_layers * (self.experts or 0) * self._mlp(self.expert_ffn_hidden or self.ffn)

    @cached_property
    def parameters(self) -> int:
        return self.dense_params + self.expert_params

    @cached_property
    def _forward_flops(self) -> float:
        """Model FLOPs of one token's forward pass (module docstring)."""
        dense = self.layers * self._attn() + (self.layers - self.moe_layers) * self._mlp(self.ffn)
        return (2.0 * dense + self.moe_module_flops_per_token() + self.attention_score_flops_per_token()
                + 2.0 * self.hidden * self.vocab)

    def routed_expert_flops_per_token(self) -> float:
        """The routed experts' share of `forward_flops_per_token`: top_k expert MLPs in every MoE layer."""
        return 2.0 * self.moe_layers * self.k * self._mlp(self.expert_ffn_hidden or self.ffn) if self.experts else 0.0

    def moe_module_flops_per_token(self) -> float:
        """The MoE modules' share of `forward_flops_per_token` (what recomputing them repeats): the routed and shared
        experts and the router of every MoE layer."""
        if not self.experts:
            return 0.0
        shared_and_router = self.shared_experts * self._mlp(self.expert_ffn_hidden or self.ffn) + self.hidden * self.experts
        return self.routed_expert_flops_per_token() + 2.0 * self.moe_layers * shared_and_router

    def forward_flops_per_token(self) -> float:
        """Model FLOPs of one token's forward pass (module docstring)."""
        return self._forward_flops

    def attention_score_flops_per_token(self) -> float:
        """The attention scores and their product with V in one token's forward pass, every layer: 4 s (heads
        head_dim) (module docstring; no causal halving)."""
        return self.layers * 4.0 * self.seq_len * self.heads * (self.head_dim or self.hidden // self.heads)

    def activation_bytes_per_layer(self, micro_batch: int, tp: int, recompute: str, sp: bool = True,
                                   cp: int = 1) -> float:
        """Korthikanti et al. section 4.1 / Table 2, generalised (module docstring)."""
        sbh = self.seq_len * micro_batch * self.hidden / cp
        if recompute == "full":
            return 2.0 * sbh / (tp if sp else 1)
        f = self.ffn / self.hidden
        inner = 0.0 if recompute == "moe" else (6 if self.gated else 4) * f      # "moe": an MoE layer's module
        split = 2 + 4 * (self.kv_heads or self.heads) / self.heads + 2 + inner    # recomputed from its input
        whole = 10.0 if self.dropout else 8.0
        scores = 0.0 if recompute in ("selective", "moe") else (5.0 if self.dropout else 2.0) * self.heads * self.seq_len / self.hidden
        return sbh * ((whole + split + scores) / tp if sp else whole + (split + scores) / tp)

    def activation_message_bytes(self, micro_batch: int) -> float:
        """One micro-batch's hidden states between layers: s b h 16-bit values."""
        return float(ACT_BYTES * self.seq_len * micro_batch * self.hidden)


@dataclass(frozen=True)
class LlmEntry:
    name: str
    published_parameters: int
    global_batch: int           # sequences per iteration
    model: Transformer


def _mla_params(h: int, heads: int, q_lora: int, kv_lora: int, nope: int, rope: int, v: int) -> int:
    """DeepSeek-V3 multi-head latent attention weights of one layer (report section 2.1.1), with its two
    low-rank norms."""
    return (h * q_lora + q_lora * heads * (nope + rope) + h * (kv_lora + rope) + kv_lora * heads * (nope + v)
            + heads * v * h + q_lora + kv_lora)


LLM_CATALOG: dict[str, LlmEntry] = {e.name: e for e in [
    LlmEntry("gpt3-175b", 175_000_000_000, 1536,
             Transformer(hidden=12288, layers=96, heads=96, seq_len=2048, vocab=50257, tied_embeddings=True)),
    LlmEntry("llama3-8b", 8_030_261_248, 512,
             Transformer(hidden=4096, layers=32, heads=32, kv_heads=8, seq_len=8192, vocab=128256,
                         ffn_hidden=14336, gated=True, dropout=False)),
    LlmEntry("llama3-70b", 70_553_706_496, 512,
             Transformer(hidden=8192, layers=80, heads=64, kv_heads=8, seq_len=8192, vocab=128256,
                         ffn_hidden=28672, gated=True, dropout=False)),
    LlmEntry("llama3-405b", 405_853_388_800, 2048,
             Transformer(hidden=16384, layers=126, heads=128, kv_heads=8, seq_len=8192, vocab=128256,
                         ffn_hidden=53248, gated=True, dropout=False)),
    LlmEntry("mixtral-8x7b", 46_702_792_704, 1024,
             Transformer(hidden=4096, layers=32, heads=32, kv_heads=8, seq_len=4096, vocab=32000,
                         ffn_hidden=14336, gated=True, experts=8, top_k=2)),
    LlmEntry("deepseek-v3", 671_000_000_000, 15360,
             Transformer(hidden=7168, layers=61, heads=128, seq_len=4096, vocab=129280, ffn_hidden=18432,
                         expert_ffn_hidden=2048, experts=256, top_k=8, shared_experts=1, dense_layers=3,
                         gated=True, node_limit=4, head_dim=160, attention_params=_mla_params(7168, 128, 1536, 512, 128, 64, 128))),
]}


def llm_entry(name: str) -> LlmEntry | None:
    return LLM_CATALOG.get(name.lower())


class TransformerModelFile(BaseModel):
    """The file form: `{"name", "transformer": {...}, "global_batch"?}` (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=200)
    transformer: Transformer
    global_batch: int | None = Field(default=None, ge=1, le=1 << 24, description="sequences per iteration")


def is_transformer_file(data) -> bool:
    return isinstance(data, dict) and "transformer" in data
