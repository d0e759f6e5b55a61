"""A catalog of real models with their published shapes, as `ModelSpec`s for N data-parallel nodes.

Every layer's parameters and FLOPs are computed from the architecture's shapes (no measured numbers), and
the totals are checked against the published parameter counts (tests: within 1 %). Gradients are fp32
(4 bytes a parameter: DDP with mixed precision keeps fp32 parameters and gradients), except for the Switch
Transformers, trained in bfloat16 (Fedus et al. section 2.4, "selective precision": bfloat16 everywhere but
inside the router), whose gradients are allreduced in 2 bytes; the activations an MoE layer sends to its
experts are bfloat16 (2 bytes). FLOPs: 2 per multiply-accumulate of every matrix product
(including attention scores), backward = 2 x forward; normalisations, activations and routing are not
counted (their time is what a device profile's efficiency absorbs). Layers are the units DDP fills buckets
with: a convolution (with its batch norm) or a fully connected layer for the CNNs, a transformer block (a
block's attention and its expert layer separately for mixture-of-experts models).

Sources (shapes; published parameter count):
- resnet50: He et al., "Deep Residual Learning for Image Recognition" (CVPR 2016), Table 1, 50-layer, as in
  torchvision (stride on the 3x3 convolution); 25,557,032 parameters (torchvision ResNet50_Weights
  IMAGENET1K_V1 meta "num_params"). 224 x 224 images.
- vgg16: Simonyan & Zisserman, "Very Deep Convolutional Networks" (ICLR 2015), configuration D;
  138,357,544 parameters (torchvision VGG16_Weights meta "num_params").
- bert-large: Devlin et al. (NAACL 2019): 24 layers, hidden 1024, 16 heads, FFN 4096, vocabulary 30522,
  512 positions, with the pre-training heads; 336M (Shoeybi et al., Megatron-LM 2019, Table 4; Devlin et
  al. round it to 340M). Sequence length 128.
- bert-topoopt: the BERT of TopoOpt's shared-cluster experiment (NSDI'23, List 1, the section 5.6 column): 6
  transformer blocks, hidden 768, 6 heads, sequence length 256, "embed. size" 512 (read as BERT's 512
  positions), batch 16 per GPU (64 per node of 4 GPUs); FFN 4 x hidden and BERT's vocabulary and heads as
  bert-large. TopoOpt gives shapes, not a parameter count: the count here is the one the shapes give.
- gpt2-small / gpt2-medium / gpt2-large: Radford et al. (2019) and OpenAI's released checkpoints: 12/24/36
  layers, hidden 768/1024/1280, context 1024, vocabulary 50257, tied embedding; 124,439,808 / 354,823,168
  / 774,030,080 parameters (the Hugging Face gpt2, gpt2-medium and gpt2-large checkpoints of OpenAI's
  weights; OpenAI's repository names them 124M, 355M, 774M).
- gpt3-175b: Brown et al., "Language Models are Few-Shot Learners" (2020), Table 2.1: 96 layers, hidden
  12288, 96 heads, context 2048, batch 3.2M tokens (1536 sequences); 175.0B parameters.
- switch-base-128 / switch-base-256 / switch-large-128 / switch-c-2048: Fedus et al., "Switch
  Transformers" (JMLR 2022), as released (T5X gin configs flaxformer/t5x/configs/moe/models/
  switch_classic_{base,large,c}.gin): T5 encoder-decoder, ReLU FFN, no biases, vocabulary 32128, top-1
  routing; Base: d_model 768, d_ff 3072, 12 heads of 64, 12 + 12 layers, every other FFN an expert layer,
  capacity factor 1.25; Large: d_model 1024, d_ff 4096, 16 heads, 24 + 24 layers, every other FFN sparse,
  capacity 1.25; C: d_model 2080, d_ff 6144, 30 heads, 15 + 15 layers, every FFN sparse, capacity 1.0,
  separate output layer. Batch 2^20 tokens (2048 sequences of 512 input tokens; Fedus et al. section 5),
  decoder targets 114 tokens (T5 span corruption: 15 % noise, mean span 3). Published counts: switch-c-2048
  1571B (Fedus et al., Table 9); switch-base-256 14.7B (the direct-connect paper, section 8.3);
  switch-base-128 7.47B and switch-large-128 26.37B from the released checkpoints on the Hugging Face hub
  (google/switch-base-128: 3 fp32 shards of 9.9 + 10 + 9.96 GB; google/switch-large-128: 6 bf16 shards of
  9.93 + 9.99 + 10 + 9.99 + 9.99 + 2.84 GB; sizes as displayed, 3 significant digits; Table 9 rounds them
  to 7B and 26B). Experts are sharded over the nodes (expert parallelism over all of them, as in the
  paper's simulation) when N does not exceed the number of experts E; above it the nodes form groups of
  gcd(N, E) nodes each holding every expert once (E / gcd experts a node), the groups replicas of each other
  (expert-data parallelism, as DeepSpeed-MoE, Rajbhandari et al. ICML'22 section 4.1, and the hybrid model),
  the all-to-all inside each group and the expert gradients allreduced over the N / gcd replicas;
  `expert_parallel` chooses another group size (a divisor of N and of E, or N itself when N <= E). Non-expert
  layers are data-parallel over all N nodes.
- dlrm / candle: the configurations of TopoOpt's shared-cluster experiment (Wang et al., "TopoOpt:
  Co-optimizing Network Topology and Parallelization Strategy for Distributed Training Jobs", NSDI'23, List 1,
  the section 5.6 column): DLRM (Naumov et al. 2019) with 16 embedding tables of 10^7 rows x 256, 8 dense
  (bottom MLP) layers of 1024 and 16 feature (top MLP) layers of 2048, batch 256 per node; CANDLE Uno (the
  ECP-CANDLE drug-response benchmark) with 8 dense layers and 16 feature layers of 4096, batch 256 per node.
  TopoOpt gives shapes, not parameter counts: the published count here is the one the shapes give
  (fully connected layers with biases, square widths as listed). DLRM's embedding tables are model-parallel
  (one table per node, TopoOpt section 2.1), never allreduced, and counted as `expert_params`; its embedding
  exchange is one all-to-all forward (each node receives its samples' pooled lookups from every table: tables
  x dimension elements per sample) and one backward (their gradients). The layer model runs an expert layer's
  all-to-all twice per pass (dispatch and combine), so the row carries half the per-sample elements: the same
  bytes in four all-to-alls as in DLRM's two. Lookups cost no FLOPs here (memory-bound gathers).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Callable

from services.synthesis.evaluate.training_job import DEFAULT_BUCKETS_BYTES, DEVICES, DeviceProfile, Layer, ModelSpec

__all__ = ["CATALOG", "CatalogModel", "catalog_model", "catalog_names", "ACTIVATION_BYTES", "expert_group"]

ACTIVATION_BYTES = 2


@dataclass(frozen=True)
class _Row:
    """One layer before a batch is chosen: per-sample forward FLOPs and MoE elements sent per sample."""

    name: str
    params: int
    flops: float
    expert_params: int = 0
    moe_elements: float = 0.0


@dataclass(frozen=True)
class CatalogModel:
    name: str
    published_parameters: int
    batch: int                 # samples per node, or per iteration over all nodes when `global_batch`
    global_batch: bool
    rows: Callable[[], list[_Row]]
    experts: int | None = None
    gradient_bytes: int = 4    # bytes per gradient element in the allreduce

    def parameters(self) -> int:
        """Parameter count from the shapes (all experts included)."""
        return sum(r.params + r.expert_params for r in self.rows())


# ----- convolutional networks ---------------------------------------------------------------------------------

def _conv(name: str, cin: int, cout: int, k: int, out_hw: int, *, bias: bool = False, bn: bool = True) -> _Row:
    params = k * k * cin * cout + (cout if bias else 0) + (2 * cout if bn else 0)
    return _Row(name, params, 2.0 * k * k * cin * cout * out_hw * out_hw)


def _fc(name: str, n_in: int, n_out: int) -> _Row:
    return _Row(name, n_in * n_out + n_out, 2.0 * n_in * n_out)


def _resnet50() -> list[_Row]:
    rows = [_conv("conv1", 3, 64, 7, 112)]
    cin, hw = 64, 56
    for stage, (blocks, width, stride) in enumerate([(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], 1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            out = hw // s
            parts = [_conv("", cin, width, 1, hw), _conv("", width, width, 3, out), _conv("", width, 4 * width, 1, out)]
            if b == 0:
                parts.append(_conv("", cin, 4 * width, 1, out))              # downsample projection
            rows.append(_Row(f"layer{stage}.{b}", sum(p.params for p in parts), sum(p.flops for p in parts)))
            cin, hw = 4 * width, out
    rows.append(_fc("fc", 2048, 1000))
    return rows


def _vgg16() -> list[_Row]:
    rows, cin, hw = [], 3, 224
    for i, v in enumerate([64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]):
        if v == "M":
            hw //= 2
            continue
        rows.append(_conv(f"conv{i}", cin, v, 3, hw, bias=True, bn=False))
        cin = v
    return rows + [_fc("fc6", 512 * 7 * 7, 4096), _fc("fc7", 4096, 4096), _fc("fc8", 4096, 1000)]


# ----- transformers -----------------------------------------------------------------------------------------

def _bert_large(seq: int = 128) -> list[_Row]:
    return _bert(24, 1024, seq)


def _bert(layers: int, h: int, seq: int, vocab: int = 30522) -> list[_Row]:
    """BERT (Devlin et al.): `layers` encoder blocks of hidden h, FFN 4h, 512 positions, the pre-training heads."""
    f = 4 * h
    rows = [_Row("embeddings", (vocab + 512 + 2) * h + 2 * h, 0.0)]
    block = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 4 * h
    for i in range(layers):
        rows.append(_Row(f"encoder.{i}", block, seq * (2.0 * (4 * h * h + 2 * h * f) + 4.0 * seq * h)))
    rows.append(_Row("pooler", h * h + h, 2.0 * h * h))
    # MLM head (transform, layer norm, decoder bias; decoder weight tied to the embedding) and NSP head
    rows.append(_Row("heads", h * h + h + 2 * h + vocab + 2 * h + 2, seq * 2.0 * (h * h + h * vocab)))
    return rows


def _gpt(layers: int, h: int, ctx: int, vocab: int = 50257) -> list[_Row]:
    rows = [_Row("embeddings", vocab * h + ctx * h, 0.0)]
    block = 12 * h * h + 13 * h
    for i in range(layers):
        rows.append(_Row(f"block.{i}", block, ctx * (2.0 * 12 * h * h + 4.0 * ctx * h)))
    rows.append(_Row("head", 2 * h, ctx * 2.0 * h * vocab))          # final layer norm; logits by the tied embedding
    return rows


def _switch(h: int, f: int, heads: int, layers: int, experts: int, every: int, capacity: float,
            separate_logits: bool, enc_seq: int = 512, dec_seq: int = 114, vocab: int = 32128) -> list[_Row]:
    """T5-style encoder-decoder with expert layers replacing every `every`-th FFN (the second of each pair)."""
    a = 64 * heads
    attn_params = 4 * h * a
    rows = [_Row("embedding", vocab * h, 0.0)]

    def ffn(prefix: str, i: int, seq: int, cross: bool):
        attn = attn_params * (2 if cross else 1) + h * (2 if cross else 1)       # + layer norm scales
        attn_flops = seq * (8.0 * h * a + 4.0 * seq * a)
        if cross:
            attn_flops += dec_seq * 4.0 * h * a + enc_seq * 4.0 * h * a + dec_seq * 4.0 * enc_seq * a
        if i == 0:
            attn += 32 * heads                                                 # relative position buckets
        if (i + 1) % every:
            return [_Row(f"{prefix}.{i}", attn + 2 * h * f + h, attn_flops + seq * 4.0 * h * f)]
        return [_Row(f"{prefix}.{i}.attention", attn, attn_flops),
                _Row(f"{prefix}.{i}.experts", h * experts + h, seq * (2.0 * h * experts + capacity * 4.0 * h * f),
                     expert_params=experts * 2 * h * f, moe_elements=seq * capacity * h)]

    for i in range(layers):
        rows += ffn("encoder", i, enc_seq, False)
    rows.append(_Row("encoder.final_norm", h, 0.0))
    for i in range(layers):
        rows += ffn("decoder", i, dec_seq, True)
    rows.append(_Row("decoder.logits", h + (vocab * h if separate_logits else 0), dec_seq * 2.0 * h * vocab))
    return rows


# ----- recommendation and tabular models (TopoOpt List 1, section 5.6) ----------------------------------------

def _mlp(prefix: str, layers: int, width: int, n_in: int) -> list[_Row]:
    return [_fc(f"{prefix}.{i}", n_in if i == 0 else width, width) for i in range(layers)]


def _dlrm(tables: int = 16, rows: int = 10 ** 7, dim: int = 256, dense: tuple[int, int] = (8, 1024),
          top: tuple[int, int] = (16, 2048), dense_features: int = 13) -> list[_Row]:
    """DLRM: bottom MLP over the dense features, embedding lookups (model-parallel tables), feature
    interaction (pairwise dot products of the tables' vectors and the bottom MLP's output), top MLP."""
    bottom = _mlp("bottom", dense[0], dense[1], dense_features)
    pairs = (tables + 1) * tables // 2
    embedding = _Row("embeddings", 0, 0.0, expert_params=tables * rows * dim, moe_elements=tables * dim / 2)
    interaction = _Row("interaction", 0, 2.0 * pairs * dim)
    return bottom + [embedding, interaction] + _mlp("top", top[0], top[1], pairs + dense[1])


def _candle_uno(dense: tuple[int, int] = (8, 4096), features: tuple[int, int] = (16, 4096),
                inputs: int = 4096) -> list[_Row]:
    """CANDLE Uno: feature-encoder layers then dense layers, all fully connected, data-parallel."""
    return _mlp("feature", features[0], features[1], inputs) + _mlp("dense", dense[0], dense[1], features[1])


CATALOG: dict[str, CatalogModel] = {m.name: m for m in [
    CatalogModel("resnet50", 25_557_032, 64, False, _resnet50),
    CatalogModel("vgg16", 138_357_544, 64, False, _vgg16),
    CatalogModel("bert-large", 336_000_000, 64, False, _bert_large),
    CatalogModel("bert-topoopt", sum(r.params for r in _bert(6, 768, 256)), 64, False, lambda: _bert(6, 768, 256)),
    CatalogModel("gpt2-small", 124_439_808, 8, False, lambda: _gpt(12, 768, 1024)),
    CatalogModel("gpt2-medium", 354_823_168, 4, False, lambda: _gpt(24, 1024, 1024)),
    CatalogModel("gpt2-large", 774_030_080, 1, False, lambda: _gpt(36, 1280, 1024)),
    CatalogModel("gpt3-175b", 175_000_000_000, 1536, True, lambda: _gpt(96, 12288, 2048)),
    CatalogModel("switch-base-128", 7_465_000_000, 2048, True,
                 lambda: _switch(768, 3072, 12, 12, 128, 2, 1.25, False), experts=128, gradient_bytes=2),
    CatalogModel("switch-base-256", 14_700_000_000, 2048, True,
                 lambda: _switch(768, 3072, 12, 12, 256, 2, 1.25, False), experts=256, gradient_bytes=2),
    CatalogModel("switch-large-128", 26_370_000_000, 2048, True,
                 lambda: _switch(1024, 4096, 16, 24, 128, 2, 1.25, False), experts=128, gradient_bytes=2),
    CatalogModel("switch-c-2048", 1_571_000_000_000, 2048, True,
                 lambda: _switch(2080, 6144, 30, 15, 2048, 1, 1.0, True), experts=2048, gradient_bytes=2),
    CatalogModel("dlrm", sum(r.params + r.expert_params for r in _dlrm()), 256, False, _dlrm),
    CatalogModel("candle", sum(r.params for r in _candle_uno()), 256, False, _candle_uno),
]}


def catalog_names() -> list[str]:
    return list(CATALOG)


def expert_group(experts: int, nodes: int, expert_parallel: int | None = None) -> int:
    """The expert-parallel group size of a model with `experts` experts per layer on `nodes` nodes (module
    docstring): `expert_parallel` when given and valid, else all nodes up to E, gcd(N, E) above; ValueError
    when the given one cannot place the experts.

    >>> expert_group(128, 64), expert_group(128, 256), expert_group(128, 200)
    (64, 128, 8)
    """
    if expert_parallel is None:
        return nodes if nodes <= experts else gcd(nodes, experts)
    ep = expert_parallel
    if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1 or nodes % ep:
        raise ValueError(f"expert_parallel must be a divisor of the {nodes} nodes, got {ep!r}")
    if ep > experts:
        raise ValueError(f"expert_parallel={ep}: a group of {ep} nodes needs at least one of the {experts} "
                         "experts per node")
    if ep < nodes and experts % ep:
        raise ValueError(f"expert_parallel={ep} must divide the {experts} experts (every group holds each once)")
    return ep


def catalog_model(name: str, nodes: int, *, device: str | DeviceProfile = "a100", batch: int | None = None,
                  buckets_bytes=DEFAULT_BUCKETS_BYTES, expert_parallel: int | None = None) -> ModelSpec:
    """The catalogued model `name` as trained on `nodes` data-parallel nodes (module docstring).

    batch: samples per node (default: the catalogued per-node batch, or the global batch / nodes for models
    trained with a fixed global batch). Compute is given in FLOPs with `device` ("a100", "h100" or a profile).
    expert_parallel: the expert-parallel group size (`expert_group`).

    >>> spec = catalog_model("switch-c-2048", 1024)
    >>> sum(l.is_moe for l in spec.layers), spec.layers[2].moe_tokens_bytes   # 2 sequences of 512 tokens
    (30, 4259840)
    >>> catalog_model("switch-base-128", 256).expert_parallel               # 2 replicas of 128 experts
    128
    """
    key = name.lower()
    if key not in CATALOG:
        raise ValueError(f"unknown model {name!r}; the catalog has {', '.join(CATALOG)}")
    m = CATALOG[key]
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    ep = None
    if m.experts is not None:
        ep = expert_group(m.experts, nodes, expert_parallel)
    elif expert_parallel is not None:
        raise ValueError(f"{m.name} has no expert layers: expert_parallel does not apply")
    if batch is None:
        batch = m.batch // nodes if m.global_batch else m.batch
        if batch < 1:
            raise ValueError(f"{m.name} trains with a global batch of {m.batch}: {nodes} nodes leave less than "
                             "one sample per node")
    elif not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 1 << 20:
        raise ValueError(f"batch must be an integer in 1..{1 << 20}, got {batch!r}")
    if isinstance(device, str) and device.lower() not in DEVICES:
        raise ValueError(f"unknown device {device!r}; known: {', '.join(DEVICES)}")
    layers = [Layer(name=r.name, params_bytes=r.params * m.gradient_bytes, forward_flops=r.flops * batch,
                    backward_flops=2.0 * r.flops * batch, expert_params_bytes=r.expert_params * m.gradient_bytes,
                    moe_tokens_bytes=round(r.moe_elements * batch * ACTIVATION_BYTES) if r.moe_elements else None)
              for r in m.rows()]
    return ModelSpec(name=f"{m.name} ({batch} per node)", layers=layers, buckets_bytes=list(buckets_bytes),
                     device=device, expert_parallel=ep if ep is not None and ep < nodes else None)
