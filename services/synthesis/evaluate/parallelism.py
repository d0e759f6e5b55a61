"""Hybrid-parallel training on hosts of G GPUs (docs/training.md): tensor (TP, with sequence parallelism SP),
context (CP), pipeline (PP: 1F1B or interleaved), data (DP, ZeRO stages 0-3) and expert (EP, with expert-data
parallelism) parallelism; per-iteration traffic, memory per GPU, iteration time on a `fabrics.Fabric`, and the
strategy search. Pure arithmetic.

Placement (Megatron-LM's rank order: TP innermost, then CP, then DP, then PP): TP groups are inside a host
(tp | G, the scale-up domain); CP takes the next cp_local = min(cp, G/tp) ranks of a host (a CP group spans
h_cp = cp tp / G hosts when larger); a host holds dp_local = min(dp, G/(tp cp)) consecutive DP ranks of one
stage, so a DP group spans h_dp = dp / dp_local hosts. The experts fold over the stage's tp cp dp ranks
(`moe.expert_layout` with cp dp in the place of dp: Megatron-Core's MoE parallel folding, whose expert groups
etp x ep x edp re-factor tp x cp x dp); with etp = tp an EP group is ep consecutive cp dp ranks (experts % ep
== 0, expert weights replicated over edp = cp dp/ep ranks, expert-data parallelism, when there are fewer experts
than ranks), and each GPU dispatches the s b / (tp cp) tokens it holds. Gradients are reduced and ZeRO shards over
the dp cp ranks holding the same weights (Megatron-Core folds CP into the data-parallel group for both), the
expert gradients over the edp ranks.

Traffic per GPU (16-bit activations A = 2 s b h / cp bytes per micro-batch of b sequences; Psi_d, Psi_e the
dense and expert parameters a GPU holds, Psi_d = dense / (tp pp), Psi_e = experts / (tp pp ep)):
- TP (Shoeybi et al. 2019; sequence parallelism, Korthikanti et al. 2022 section 4.2.2, turns each allreduce
  into a reduce-scatter and an allgather of the same volume): 4 allreduces of A per layer and micro-batch
  (6 with full recomputation), ring on the scale-up domain: 2 (tp-1) alpha_nv + 2 (tp-1)/tp A / nvlink; an MoE
  layer folded over TP with etp = 1 has only the attention's half (`_tp_collectives`).
- CP (ring attention, Liu et al. 2023; Megatron-Core context parallelism): per layer the K and V of the other
  cp-1 sequence chunks (an allgather of K,V: 2 x 2 s b kv_dim/tp bytes in all) forward, and again plus the
  reduce-scatter of their gradients backward; overlapped with the layer's attention compute.
- PP: per micro-batch and stage boundary a forward activation and a backward gradient of A/tp per GPU (the
  scatter/gather optimisation of Narayanan et al.), v times with v interleaved chunks; from a host G A/tp.
- DP, 16-bit gradients and parameters (Rajbhandari et al. SC'20, "ZeRO", sections 5 and 7): stage 0
  allreduces 2 Psi bytes; stages 1 and 2 reduce-scatter the gradients and allgather the updated parameters
  (the same volume); stage 3 also allgathers the parameters before each micro-batch's forward and backward.
  Stages 2 and 3 reduce-scatter every micro-batch's gradients as they are produced (ZeRO section 5.2: the
  gradients are partitioned, so accumulation happens on the shards); stages 0 and 1 once per iteration
  (Megatron's distributed optimizer). Concurrent DP groups: one hierarchical collective (the shipped
  `schedule/hierarchical.py` form): a one-step scale-up reduce-scatter among the group's GPUs of a host
  (NVSwitch: every GPU sends each peer its share at once), then one inter-host collective over the h_dp
  hosts carrying all G GPUs' shares (G X / dp_local bytes per host: the host's groups run identical schedules
  on the same hosts, so they load each link with the sum of their bytes), then the scale-up allgather.
  Expert gradients go the same way over edp ranks.
- EP: 4 all-to-alls per MoE layer and micro-batch (dispatch and combine, forward and backward; 6 with full
  recomputation) of D = 2 (s/tp) b h top_k bytes per GPU; the share for GPUs on other hosts goes between hosts
  (G D (ep - ep_local)/ep per host; with node-limited routing once per remote host, `moe.remote_copies`), the
  rest over the scale-up domain, both at once. Experts are placed by `moe.expert_layout` (expert-data
  parallelism when ep < dp, folding over the TP ranks when ep > dp).

Time (per micro-batch of the busiest stage: ceil(L/pp) layers; forward t_f = FLOPs / (tp cp peak e(h)) with
e(h) the device's efficiency at the model's hidden size (`devices`), the routed experts' FLOPs weighted by
their GEMM shapes' time per FLOP over the dense MLP's (`gemm.expert_time_factor`), backward 2 t_f, full recomputation
+ t_f, `moe` recomputation + the MoE modules' forward (routed and shared experts, router) of the stage's MoE layers,
selective + the attention scores' FLOPs. With a flash kernel (the job's attention "causal": FlashAttention-2, Dao
2023, sections 3.1-3.2) the scores take half their FLOPs (the causal mask's empty half is skipped), run at the
device's e_max (the kernel tiles the sequence: FlashAttention-3, Shah et al. 2024, measures the H100's BF16
forward at 60-65 % of peak with head dim 128 from 2K to 16K tokens, where e(h) of a 4096-wide model is 45 %), and
the backward recomputes Q K^T (five products for the forward's two), which is then also all that selective
recomputation adds; the "full" kernel, Megatron-LM's 2021, stores the scores or recomputes both products):
    t_mb = t_f + t_b + t_r + t_TP + t_CP + t_PP + t_EP + exposed per-micro-batch DP + t_host   (blocking)
t_host = the host work the GPU waits for in MoE layers (`moe.exposed_host`: per MoE layer the local experts'
grouped-GEMM calls after the layer's device-host sync, at `Job.host_expert_s` per expert and call)
t_EP = MoE layers x the all-to-alls the compute waits for (`moe.exposed_alltoall`: all of them without
overlap, what exceeds one layer's forward + backward compute with the micro-batch overlap, except on the
`moe.unpaired_share` of chunks of the pipeline's warm-up and cool-down)
    pipeline = m t_mb + (pp - 1)/v t_mb                    (bubble: Narayanan et al. SC'21 section 2.2)
DP per layer, as issued (ZeRO section 5; DeepSpeed and PyTorch FSDP prefetch the next layer's parameters,
Zhao et al. VLDB'23, backward and forward prefetching): each layer's collective is issued one layer ahead
(allgathers) or right after the layer (gradient reduce-scatters) and runs under the adjacent layer's compute. A layer of compute c and
blocking TP time t_tp lasts
    max(c + t_tp, t_tp + d_nv, d_nv + d_net)
with d_nv and d_net the collective's scale-up and inter-host phases: the scale-up phase shares NVLink with
the TP collectives, the phases run one after the other, and the NIC is not free during the pipeline's sends
(blocking, in t_PP), so a layer's collective only overlaps its layer's window; what exceeds c + t_tp is
exposed. The first allgather of a pass and the last reduce-scatter have no layer to hide behind and are
exposed whole. ZeRO-3's collectives run at `Job.zero3_efficiency` of the schedules' price: the ZeRO-3
implementation measured at this scale (DeepSpeed, Narayanan et al. SC'21 Table 2) reaches a fraction of the
collective bandwidth the schedules allow (`ZERO3_EFFICIENCY`, docs/training.md).
Interleaved chunks: pp v <= L + 2, the first chunk may hold only the embedding and the last only the output
layer and loss (Dubey et al. 2024 section 3.3.2); the busiest stage still runs ceil(L/pp) layers.
Memory per GPU (ZeRO paper, mixed-precision Adam: 2 + 2 + 12 bytes per parameter; stage 1 shards the 12,
stage 2 also the gradients' 2, stage 3 also the parameters' 2, over dp cp, or edp for experts) plus activations
(`Transformer.activation_bytes_per_layer` with the strategy's SP and CP, for the first stage's in-flight
micro-batches: min(m, pp) x ceil(L/pp) layers, x (1 + (pp-1)/(pp v)) interleaved; Korthikanti et al. 2022
section 4.2.3) and the fp32 logits of one micro-batch (4 s b V / (tp cp)) on the last stage (the first stage
when pp = 1); refused when above the HBM.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, replace

from services.synthesis.evaluate.devices import GpuProfile
from services.synthesis.evaluate.fabrics import Fabric
from services.synthesis.evaluate.gemm import expert_time_factor
from services.synthesis.evaluate.moe import (HOST_EXPERT_S, MOE_DISPATCH, MOE_OVERLAP, dualpipe_bubble,
                                             dualpipe_refusal, expert_layout, expert_tp, exposed_alltoall,
                                             exposed_host, remote_copies, unpaired_share, valid_expert_degree)
from services.synthesis.evaluate.transformer import Transformer

__all__ = ["Breakdown", "Infeasible", "Job", "Memory", "RECOMPUTE", "Strategy", "StrategyResult", "Traffic",
           "ZERO3_EFFICIENCY", "expert_slowdown", "layer_exposure",
           "breakdown", "check", "evaluate", "feasible", "leanest", "memory", "parse_parallelism", "search",
           "strategies", "traffic"]

RECOMPUTE = ("none", "selective", "moe", "full")
MICRO_BATCHES = (1, 2, 4, 8, 16)
INTERLEAVE = (1, 2, 4, 8)
GRAD_BYTES = PARAM_BYTES = 2
OPTIMIZER_BYTES = 12
CONTEXT_PARALLEL = (1, 2, 4, 8, 16, 32)
CP_MIN_SEQ = 32768          # CP is searched for sequences of 32K tokens and more (docs/training.md)
ATTENTION = ("full", "causal")
# The fraction of the schedules' collective bandwidth the ZeRO-3 implementation reaches: solved from
# Narayanan et al. SC'21 Table 2, ZeRO-3 175B on 1536 A100s (44 TFLOP/s per GPU) by
# `services.synthesis.evaluate.published_runs.calibrate`; the other ZeRO-3 rows are predictions.
ZERO3_EFFICIENCY = 0.1248


@dataclass(frozen=True)
class Job:
    model: Transformer
    name: str
    global_batch: int             # sequences per iteration
    device: GpuProfile
    hosts: int
    gpus_per_host: int
    precision: str = "bf16"
    # executed attention-score FLOPs: "causal" (the masked half skipped: FlashAttention-2, the kernel today's
    # decoders train with) or "full" (computed whole and masked: Megatron-LM 2021)
    attention: str = "causal"
    zero3_efficiency: float = ZERO3_EFFICIENCY
    # host time per local expert and grouped-GEMM call the GPU waits for (`moe.exposed_host`): Megatron-Core's
    # eager dropless MoE layers; 0 for a CUDA-graphed or sync-free implementation
    host_expert_s: float = HOST_EXPERT_S

    @property
    def gpus(self) -> int:
        return self.hosts * self.gpus_per_host

    def model_flops(self) -> float:
        """Model FLOPs of one iteration: forward + backward (3 x forward), no recomputation."""
        return 3.0 * self.model.forward_flops_per_token() * self.model.seq_len * self.global_batch


@dataclass(frozen=True)
class Strategy:
    tp: int
    pp: int
    dp: int
    ep: int = 1
    zero: int = 0
    micro_batch: int = 1
    interleave: int = 1
    recompute: str = "none"
    cp: int = 1
    sp: bool = True
    moe_overlap: str = "none"          # `moe.MOE_OVERLAP`
    moe_dispatch: str = "alltoall"     # `moe.MOE_DISPATCH`
    etp: int = 0                       # expert tensor parallelism (`moe.expert_tp`; 0: automatic)

    def to_dict(self) -> dict:
        return asdict(self)


class Infeasible(ValueError):
    """A strategy that cannot run, with the reason; `kind` groups reasons: "shape" (degrees, placement),
    "batch" (global batch, micro-batches) or "memory" (above the HBM)."""

    def __init__(self, message: str, kind: str = "shape"):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


@dataclass(frozen=True)
class Traffic:
    """Bytes one GPU sends per iteration, per kind (module docstring), and the collectives' shapes."""

    tp: float
    pp: float
    dp: float
    ep: float
    cp: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Breakdown:
    compute: float
    bubble: float
    tp: float
    pp: float
    dp: float
    ep: float
    cp: float = 0.0
    host: float = 0.0

    @property
    def total(self) -> float:
        return self.compute + self.bubble + self.tp + self.pp + self.dp + self.ep + self.cp + self.host

    def to_dict(self) -> dict:
        return {"compute_s": self.compute, "bubble_s": self.bubble, "exposed_tp_s": self.tp,
                "exposed_pp_s": self.pp, "exposed_dp_s": self.dp, "exposed_ep_s": self.ep,
                "exposed_cp_s": self.cp, "exposed_host_s": self.host}


@dataclass(frozen=True)
class StrategyResult:
    strategy: Strategy
    iteration_s: float
    breakdown: Breakdown
    memory: Memory
    traffic: Traffic
    achieved_tflops_per_gpu: float
    mfu: float
    searched: int = 0
    refused: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"iteration_s": self.iteration_s, "achieved_tflops_per_gpu": self.achieved_tflops_per_gpu,
                "mfu": self.mfu, "parallelism": self.strategy.to_dict(), "breakdown": self.breakdown.to_dict(),
                "memory_per_gpu_bytes": self.memory.to_dict(), "traffic_per_gpu_bytes": self.traffic.to_dict(),
                "strategies_searched": self.searched, "strategies_refused": self.refused}


# ----- layout ---------------------------------------------------------------------------------------------

def _layout(job: Job, s: Strategy) -> dict:
    g = job.gpus_per_host
    cp_local = min(s.cp, g // s.tp)
    dp_local = min(s.dp, max(1, g // (s.tp * s.cp)))
    h_dp = max(1, s.dp // dp_local)
    h_cp = max(1, s.cp // cp_local)
    ex = expert_layout(s.tp, s.cp * s.dp, s.ep, g, s.etp)     # the experts fold over the stage's tp x cp x dp ranks
    return {"dp_local": dp_local, "h_dp": h_dp, "ep_local": ex.ep_local, "cp_local": cp_local, "h_cp": h_cp,
            "dpcp_local": dp_local * cp_local, "h_dpcp": h_dp * h_cp,
            "h_ep": ex.h_ep, "edp": ex.edp, "edp_local": ex.edp_local, "etp": ex.etp,
            "h_edp": ex.h_edp, "stages_per_host": max(1, g // (s.tp * s.dp * s.cp)),
            "m": job.global_batch // (s.dp * s.micro_batch), "stage_layers": -(-job.model.layers // s.pp),
            "stage_moe": -(-job.model.moe_layers // s.pp)}


def check(job: Job, s: Strategy) -> None:
    """Raise Infeasible with the reason when `s` cannot run `job` (shapes, placement, batch, memory)."""
    m, g = job.model, job.gpus_per_host
    if min(s.tp, s.pp, s.dp, s.ep, s.micro_batch, s.interleave, s.cp) < 1:
        raise Infeasible("every degree must be at least 1")
    if s.tp * s.pp * s.dp * s.cp != job.gpus:
        raise Infeasible(f"tp x pp x dp x cp = {s.tp * s.pp * s.dp * s.cp}, not the {job.gpus} GPUs")
    if g % s.tp:
        raise Infeasible(f"tp={s.tp} does not divide the {g} GPUs of a host (TP stays in the scale-up domain)")
    if m.heads % s.tp:
        raise Infeasible(f"tp={s.tp} does not divide the {m.heads} attention heads")
    if s.cp > 1:
        if m.seq_len % (2 * s.cp):
            raise Infeasible(f"cp={s.cp}: the {m.seq_len}-token sequence does not split into 2 cp balanced chunks")
        if (s.cp * s.tp) % g and g % (s.cp * s.tp):
            raise Infeasible(f"tp x cp = {s.tp * s.cp} neither fills nor divides the {g} GPUs of a host")
    dp_host = max(1, g // (s.tp * s.cp))
    if s.dp % dp_host and dp_host % s.dp:
        raise Infeasible(f"dp={s.dp} neither fills nor divides the {dp_host} DP ranks a host holds at tp={s.tp}")
    if s.pp * s.interleave > m.layers + (2 if s.interleave > 1 else 0):
        raise Infeasible(f"pp x interleave = {s.pp * s.interleave} exceeds the {m.layers} layers"
                         + (" and the embedding and output chunks" if s.interleave > 1 else ""))
    if s.interleave > 1 and s.pp == 1:
        raise Infeasible("interleaving needs pp > 1")
    if s.recompute not in RECOMPUTE:
        raise Infeasible(f"recompute must be one of {', '.join(RECOMPUTE)}")
    if s.zero not in (0, 1, 2, 3):
        raise Infeasible("zero must be 0, 1, 2 or 3")
    if job.attention not in ATTENTION:
        raise Infeasible(f"attention must be one of {', '.join(ATTENTION)}")
    if s.moe_overlap not in MOE_OVERLAP:
        raise Infeasible(f"moe_overlap must be one of {', '.join(MOE_OVERLAP)}")
    if s.moe_dispatch not in MOE_DISPATCH:
        raise Infeasible(f"moe_dispatch must be one of {', '.join(MOE_DISPATCH)}")
    if job.global_batch % (s.dp * s.micro_batch):
        raise Infeasible(f"global batch {job.global_batch} is not a multiple of dp x micro_batch = "
                         f"{s.dp * s.micro_batch}", "batch")
    mb = job.global_batch // (s.dp * s.micro_batch)
    if s.interleave > 1 and mb % s.pp:
        raise Infeasible(f"interleaved 1F1B needs the {mb} micro-batches to be a multiple of pp={s.pp}", "batch")
    if m.experts is None:
        if s.ep != 1:
            raise Infeasible(f"ep={s.ep} needs a mixture-of-experts model")
        if s.moe_overlap != "none" or s.moe_dispatch != "alltoall" or s.etp or s.recompute == "moe":
            raise Infeasible("moe_overlap, moe_dispatch, etp and recompute=moe need a mixture-of-experts model")
    else:
        why = valid_expert_degree(m.experts, s.tp, s.cp * s.dp, s.ep, s.etp)
        if why:
            raise Infeasible(why)
        e = expert_tp(s.tp, s.cp * s.dp, s.ep, s.etp)
        if s.tp * s.cp * s.dp >= g and (e * s.ep) % g and g % (e * s.ep):
            raise Infeasible(f"ep={s.ep} neither fills nor divides the {g // e} expert ranks of a host")
        if s.ep == 1 and (s.moe_overlap != "none" or s.moe_dispatch != "alltoall"):
            raise Infeasible("moe_overlap and moe_dispatch shape the expert-parallel all-to-all: they need ep > 1")
        if s.moe_overlap != "none" and mb < 2:
            raise Infeasible(f"moe_overlap={s.moe_overlap} overlaps one micro-batch's all-to-alls with another's "
                             f"compute: it needs at least 2 micro-batches, not {mb}", "batch")
        if s.moe_overlap == "dualpipe" and (why := dualpipe_refusal(s.pp, s.interleave, mb)):
            raise Infeasible(why, "batch" if "micro-batches" in why else "shape")
    mem = memory(job, s)
    if mem.total > job.device.hbm_bytes:
        raise Infeasible(f"needs {mem.total / 1e9:.1f} GB per GPU (weights {mem.weights / 1e9:.1f}, gradients "
                         f"{mem.gradients / 1e9:.1f}, optimizer {mem.optimizer / 1e9:.1f}, activations "
                         f"{mem.activations / 1e9:.1f}), above the {job.device.hbm_bytes / (1 << 30):.0f} GiB "
                         f"({job.device.hbm_bytes / 1e9:.1f} GB) of "
                         f"{job.device.name} HBM", "memory")


def memory(job: Job, s: Strategy) -> Memory:
    """Bytes per GPU (module docstring)."""
    m = job.model
    lay = _layout(job, s)
    psi_d = m.dense_params / (s.tp * s.pp)
    psi_e = m.expert_params / (lay["etp"] * s.pp * s.ep)
    shard_d, shard_e = s.dp * s.cp, lay["edp"]

    def part(nbytes: float, stage: int) -> float:
        return nbytes * psi_d / (shard_d if s.zero >= stage else 1) + nbytes * psi_e / (shard_e if s.zero >= stage else 1)

    per_layer = m.activation_bytes_per_layer(s.micro_batch, s.tp, s.recompute, s.sp and s.tp > 1, s.cp)
    if s.recompute == "moe":               # the MoE layers recompute their MoE module; the dense ones are selective
        n_l, n_moe = lay["stage_layers"], min(lay["stage_moe"], lay["stage_layers"])
        dense = m.activation_bytes_per_layer(s.micro_batch, s.tp, "selective", s.sp and s.tp > 1, s.cp)
        per_layer = (dense * (n_l - n_moe) + per_layer * n_moe) / n_l
    in_flight = min(lay["m"], s.pp + (1 if s.moe_overlap == "dualpipe" else 0))
    first = per_layer * lay["stage_layers"] * in_flight
    if s.interleave > 1:
        first *= 1 + (s.pp - 1) / (s.pp * s.interleave)
    logits = 4.0 * m.seq_len * s.micro_batch * m.vocab / (s.tp * s.cp)
    act = first + logits if s.pp == 1 else max(first, per_layer * lay["stage_layers"] + logits)
    copies = 2 if s.moe_overlap == "dualpipe" else 1          # DualPipe keeps two copies of the parameters
    return Memory(copies * part(PARAM_BYTES, 3), part(GRAD_BYTES, 2), part(OPTIMIZER_BYTES, 1), act)


def _dp_volume(s: Strategy, psi: float, m: int) -> tuple[float, float]:
    """(reduce-scatter or allreduce-RS-half bytes, allgather bytes) a DP group moves per GPU share, before
    the ring factor: stage 0 = allreduce = RS + AG of 2 Psi; 1-2 the same; 3 + 2 m allgathers."""
    rs = GRAD_BYTES * psi
    ag = PARAM_BYTES * psi * (1 + (2 * m if s.zero == 3 else 0))
    return rs, ag


def traffic(job: Job, s: Strategy) -> Traffic:
    """Bytes one GPU sends per iteration per kind (ring collectives: (n-1)/n of the buffer per RS or AG;
    all-to-all: the share for the other ranks)."""
    m = job.model
    lay = _layout(job, s)
    a = m.activation_message_bytes(s.micro_batch) / s.cp
    n_tp = _tp_collectives(m, s, lay) * lay["stage_layers"]
    tp = lay["m"] * n_tp * 2 * (s.tp - 1) / s.tp * a if s.tp > 1 else 0.0
    pp = lay["m"] * 2 * s.interleave * a / s.tp if s.pp > 1 else 0.0
    dp = 0.0
    for psi, n in ((m.dense_params / (s.tp * s.pp), s.dp * s.cp),
                   (m.expert_params / (lay["etp"] * s.pp * s.ep), lay["edp"])):
        if n > 1:
            rs, ag = _dp_volume(s, psi, lay["m"])
            dp += (rs + ag) * (n - 1) / n
    ep = 0.0
    if m.experts is not None and s.ep > 1:
        d = 2.0 * (m.seq_len / (s.tp * s.cp)) * s.micro_batch * m.hidden * m.k
        ep = lay["m"] * lay["stage_moe"] * _alltoalls(s) * d * (s.ep - 1) / s.ep
        if s.moe_dispatch == "deepep" and lay["h_ep"] > 1:     # once per remote host, then NVLink forwarding
            inter = remote_copies(m.k, m.experts, lay["h_ep"], m.node_limit, "deepep") / m.k
            intra = (lay["ep_local"] - 1) / lay["ep_local"]
            ep *= (inter + intra) / ((s.ep - 1) / s.ep)
    cp = lay["m"] * lay["stage_layers"] * 3 * _kv_bytes(m, s) * (s.cp - 1) / s.cp if s.cp > 1 else 0.0
    return Traffic(tp, pp, dp, ep, cp)


def _moe_forward_again(s: Strategy) -> bool:
    """The MoE modules run their forward again in the backward (full or `moe` recomputation)."""
    return s.recompute in ("full", "moe")


def _alltoalls(s: Strategy) -> int:
    """Expert-parallel all-to-alls per MoE layer and micro-batch: dispatch and combine forward and backward, and
    forward again when the MoE module is recomputed."""
    return 6 if _moe_forward_again(s) else 4


def _tp_collectives(m: Transformer, s: Strategy, lay: dict) -> float:
    """TP collectives (allreduce-equivalents: a reduce-scatter and an allgather with SP) per layer of the busiest
    stage, on average: 4 a layer (6 with full recomputation), the attention's and the MLP's, forward and
    backward; an MoE layer whose experts are not split over TP (etp = 1, Megatron-Core's parallel folding) has
    only the attention's, 2 (3): its tokens go to the experts by the expert-parallel all-to-all straight from
    the sequence-parallel shards (Liu et al. 2025, arXiv:2504.14960, section 3; Megatron-Core's token
    dispatchers gather over the expert tensor-parallel group only when etp > 1)."""
    n = 6 if s.recompute == "full" else 4
    moe = min(lay["stage_moe"], lay["stage_layers"]) if m.experts is not None else 0
    if s.tp == 1 or moe == 0 or (lay["etp"] != 1 and s.recompute != "moe"):
        return float(n)
    # an MoE layer: the attention's n/2, and its MLP's n/2 (+1 when the module is recomputed) unless etp = 1
    per_moe = n / 2 + (0 if lay["etp"] == 1 else n / 2 + (1 if s.recompute == "moe" else 0))
    return (n * (lay["stage_layers"] - moe) + per_moe * moe) / lay["stage_layers"]


def _ring_nv(job: Job, n: int, size: float) -> float:
    """A ring reduce-scatter (or allgather) of `size` bytes per GPU over n GPUs of the scale-up domain (the
    TP collectives, NCCL's ring)."""
    if n <= 1 or size <= 0:
        return 0.0
    dev = job.device
    return (n - 1) * dev.nvlink_alpha_s + (n - 1) / n * size / dev.nvlink_Bps


def _scaleup(job: Job, n: int, size: float) -> float:
    """The scale-up phase of a hierarchical collective (`schedule/hierarchical.py`): one step in which every
    GPU sends each of its n - 1 peers their share of `size` bytes through the switch."""
    if n <= 1 or size <= 0:
        return 0.0
    dev = job.device
    return dev.nvlink_alpha_s + (n - 1) / n * size / dev.nvlink_Bps


def _hier(job: Job, fabric: Fabric, local: int, hosts: int, size: float, kind: str) -> tuple[float, float]:
    """(scale-up phase, inter-host phase) of one hierarchical reduce-scatter ("rs") or allgather ("ag") of
    `size` bytes per GPU over a group with `local` GPUs on each of `hosts` hosts: the inter-host phase carries
    G size/local bytes per host (module docstring)."""
    inter = job.gpus_per_host * size / local
    between = (fabric.reduce_scatter_s if kind == "rs" else fabric.allgather_s)(hosts, inter) if hosts > 1 else 0.0
    return _scaleup(job, local, size), between


def layer_exposure(compute: float, tp: float, nv: float, net: float) -> float:
    """What a layer's DP collective (scale-up phase `nv`, inter-host phase `net`, run one after the other)
    adds to the layer's compute `compute` and blocking TP time `tp`: the scale-up phase shares NVLink with
    TP, so the layer lasts max(c + t_tp, t_tp + d_nv, d_nv + d_net) (module docstring)."""
    return max(compute + tp, tp + nv, nv + net) - (compute + tp)


def _pass_exposure(n: int, compute: float, tp: float, nv: float, net: float) -> float:
    """n layers each issuing a collective (nv, net) under the adjacent layer: the first (or last) has no
    layer to hide behind, the other n - 1 expose `layer_exposure` each."""
    if n < 1 or nv + net <= 0:
        return 0.0
    return nv + net + (n - 1) * layer_exposure(compute, tp, nv, net)


def _kv_bytes(m: Transformer, s: Strategy) -> float:
    """K and V of one micro-batch's whole sequence for a GPU's heads (16-bit): 2 x 2 s b kv_dim / tp."""
    kv_dim = (m.kv_heads or m.heads) * (m.hidden // m.heads)
    return 4.0 * m.seq_len * s.micro_batch * kv_dim / min(s.tp, m.kv_heads or m.heads)


def evaluate(job: Job, s: Strategy, fabric: Fabric, *, checked: bool = False) -> StrategyResult:
    """Iteration time, breakdown, memory and traffic of `s` (module docstring); Infeasible with the reason
    (unless the caller has `checked` it)."""
    if not checked:
        check(job, s)
    br = breakdown(job, s, fabric)
    it = br.total
    achieved = job.model_flops() / it / job.gpus
    return StrategyResult(s, it, br, memory(job, s), traffic(job, s), achieved / 1e12,
                          achieved / job.device.peak(job.precision))


def _alltoall(job: Job, s: Strategy, fabric: Fabric, lay: dict) -> float:
    """One dispatch (or combine) of one micro-batch on the busiest stage: D = 2 (s/tp) b h top_k bytes per GPU;
    the share for other hosts between hosts (G D (ep - ep_local)/ep per host, or the node-limited copies of
    `moe.remote_copies` with the "deepep" dispatcher), the rest over NVLink, both at once."""
    m, dev, g = job.model, job.device, job.gpus_per_host
    d = 2.0 * (m.seq_len / (s.tp * s.cp)) * s.micro_batch * m.hidden * m.k
    local, hosts = lay["ep_local"], lay["h_ep"]
    if s.moe_dispatch == "deepep" and hosts > 1:
        between = g * d / m.k * remote_copies(m.k, m.experts, hosts, m.node_limit, "deepep")
        nv = d * (local - 1) / local
    else:
        between = g * d * (s.ep - local) / s.ep
        nv = d * (local - 1) / s.ep
    intra = dev.nvlink_alpha_s + nv / dev.nvlink_Bps if local > 1 else 0.0
    return max(intra, fabric.alltoall_s(hosts, between, g, dev.nvlink_Bps))


def _expert_slowdown(m: Transformer, s: Strategy, etp: int) -> float:
    """`gemm.expert_time_factor` of the routed experts under `s` (expert tensor-parallel degree `etp`): a GPU's
    s b / cp tokens of a micro-batch, spread over the experts."""
    return expert_time_factor(m.seq_len * s.micro_batch / s.cp, m.hidden, m.ffn, s.tp, m.expert_ffn_hidden or m.ffn,
                              m.k, m.experts, s.ep, etp, m.gated)


def expert_slowdown(job: Job, s: Strategy) -> float:
    """The routed experts' time per FLOP over the dense MLP's under `s` (1 for a dense model), as `breakdown`
    prices them."""
    m = job.model
    return _expert_slowdown(m, s, _layout(job, s)["etp"]) if m.experts is not None else 1.0


def breakdown(job: Job, s: Strategy, fabric: Fabric) -> Breakdown:
    """The iteration's parts for a checked strategy (`evaluate` without memory and traffic: what the search
    compares)."""
    m, dev, g = job.model, job.device, job.gpus_per_host
    lay = _layout(job, s)
    mb, n_l = lay["m"], lay["stage_layers"]
    tokens = m.seq_len * s.micro_batch
    frac = n_l / m.layers
    scores = m.attention_score_flops_per_token()
    executed = m.forward_flops_per_token() - (scores / 2 if job.attention == "causal" else 0.0)
    attn_exec = scores / 2 if job.attention == "causal" else scores

    def secs(flops: float) -> float:
        return dev.seconds(flops, job.precision, m.hidden)

    # routed experts' GEMMs at their own shapes (`gemm.expert_time_factor`), the rest at the calibrated e(h)
    routed = m.routed_expert_flops_per_token() if m.experts is not None else 0.0
    slow = _expert_slowdown(m, s, lay["etp"]) if routed > 0 else 1.0
    # the attention scores in a flash kernel (the "causal" jobs) run at the device's e_max: its tiles are blocks of
    # the sequence, whatever the hidden size e(h) describes (module docstring)
    def attn_secs(flops: float) -> float:
        return dev.seconds(flops, job.precision, None) if job.attention == "causal" else secs(flops)

    scores_f = attn_secs(attn_exec * tokens * frac / (s.tp * s.cp))
    t_f = secs((executed - attn_exec + routed * (slow - 1)) * tokens * frac / (s.tp * s.cp)) + scores_f
    t_b = 2 * t_f
    # recomputation; a flash kernel's backward recomputes the scores QK^T (FlashAttention-2, Dao 2023, section
    # 3.1.2: five matrix products backward for the forward's two) whatever the strategy keeps
    flash = scores_f / 2 if job.attention == "causal" else 0.0
    selective = flash if job.attention == "causal" else scores_f
    t_r = {"none": flash, "full": t_f + flash, "selective": selective, "moe": selective}[s.recompute]
    if s.recompute == "moe" and m.experts is not None:          # the MoE layers' modules forward again
        t_r += secs((m.moe_module_flops_per_token() + routed * (slow - 1)) * tokens
                    * lay["stage_moe"] / m.moe_layers / (s.tp * s.cp))
    a = m.activation_message_bytes(s.micro_batch) / s.cp
    n_coll = 6 if s.recompute == "full" else 4
    tp_layer = _tp_collectives(m, s, lay) * 2 * _ring_nv(job, s.tp, a) if s.tp > 1 else 0.0
    t_tp = n_l * tp_layer
    t_pp = 0.0
    if s.pp > 1:
        per_host = g * a / s.tp
        if s.pp > lay["stages_per_host"]:
            cross = fabric.p2p_s(per_host, g)
        else:
            cross = dev.nvlink_alpha_s + (a / s.tp) / dev.nvlink_Bps
        t_pp = 2 * s.interleave * cross
    t_ep = 0.0
    if m.experts is not None and s.ep > 1:
        a2a = _alltoalls(s) * _alltoall(job, s, fabric, lay)
        hidden = exposed_alltoall(a2a, (t_f + t_b + t_r) / lay["stage_layers"], s.moe_overlap)
        if s.moe_overlap != "none":          # the warm-up and cool-down chunks have no partner
            u = unpaired_share(s.pp, s.interleave, mb)
            hidden = u * a2a + (1 - u) * hidden
        t_ep = lay["stage_moe"] * hidden
    # context parallelism: K,V allgather forward, allgather + gradient reduce-scatter backward, per layer,
    # under the layer's attention compute
    t_cp = 0.0
    if s.cp > 1:
        kv = _kv_bytes(m, s)
        nv, net = _hier(job, fabric, lay["cp_local"], lay["h_cp"], kv, "ag")
        attn_f = secs(attn_exec / m.layers * tokens / (s.tp * s.cp))
        t_cp = n_l * (max(0.0, nv + net - attn_f) + max(0.0, 2 * (nv + net) - 2 * attn_f))
    # data parallelism per layer: dense gradients over dp cp, expert gradients over edp cp
    c_f, c_b = t_f / n_l, (t_b + t_r) / n_l
    tp_f, tp_b = tp_layer * 2 / n_coll, tp_layer * (n_coll - 2) / n_coll
    rs_nv = rs_net = ag_nv = ag_net = 0.0
    for psi, local, hosts, n in ((m.dense_params / (s.tp * s.pp), lay["dpcp_local"], lay["h_dpcp"], s.dp * s.cp),
                                 (m.expert_params / (lay["etp"] * s.pp * s.ep), lay["edp_local"], lay["h_edp"],
                                  lay["edp"])):
        if n > 1 and psi > 0:
            x, y = _hier(job, fabric, local, hosts, GRAD_BYTES * psi / n_l, "rs")
            rs_nv, rs_net = rs_nv + x, rs_net + y
            x, y = _hier(job, fabric, local, hosts, PARAM_BYTES * psi / n_l, "ag")
            ag_nv, ag_net = ag_nv + x, ag_net + y
    per_mb = once = 0.0
    if s.zero == 3:
        e = job.zero3_efficiency
        rs_nv, rs_net, ag_nv, ag_net = rs_nv / e, rs_net / e, ag_nv / e, ag_net / e
        per_mb = _pass_exposure(n_l, c_f, tp_f, ag_nv, ag_net)
        per_mb += ag_nv + ag_net + rs_nv + rs_net + (n_l - 1) * layer_exposure(
            c_b, tp_b, ag_nv + rs_nv, ag_net + rs_net)
    elif s.zero == 2:
        per_mb = _pass_exposure(n_l, c_b, tp_b, rs_nv, rs_net)
        once = _pass_exposure(n_l, c_f, tp_f, ag_nv, ag_net)
    elif s.zero == 1:
        once = _pass_exposure(n_l, c_b, tp_b, rs_nv, rs_net) + _pass_exposure(n_l, c_f, tp_f, ag_nv, ag_net)
    else:
        once = _pass_exposure(n_l, c_b, tp_b, rs_nv + ag_nv, rs_net + ag_net)
    # host work the GPU waits for: the local experts' grouped GEMMs after each MoE layer's device-host sync
    t_host = 0.0
    if m.experts is not None:
        t_host = exposed_host(lay["stage_moe"], m.experts // s.ep, _moe_forward_again(s), job.host_expert_s)
    t_mb = t_f + t_b + t_r + t_tp + t_cp + t_pp + t_ep + per_mb + t_host
    bubble = (s.pp - 1) / s.interleave * t_mb
    if s.moe_overlap == "dualpipe":
        bubble = dualpipe_bubble(s.pp, t_mb, t_b, t_r)
    return Breakdown(mb * (t_f + t_b + t_r), bubble, mb * t_tp, mb * t_pp, mb * per_mb + once, mb * t_ep, mb * t_cp,
                     mb * t_host)


# ----- search ---------------------------------------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def parse_parallelism(text: str) -> dict:
    """`tp=8,pp=8,dp=16[,ep=..][,cp=..][,sp=0|1][,zero=..][,mb=..][,vp=..][,recompute=none|selective|moe|full]
    [,overlap=none|microbatch|dualpipe][,dispatch=alltoall|deepep][,etp=..]` -> fixed keys."""
    keys = {"tp": "tp", "pp": "pp", "dp": "dp", "ep": "ep", "cp": "cp", "sp": "sp", "zero": "zero",
            "mb": "micro_batch", "micro_batch": "micro_batch", "vp": "interleave", "interleave": "interleave",
            "recompute": "recompute", "overlap": "moe_overlap", "moe_overlap": "moe_overlap",
            "dispatch": "moe_dispatch", "moe_dispatch": "moe_dispatch", "etp": "etp"}
    out: dict = {}
    for part in text.split(","):
        if "=" not in part:
            raise ValueError(f"--parallelism: {part!r} is not key=value (keys: {', '.join(keys)})")
        k, v = (x.strip().lower() for x in part.split("=", 1))
        if k not in keys:
            raise ValueError(f"--parallelism: unknown key {k!r} (keys: {', '.join(keys)})")
        if keys[k] in out:
            raise ValueError(f"--parallelism: {k} given twice")
        if keys[k] == "recompute":
            if v not in RECOMPUTE:
                raise ValueError(f"--parallelism: recompute must be one of {', '.join(RECOMPUTE)}")
            out["recompute"] = v
            continue
        if keys[k] == "sp":
            if v not in ("0", "1"):
                raise ValueError("--parallelism: sp must be 0 or 1")
            out["sp"] = v == "1"
            continue
        if keys[k] in ("moe_overlap", "moe_dispatch"):
            allowed = MOE_OVERLAP if keys[k] == "moe_overlap" else MOE_DISPATCH
            if v not in allowed:
                raise ValueError(f"--parallelism: {k} must be one of {', '.join(allowed)}")
            out[keys[k]] = v
            continue
        if not v.isdigit() or not 0 <= int(v) <= 1 << 20:
            raise ValueError(f"--parallelism: {k} must be a non-negative integer, got {v!r}")
        out[keys[k]] = int(v)
    return out


def strategies(job: Job, fixed: dict | None = None):
    """Every strategy shape the search tries, honouring the `fixed` keys (the rest are searched)."""
    fixed = fixed or {}
    m, g = job.model, job.gpus_per_host
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in _divisors(g) if m.heads % t == 0]
    recomputes = [r for r in RECOMPUTE if r != "moe" or m.experts is not None]
    for tp in tps:
        if tp < 1 or job.gpus % tp:
            continue
        pps = [fixed["pp"]] if "pp" in fixed else [p for p in _divisors(job.gpus // tp) if p <= m.layers]
        for pp in pps:
            if pp < 1 or job.gpus % (tp * pp):
                continue
            cps = [fixed["cp"]] if "cp" in fixed else [
                c for c in CONTEXT_PARALLEL if c == 1 or (m.seq_len >= CP_MIN_SEQ and (job.gpus // (tp * pp)) % c == 0)]
            for cp in cps:
                if cp < 1 or job.gpus % (tp * pp * cp):
                    continue
                dp = job.gpus // (tp * pp * cp)
                if "dp" in fixed and fixed["dp"] != dp:
                    continue
                eps = [fixed["ep"]] if "ep" in fixed else (
                    [1] if m.experts is None else [e for e in _divisors(tp * cp * dp) if m.experts % e == 0 and
                                                   valid_expert_degree(m.experts, tp, cp * dp, e,
                                                                       fixed.get("etp", 0)) is None])
                overlaps = [fixed["moe_overlap"]] if "moe_overlap" in fixed else (
                    ["none"] if m.experts is None else list(MOE_OVERLAP))
                dispatches = [fixed["moe_dispatch"]] if "moe_dispatch" in fixed else (
                    ["alltoall"] if m.experts is None else list(MOE_DISPATCH))
                vs = [fixed["interleave"]] if "interleave" in fixed else [v for v in INTERLEAVE if v == 1 or pp > 1]
                sp = fixed.get("sp", tp > 1)
                for ep, zero, b, v, rc, ov, dis in itertools.product(
                        eps, [fixed["zero"]] if "zero" in fixed else (0, 1, 2, 3),
                        [fixed["micro_batch"]] if "micro_batch" in fixed else MICRO_BATCHES, vs,
                        [fixed["recompute"]] if "recompute" in fixed else recomputes, overlaps, dispatches):
                    if ep == 1 and (ov, dis) != ("none", "alltoall"):
                        continue                     # no all-to-all to overlap or dispatch
                    etp = fixed.get("etp", 0) if m.experts is None else expert_tp(tp, cp * dp, ep, fixed.get("etp", 0))
                    yield Strategy(tp, pp, dp, ep, zero, b, v, rc, cp=cp, sp=sp, moe_overlap=ov, moe_dispatch=dis,
                                   etp=etp)


def feasible(job: Job, fixed: dict | None = None) -> tuple[list[Strategy], dict, int, str]:
    """(strategies that fit, refusals counted by kind, strategies tried, one refusal's reason): the checks do
    not depend on the network, so a search over several topologies runs them once."""
    ok, refused, tried, last = [], {}, 0, ""
    for s in strategies(job, fixed):
        tried += 1
        try:
            check(job, s)
        except Infeasible as exc:
            refused[exc.kind] = refused.get(exc.kind, 0) + 1
            last = str(exc)
            continue
        ok.append(s)
    return ok, refused, tried, last


def leanest(fixed: dict | None = None) -> dict:
    """`fixed` completed with the memory-leanest choice of every knob it leaves free (ZeRO 3, micro-batch 1, no
    interleaving, full recomputation): memory only grows with the others and the batch rules they must meet
    hold for these, so `feasible(job, leanest(fixed))` is empty exactly when `feasible(job, fixed)` is (a quick
    existence check). With a fixed interleave > 1 the micro-batch stays free (the rule m % pp == 0 is not
    monotone in it)."""
    fixed = dict(fixed or {})
    probe = {"zero": 3, "interleave": 1, "recompute": "full", "moe_overlap": "none", "moe_dispatch": "alltoall"}
    if fixed.get("interleave", 1) == 1:
        probe["micro_batch"] = 1
    return {**probe, **fixed}


def search(job: Job, fabric: Fabric, fixed: dict | None = None, candidates=None) -> StrategyResult:
    """The fastest feasible strategy on `fabric` (ties: less memory); Infeasible with a reason when none fits.
    `fixed` keys are not searched (`parse_parallelism`); `candidates` is `feasible(job, fixed)` when the
    caller has it."""
    ok, refused, tried, last = candidates if candidates is not None else feasible(job, fixed)
    if not ok:
        if tried == 0:
            raise Infeasible(f"no strategy of {job.gpus} GPUs matches {fixed}")
        raise Infeasible(f"no feasible strategy among {tried} tried; e.g. {last}")
    best, best_key = None, None
    for s in ok:
        t = breakdown(job, s, fabric).total
        if best_key is None or t < best_key[0] or (t == best_key[0] and memory(job, s).total < best_key[1]):
            best, best_key = s, (t, memory(job, s).total)
    return replace(evaluate(job, best, fabric, checked=True), searched=tried, refused=refused)
