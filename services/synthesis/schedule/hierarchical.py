"""Hierarchical collectives over G x N GPUs (docs/training.md): hosts of G GPUs joined by a scale-up domain
(NVSwitch: every GPU reaches every other GPU of its host), and a direct-connect topology of the N hosts whose
d ports are NICs, port k of a host on its GPU k mod G (rail cabling).

The GPU graph (`gpu_topology`): node h G + g is GPU g of host h; arcs: the complete digraph inside each host,
and for every host arc u -> w (out-port k of u, in-port j of w, ports numbered by the arc order of the host
topology) the arc (u, k mod G) -> (w, j mod G).

Allgather (`hierarchical_allgather`) from a host-level allgather schedule S over the N hosts (a host's shard
is the G shards of its GPUs): step 1, every GPU sends its shard to the other G - 1 GPUs of its host (the
scale-up phase); then for every step t of S, an inter-host step (each transfer of chunk C of host v's shard,
u -> w, becomes the transfers of chunk C of each of host v's G GPU shards from u's GPU on that arc's
out-port to w's GPU on its in-port) followed by a scale-up step (each GPU forwards what it has just received
to the other GPUs of its host). Invariant: after each pair of steps every GPU of a host holds what the host
holds in S, so a sender always has what it sends and every GPU ends with every shard. 1 + 2 T_S steps.
Reduce-scatter: the reverse (Definition 5) of the allgather lifted from the host allgather of G^T on the
transposed GPU graph, i.e. of the host reduce-scatter's own reverse: every arc keeps its ports, so the GPU
graph of G^T is the transpose of that of G. Allreduce: reduce-scatter then allgather.

Pricing per phase (`phase_cost`): a scale-up step costs alpha_nv + (a GPU's largest egress in the step) /
nvlink (NVSwitch: a GPU's bandwidth is shared by its peers), an inter-host step alpha + (the largest load of
one NIC link) / (B/d); loads in bytes of a GPU shard, M / (G N) for an allgather of M bytes per GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.topology.graph import Topology

__all__ = ["HierarchicalCost", "gpu_topology", "hierarchical_allgather", "phase_cost", "step_kinds"]


def _ports(host: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Out-port and in-port index of every host arc (rank among the tail's out-arcs, the head's in-arcs)."""
    tails, heads = host.tails.astype(np.int64), host.heads.astype(np.int64)
    out_port = np.arange(tails.size) - np.searchsorted(tails, tails, side="left")
    order = np.argsort(heads, kind="stable")
    in_port = np.empty(tails.size, dtype=np.int64)
    sh = heads[order]
    in_port[order] = np.arange(sh.size) - np.searchsorted(sh, sh, side="left")
    return out_port, in_port


def gpu_topology(host: Topology, gpus: int, *, transpose: bool = False) -> tuple[Topology, np.ndarray, np.ndarray]:
    """(GPU graph, GPU-level tail, head of every host arc) (module docstring); `transpose` builds the GPU graph
    of host^T with the same ports (the transpose of the GPU graph of host)."""
    if gpus < 2:
        raise ValueError("a hierarchical collective needs at least 2 GPUs per host")
    n = host.nodes
    out_port, in_port = _ports(host)
    g_tail = host.tails.astype(np.int64) * gpus + out_port % gpus
    g_head = host.heads.astype(np.int64) * gpus + in_port % gpus
    if transpose:
        g_tail, g_head = g_head, g_tail
    a, b = np.meshgrid(np.arange(gpus), np.arange(gpus), indexing="ij")
    keep = a != b
    base = (np.arange(n) * gpus)[:, None]
    intra_t = (base + a[keep][None, :]).ravel()
    intra_h = (base + b[keep][None, :]).ravel()
    tails = np.concatenate([intra_t, g_tail])
    heads = np.concatenate([intra_h, g_head])
    expr = f"hier({host.expr}{', T' if transpose else ''}; {gpus} GPUs)"
    return Topology(n * gpus, tails, heads, expr), g_tail, g_head


def _lanes(g_tail: np.ndarray, g_head: np.ndarray, gpus: int, nodes: int) -> np.ndarray:
    """The lane of each host arc's GPU-level copy: `gpu_topology` lists the intra-host arcs first (one per
    ordered pair of distinct GPUs of a host), then the host arcs in their order, and the Topology keeps that
    order among parallel arcs."""
    key = g_tail * nodes + g_head
    order = np.argsort(key, kind="stable")
    sk = key[order]
    rank = np.empty(key.size, dtype=np.int64)
    rank[order] = np.arange(sk.size) - np.searchsorted(sk, sk, side="left")
    return rank + ((g_tail // gpus == g_head // gpus) & (g_tail != g_head))


def hierarchical_allgather(host_ag: Schedule, host: Topology, gpus: int, *, transpose: bool = False) -> Schedule:
    """The GPU-level allgather lifted from `host_ag`, an allgather on `host` (or on host^T with `transpose`,
    `host` being the original) (module docstring)."""
    if host_ag.collective is not Collective.ALLGATHER:
        raise ValueError("lift an allgather schedule")
    topo, g_tail, g_head = gpu_topology(host, gpus, transpose=transpose)
    n, G = host.nodes, gpus
    arcs_t = host.heads if transpose else host.tails        # host-level tail/head of the lifted schedule's arcs
    arcs_h = host.tails if transpose else host.heads
    host_keys = arcs_t.astype(np.int64) * n + arcs_h
    order = np.argsort(host_keys, kind="stable")
    sorted_keys = host_keys[order]
    lanes = _lanes(g_tail, g_head, G, n * G)
    grid = host_ag.grid
    rows: dict[str, list] = {k: [] for k in ("source", "sender", "receiver", "lane", "lo", "hi", "step")}

    def emit(step, source, sender, receiver, lane, lo, hi):
        for k, v in zip(("source", "sender", "receiver", "lane", "lo", "hi"), (source, sender, receiver, lane, lo, hi)):
            rows[k].append(np.asarray(v, dtype=np.int64))
        rows["step"].append(np.full(np.asarray(source).size, step, dtype=np.int64))

    def forward(step, gpu_src, gpu_at, lo, hi):
        """Each (shard, chunk) now at GPU gpu_at goes to the other GPUs of its host."""
        host_of = gpu_at // G
        local = gpu_at % G
        others = (local[:, None] + np.arange(1, G)[None, :]) % G
        recv = host_of[:, None] * G + others
        m = G - 1
        emit(step, np.repeat(gpu_src, m), np.repeat(gpu_at, m), recv.ravel(), np.zeros(gpu_at.size * m),
             np.repeat(lo, m), np.repeat(hi, m))

    # scale-up phase: every GPU's whole shard to its host's other GPUs
    all_gpus = np.arange(n * G)
    forward(1, all_gpus, all_gpus, np.zeros(n * G), np.full(n * G, grid))
    step = 1
    for t in range(1, host_ag.steps + 1):
        s = host_ag.step_slice(t)
        src, snd, rcv, lane = (getattr(host_ag, k)[s].astype(np.int64) for k in ("source", "sender", "receiver", "lane"))
        lo, hi = host_ag.lo[s], host_ag.hi[s]
        pos = np.searchsorted(sorted_keys, snd * n + rcv, side="left") + lane
        arc = order[pos]
        if not (sorted_keys[pos] == snd * n + rcv).all():
            raise ValueError(f"host schedule uses a link {host.expr} does not have")
        gs, gr, gl = g_tail[arc], g_head[arc], lanes[arc]      # already transposed by gpu_topology
        # every one of host `src`'s G GPU shards, chunk [lo, hi)
        shard = (src[:, None] * G + np.arange(G)[None, :]).ravel()
        step += 1
        emit(step, shard, *(np.repeat(x, G) for x in (gs, gr, gl, lo, hi)))
        step += 1
        forward(step, shard, *(np.repeat(x, G) for x in (gr, lo, hi)))
    cols = {k: np.concatenate(v) for k, v in rows.items()}
    stepcol = cols.pop("step")
    return Schedule.from_arrays(Collective.ALLGATHER, n * G, grid, stepcol, [Op.COPY] * step, topo.expr, **cols)


def step_kinds(schedule: Schedule, gpus: int) -> np.ndarray:
    """True for the scale-up steps (every transfer inside a host)."""
    out = np.zeros(schedule.steps, dtype=bool)
    for t in range(1, schedule.steps + 1):
        s = schedule.step_slice(t)
        out[t - 1] = bool((schedule.sender[s] // gpus == schedule.receiver[s] // gpus).all())
    return out


@dataclass(frozen=True)
class HierarchicalCost:
    scaleup_steps: int
    scaleup_shards: float          # sum over scale-up steps of a GPU's largest egress, in GPU shards
    network_steps: int
    network_shards: float          # sum over network steps of the largest NIC-link load, in GPU shards

    def time_s(self, shard_bytes: float, *, nvlink_alpha_s: float, nvlink_Bps: float, alpha_s: float,
               nic_Bps: float) -> float:
        return (self.scaleup_steps * nvlink_alpha_s + self.scaleup_shards * shard_bytes / nvlink_Bps
                + self.network_steps * alpha_s + self.network_shards * shard_bytes / nic_Bps)

    def to_dict(self) -> dict:
        return {"scaleup_steps": self.scaleup_steps, "scaleup_shards": self.scaleup_shards,
                "network_steps": self.network_steps, "network_shards": self.network_shards}


def phase_cost(schedule: Schedule, gpus: int) -> HierarchicalCost:
    """Per-phase cost of a hierarchical schedule (module docstring), measured from its transfers."""
    kinds = step_kinds(schedule, gpus)
    su = su_shards = nw = nw_shards = 0
    for t in range(1, schedule.steps + 1):
        s = schedule.step_slice(t)
        if s.start == s.stop:
            continue
        size = (schedule.hi[s] - schedule.lo[s]).astype(np.int64)
        if kinds[t - 1]:
            egress = np.bincount(schedule.sender[s], weights=size, minlength=schedule.nodes)
            su += 1
            su_shards += egress.max() / schedule.grid
        else:
            key = (schedule.sender[s].astype(np.int64) * schedule.nodes + schedule.receiver[s]) * 64 + schedule.lane[s]
            _, inv = np.unique(key, return_inverse=True)
            nw += 1
            nw_shards += np.bincount(inv, weights=size).max() / schedule.grid
    return HierarchicalCost(su, float(su_shards), nw, float(nw_shards))
