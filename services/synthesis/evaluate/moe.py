"""Mixture-of-experts parallelism for the hybrid-parallel model (docs/training.md, "Mixture of experts"): where the
experts live (expert parallelism, expert-data parallelism, folding over the tensor-parallel ranks), how many copies
of a token cross the network per all-to-all (with node-limited routing) and how much of the all-to-all time the
compute hides (overlap). Pure arithmetic; `parallelism` prices the collectives.

Placement (Megatron-LM rank order: TP innermost, then DP, then PP; Megatron-Core's MoE parallel folding,
Liu et al. 2025, "MoE Parallel Folding", arXiv:2504.14960, section 3: the expert layers re-factor a stage's tp x dp
ranks as etp x ep x edp, etp innermost): the expert tensor-parallel degree etp divides tp, etp ep divides tp dp,
and each expert is replicated over edp = tp dp / (etp ep) ranks (expert-data parallelism, DeepSpeed-MoE:
Rajbhandari et al. ICML'22 section 4.1; GShard and Switch replicate nothing). An EP group is ep ranks at stride
etp inside a block of etp ep consecutive ranks of the stage, an expert-data group the ranks at stride etp ep; a
host holds G consecutive ranks, so a group of a block above G spans etp ep / G hosts with G/etp of its GPUs on
each. Unless given, etp is tp when ep divides dp (the experts split like the dense layers: an EP group is ep DP
ranks of one TP rank) and tp dp / ep above dp (folding; 1 when ep = tp dp, Megatron-Core's "ETP 1").

All-to-all volume (dispatch or combine): a GPU holds s b / tp tokens (sequence parallelism) of 2 h bytes each.
The dispatcher (`MOE_DISPATCH`):
- "alltoall" (GShard, Switch, Megatron-Core's all-to-all dispatcher: one NCCL all-to-all): every one of a token's
  top_k copies travels on its own: k (h_ep - 1)/h_ep copies leave the host when the experts are spread uniformly
  over the h_ep hosts of the group (and the routing is balanced, the load-balancing losses' goal); routing limits
  do not change it.
- "deepep" (DeepSeek-V3 technical report, 2024, section 3.2.2, and its DeepEP kernels, Megatron-Core's flex
  dispatcher: a token crosses InfiniBand once per target node, to the GPU of the same in-node index, and is
  forwarded over NVLink to its experts there): the copies that leave the host are the distinct remote hosts of the
  token's experts. With node-limited routing (sections 2.1.2 and 4.2: each token's experts on at most M = 4
  nodes) M' = min(M, h_ep) hosts are chosen, otherwise M' = h_ep; with the k experts uniform among the
  e = E/h_ep experts of each chosen host, a chosen host receives nothing with probability
  C((M'-1) e, k) / C(M' e, k), and is the token's own with probability 1/h_ep, so the expected remote hosts are
  M' (1 - C((M'-1) e, k)/C(M' e, k)) (h_ep - 1)/h_ep <= min(M, k). The NVLink forwarding moves the copies of
  every arriving token to its experts: (ep_local - 1)/ep_local of the k copies per GPU.

Overlap of dispatch and combine with compute (`MOE_OVERLAP`):
- "none": the all-to-alls block the compute stream (GShard, Lepikhin et al. 2021; Switch Transformer, Fedus et
  al. JMLR 2022; DeepSpeed-MoE; Megatron-Core without --overlap-moe-expert-parallel-comm).
- "microbatch" and "dualpipe": a micro-batch's dispatch and combine run while another micro-batch computes
  (DeepSeek-V3 report section 3.2.1, DualPipe: a forward and a backward chunk paired, "both all-to-all and PP
  communication can be fully hidden"; Megatron-Core v0.14 --overlap-moe-expert-parallel-comm, "batch-level overlapping to hide EP-A2A
  communication", 1F1B merging one micro-batch's forward with another's backward). Per MoE layer the exposed time
  is max(A, C + min(A, C) c/(1 - c)) - C: A the layer's all-to-alls of one micro-batch (forward and backward), C
  the compute of one layer's forward and backward (with recomputation) of the other micro-batch, the stage's
  average per layer, and c the share of the GPU's streaming multiprocessors the communication kernels hold while
  they run (DeepSeek-V3 section 3.2.2: 20 SMs suffice for InfiniBand and NVLink, of the H800's 132), so the
  compute they overlap runs on 1 - c of the SMs. It needs two micro-batches (m >= 2). The chunks of the
  pipeline's warm-up and cool-down have no partner and expose their all-to-alls whole (`unpaired_share`: in
  1F1B the first stage runs pp - 1 forwards before its first backward and as many backwards after its last
  forward, so a share max(1, pp - 1)/m of the chunks is alone; interleaved with v chunks, Megatron-LM's
  schedule warms up with 2 (pp - 1) + (v - 1) pp forwards, Narayanan et al. SC'21 section 2.2, a share
  (2 (pp - 1) + (v - 1) pp) / (m v)).
- "dualpipe" is DeepSeek-V3's own schedule (report section 3.2.1, Table 2): the same overlap, in a bidirectional
  pipeline whose bubble is (pp/2 - 1)(F&B + B - 3W) instead of 1F1B's (pp - 1)(F + B), F&B the paired forward
  and backward chunk (our t_mb, the overlapped micro-batch), B the backward with its recomputation and W the
  weight-gradient half of the backward (`dualpipe_bubble`); it keeps two copies of the parameters and pp + 1
  micro-batches' activations, and needs an even pp, no interleaving and an even number of micro-batches.
Host time (`exposed_host`): a dropless MoE layer synchronises device and host in its forward to learn the tokens
per expert (NVIDIA, "Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72", Megatron-LM
docs/discussions, 2025, section 3.1: "eliminate the device-host sync in the MoE model (its purpose is to get the
tokens per expert information)"), and its local experts' grouped GEMMs are issued from the host one expert at a
time (Transformer Engine's grouped linear: one cuBLAS GEMM per expert on several streams, the same guide section 1,
item 3) after per-expert host work (splits, output tensors: "a simple torch.empty will not call any CUDA kernel, but
it will generate a few microseconds of overhead on the host side", section 2). With small experts the GPU waits for
that host work ("CPU overhead or host boundedness", section 2): per MoE layer and micro-batch
    calls x local experts x h
with 6 grouped-GEMM calls (the two expert linears forward, their data and weight gradients backward), 8 when the
MoE forward is recomputed (full or `moe` recomputation), and h the host time per expert and call (`HOST_EXPERT_S`, solved from one published run,
bench/moe_runs.py; CUDA-graphed or sync-free stacks set `Job.host_expert_s` to 0). One published layout shows
it (Megatron-MoE-ModelZoo, Qwen3 readme, H100, TP 4, EP 8, PP 8): 167 TFLOP/s with 16 local experts of 512 tokens
a micro-batch (4K sequences), 295 with 2,048 (16K): the same host work under four times the GPU work.
Tutel's adaptive pipelining (Hwang et al. MLSys'23, section 3.3) and FasterMoE (He et al. PPoPP'22) overlap the
all-to-all with the same layer's expert GEMMs only; the micro-batch overlap hides at least as much (a whole
layer's compute), and is what the published large runs use.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb

__all__ = ["COMM_SM_SHARE", "ExpertLayout", "HOST_EXPERT_S", "MOE_DISPATCH", "MOE_OVERLAP", "dualpipe_bubble",
           "dualpipe_refusal", "expert_layout", "expert_tp", "unpaired_share", "exposed_alltoall", "exposed_host",
           "remote_copies", "valid_expert_degree"]

MOE_OVERLAP = ("none", "microbatch", "dualpipe")
MOE_DISPATCH = ("alltoall", "deepep")
COMM_SM_SHARE = 20 / 132           # DeepSeek-V3 report section 3.2.2: 20 of the H800's 132 SMs communicate
# Host time per local expert and grouped-GEMM call the GPU waits for (module docstring, "Host time"): solved from
# the Megatron-MoE-ModelZoo Qwen3-235B all-to-all row (TP 2, EP 8, PP 32 x VPP 3: 24.2 s a step) by
# `bench.moe_runs.calibrate_host`; every other MoE row is a prediction.
HOST_EXPERT_S = 38.67e-6
GROUPED_GEMM_CALLS = 6             # per MoE layer and micro-batch: fc1, fc2 forward; their dgrad and wgrad backward


@dataclass(frozen=True)
class ExpertLayout:
    """Where the experts of one stage live (module docstring): expert tensor-parallel degree, expert-data
    degree, the EP group's GPUs per host and hosts, the expert-data group's GPUs per host and hosts."""

    etp: int
    edp: int
    ep_local: int
    h_ep: int
    edp_local: int
    h_edp: int


def expert_tp(tp: int, dp: int, ep: int, etp: int = 0) -> int:
    """The expert tensor-parallel degree: `etp` when given (> 0), else tp when ep divides dp and tp dp / ep
    above it (module docstring; 0 when tp dp / ep is not a whole number)."""
    if etp > 0:
        return etp
    if ep <= dp and dp % ep == 0:
        return tp
    return (tp * dp) // ep if (tp * dp) % ep == 0 else 0


def valid_expert_degree(experts: int, tp: int, dp: int, ep: int, etp: int = 0) -> str | None:
    """Why `ep` (and `etp`, 0: automatic) cannot place `experts` over a stage of tp x dp ranks, or None."""
    if ep < 1 or experts % ep:
        return f"ep={ep} must divide the {experts} experts and dp={dp}" + (
            f" (or, folding over TP, tp x dp = {tp * dp})" if tp > 1 else "")
    e = expert_tp(tp, dp, ep, etp)
    if e < 1 or tp % e or (tp * dp) % (e * ep):
        if etp:
            return f"etp={etp} must divide tp={tp}, and etp x ep = {etp * ep} must divide tp x dp = {tp * dp}"
        if ep <= dp:
            return f"ep={ep} must divide the {experts} experts and dp={dp}"
        return (f"ep={ep} above dp={dp} folds over the tensor-parallel ranks (Megatron-Core MoE parallel folding) "
                f"and must divide tp x dp = {tp * dp} with tp x dp / ep dividing tp={tp}")
    return None


def expert_layout(tp: int, dp: int, ep: int, gpus_per_host: int, etp: int = 0) -> ExpertLayout:
    """The layout of a valid (`valid_expert_degree`) expert degree on hosts of `gpus_per_host` GPUs.

    >>> expert_layout(4, 8, 8, 8, etp=1)        # Qwen3-235B's TP 4, EP 8, ETP 1: each EP group in one host
    ExpertLayout(etp=1, edp=4, ep_local=8, h_ep=1, edp_local=1, h_edp=4)
    """
    g = gpus_per_host
    e = expert_tp(tp, dp, ep, etp)
    block = e * ep
    edp = tp * dp // block
    if block <= g:
        edp_local = min(edp, g // block)
        return ExpertLayout(e, edp, ep, 1, edp_local, max(1, edp // edp_local))
    return ExpertLayout(e, edp, g // e, block // g, 1, edp)


def remote_copies(top_k: int, experts: int, group_hosts: int, node_limit: int | None, dispatch: str) -> float:
    """Expected copies of one token that leave its host in one dispatch (or combine) over an EP group spanning
    `group_hosts` hosts (module docstring): k (h-1)/h with the "alltoall" dispatcher; with "deepep", the
    expected distinct remote hosts among the at most `node_limit` (or all h) the token's experts are on.

    >>> remote_copies(2, 4, 2, 1, "alltoall"), remote_copies(2, 4, 2, 1, "deepep")
    (1.0, 0.5)
    >>> round(remote_copies(2, 4, 2, None, "deepep"), 6)
    0.833333
    """
    h = group_hosts
    if h <= 1:
        return 0.0
    if dispatch == "alltoall":
        return top_k * (h - 1) / h
    if dispatch != "deepep":
        raise ValueError(f"moe dispatch must be one of {', '.join(MOE_DISPATCH)}, got {dispatch!r}")
    per_host = experts // h
    m = h if node_limit is None else min(node_limit, h)
    k = min(top_k, m * per_host)
    missed = comb((m - 1) * per_host, k) / comb(m * per_host, k)
    return m * (1 - missed) * (h - 1) / h


def dualpipe_bubble(pp: int, t_mb: float, t_b: float, t_r: float) -> float:
    """DualPipe's bubble (pp/2 - 1)(F&B + B - 3W) with F&B = `t_mb`, B = `t_b` + `t_r` and W = `t_b`/2 (module
    docstring; DeepSeek-V3 report Table 2).

    >>> dualpipe_bubble(16, 3.0, 2.0, 0.0)          # 7 x (3 + 2 - 3)
    14.0
    """
    return max(0.0, (pp / 2 - 1) * (t_mb + t_b + t_r - 1.5 * t_b))


def dualpipe_refusal(pp: int, interleave: int, microbatches: int) -> str | None:
    """Why DualPipe cannot run this pipeline, or None (module docstring)."""
    if pp < 2 or pp % 2:
        return f"DualPipe needs an even number of pipeline stages, not pp={pp}"
    if interleave != 1:
        return "DualPipe is its own bidirectional schedule: no interleaving"
    if microbatches % 2:
        return f"DualPipe needs an even number of micro-batches, not {microbatches}"
    return None


def unpaired_share(pp: int, interleave: int, microbatches: int) -> float:
    """The share of a stage's forward and backward chunks with no partner to overlap with (module docstring).

    >>> unpaired_share(1, 1, 8), unpaired_share(4, 1, 8), unpaired_share(8, 4, 128)
    (0.125, 0.375, 0.07421875)
    """
    if interleave > 1:
        warmup = 2 * (pp - 1) + (interleave - 1) * pp
        return min(1.0, warmup / (microbatches * interleave))
    return min(1.0, max(1, pp - 1) / microbatches)


def exposed_alltoall(alltoall_s: float, compute_s: float, overlap: str, sm_share: float = COMM_SM_SHARE) -> float:
    """The time one MoE layer's all-to-alls of one micro-batch (`alltoall_s`, forward and backward) add to the
    compute stream: all of it without overlap; with the micro-batch overlap what exceeds `compute_s` (the other
    micro-batch's forward and backward of one layer), the overlapped compute slowed to 1 - `sm_share` of the SMs
    (module docstring).

    >>> exposed_alltoall(3.0, 5.0, "none"), exposed_alltoall(3.0, 5.0, "microbatch", 0.0)
    (3.0, 0.0)
    >>> exposed_alltoall(7.0, 5.0, "microbatch", 0.0), exposed_alltoall(3.0, 5.0, "microbatch", 0.25)
    (2.0, 1.0)
    """
    if overlap == "none":
        return alltoall_s
    if overlap in ("microbatch", "dualpipe"):
        slowed = compute_s + min(alltoall_s, compute_s) * sm_share / (1 - sm_share)
        return max(alltoall_s, slowed) - compute_s
    raise ValueError(f"moe overlap must be one of {', '.join(MOE_OVERLAP)}, got {overlap!r}")


def exposed_host(moe_layers: int, local_experts: int, forward_again: bool, per_expert_s: float = HOST_EXPERT_S) -> float:
    """Host time the GPU waits for in one micro-batch of `moe_layers` MoE layers with `local_experts` experts on
    the GPU (module docstring, "Host time"): each layer's grouped-GEMM calls (6, or 8 when the forward is
    recomputed) prepare every local expert on the host after the layer's device-host sync.

    >>> round(exposed_host(12, 16, False, 35e-6), 6), round(exposed_host(12, 16, True, 35e-6), 6)
    (0.04032, 0.05376)
    """
    calls = GROUPED_GEMM_CALLS + (2 if forward_again else 0)
    return moe_layers * calls * local_experts * per_expert_s
