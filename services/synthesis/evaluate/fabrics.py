"""The network between hosts for multi-GPU training (docs/training.md): a direct-connect topology of the hosts (its
d NICs per host are its ports) or a switched baseline; what the hybrid-parallel iteration model asks of it.

Units: `link.node_bandwidth_Bps` is B, a host's total egress over its d NICs (each NIC B/d); `link.alpha_s`
the per-step latency. Every price is for collectives that run on all hosts at once (the concurrent groups of
one parallelism kind), given the bytes per host (summed over the host's GPUs) and the hosts a group spans.

Direct-connect (`DirectFabric`): the expression's reduce-scatter and allgather costs (steps, tau), measured
from their model-checked schedules (or the frontier's exact per-collective prices of the same schedules).
Groups spanning all N hosts are exact: the G GPUs' concurrent groups span the same hosts and their identical
schedules load every link with the sum of their bytes, which is the N-host schedule of the summed bytes per
host (one collective; the scale-up phases before and after it are priced by the caller). Groups spanning
h < N hosts (one per pipeline stage) run the same N-host schedule's steps with its bandwidth term carried over
at the same efficiency: tau_h = tau_N ((h - 1)/h) / ((N - 1)/N) - an estimate (the groups need less traffic
per host but share links with each other). All-to-all: a host's Y bytes to the other hosts of its group
leave at the rate (N - 1) f B/d of the uniform all-to-all, f the MCF throughput of LP (3) (the paper's
convention, no alpha). Pipeline point-to-point: the stages are placed on neighbouring hosts, one direct
link of B/d between them.

Switched baselines (`SwitchedFabric`): hosts under leaf switches of `leaf_hosts` hosts (32: the DGX
SuperPOD scalable unit of 32 nodes, NVIDIA DGX SuperPOD reference architecture), uplinks oversubscribed
r:1 (1 = the non-blocking fat-tree, an ideal switch). Reduce-scatter of X bytes per host over h hosts by
recursive halving with the nearest partners first (Thakur, Rabenseifner and Gropp 2005): ceil(log2 h) steps;
X (1 - 1/k) stays under a leaf (k = min(h, leaf_hosts)) and X (1/k - 1/h) crosses the uplinks at B/r, so
tau = (1 - 1/k) + r (1/k - 1/h); the allgather mirrors it. All-to-all: Y/B, and its cross-leaf share
(1 - leaf/h) at B/r when that is slower. Point-to-point: all of a host's NICs (rail to rail). The rail-
optimised baseline ("rail-only", Wang et al. 2023, "How to Build Low-cost Networks for Large Language
Models"): one non-blocking switch per rail and no spine; collectives of the same GPU index across hosts stay
on a rail (as the ideal switch), all-to-all traffic first crosses the scale-up domain to the GPU on the
destination's rail (an extra Y (G - 1)/G over the host's NVLink, G x the per-GPU scale-up bandwidth).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.schedule.cost import LinkModel

__all__ = ["DirectFabric", "Fabric", "SWITCHED", "SwitchedFabric", "switched_fabric"]

LEAF_HOSTS = 32


@dataclass(frozen=True)
class Fabric:
    kind: str                  # "frontier", "topology" or "baseline"
    name: str
    expr: str
    hosts: int
    nics: int
    link: LinkModel

    def reduce_scatter_s(self, group_hosts: int, bytes_per_host: float) -> float:
        raise NotImplementedError

    def allgather_s(self, group_hosts: int, bytes_per_host: float) -> float:
        raise NotImplementedError

    def alltoall_s(self, group_hosts: int, bytes_per_host: float, gpus_per_host: int, scaleup_Bps: float) -> float:
        raise NotImplementedError

    def p2p_s(self, bytes_per_host: float, gpus_per_host: int) -> float:
        raise NotImplementedError

    def allreduce_s(self, group_hosts: int, bytes_per_host: float) -> float:
        return self.reduce_scatter_s(group_hosts, bytes_per_host) + self.allgather_s(group_hosts, bytes_per_host)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "expr": self.expr}


@dataclass(frozen=True)
class DirectFabric(Fabric):
    reducescatter: CollectiveCost = CollectiveCost(0, Fraction(0))
    allgather: CollectiveCost = CollectiveCost(0, Fraction(0))
    alltoall_throughput: float | None = None

    def _scaled(self, cost: CollectiveCost, h: int, size: float) -> float:
        if h <= 1 or size <= 0:
            return 0.0
        n = self.hosts
        tau = float(cost.tau) if h >= n else float(cost.tau) * ((h - 1) / h) / ((n - 1) / n)
        return cost.steps * self.link.alpha_s + tau * size / self.link.node_bandwidth_Bps

    def reduce_scatter_s(self, group_hosts, bytes_per_host):
        return self._scaled(self.reducescatter, group_hosts, bytes_per_host)

    def allgather_s(self, group_hosts, bytes_per_host):
        return self._scaled(self.allgather, group_hosts, bytes_per_host)

    def alltoall_s(self, group_hosts, bytes_per_host, gpus_per_host, scaleup_Bps):
        if group_hosts <= 1 or bytes_per_host <= 0:
            return 0.0
        if not self.alltoall_throughput:
            raise ValueError(f"{self.expr}: an all-to-all between hosts needs the topology's MCF throughput")
        rate = (self.hosts - 1) * self.alltoall_throughput * self.link.node_bandwidth_Bps / self.nics
        return bytes_per_host / rate

    def p2p_s(self, bytes_per_host, gpus_per_host):
        if bytes_per_host <= 0:
            return 0.0
        return self.link.alpha_s + bytes_per_host / (self.link.node_bandwidth_Bps / self.nics)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "reducescatter": self.reducescatter.to_dict(),
                "allgather": self.allgather.to_dict(), "alltoall_throughput": self.alltoall_throughput}


@dataclass(frozen=True)
class SwitchedFabric(Fabric):
    oversubscription: float = 1.0
    leaf_hosts: int = LEAF_HOSTS
    rail_only: bool = False

    def _tau(self, h: int) -> float:
        k = min(h, self.leaf_hosts)
        return (1 - 1 / k) + self.oversubscription * (1 / k - 1 / h)

    def _half(self, h: int, size: float) -> float:
        if h <= 1 or size <= 0:
            return 0.0
        return math.ceil(math.log2(h)) * self.link.alpha_s + self._tau(h) * size / self.link.node_bandwidth_Bps

    def reduce_scatter_s(self, group_hosts, bytes_per_host):
        return self._half(group_hosts, bytes_per_host)

    def allgather_s(self, group_hosts, bytes_per_host):
        return self._half(group_hosts, bytes_per_host)

    def alltoall_s(self, group_hosts, bytes_per_host, gpus_per_host, scaleup_Bps):
        if group_hosts <= 1 or bytes_per_host <= 0:
            return 0.0
        cross = max(0.0, 1 - self.leaf_hosts / group_hosts)
        t = self.link.alpha_s + bytes_per_host / self.link.node_bandwidth_Bps * max(1.0, self.oversubscription * cross)
        if self.rail_only and gpus_per_host > 1:
            t += bytes_per_host * (gpus_per_host - 1) / gpus_per_host / (gpus_per_host * scaleup_Bps)
        return t

    def p2p_s(self, bytes_per_host, gpus_per_host):
        if bytes_per_host <= 0:
            return 0.0
        share = min(gpus_per_host, self.nics) / self.nics
        return self.link.alpha_s + bytes_per_host / (self.link.node_bandwidth_Bps * share)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "oversubscription": self.oversubscription, "leaf_hosts": self.leaf_hosts,
                "rail_only": self.rail_only}


SWITCHED = {"fat-tree": (1.0, False), "fat-tree-2to1": (2.0, False), "fat-tree-4to1": (4.0, False),
            "rail-optimised": (1.0, True)}


def switched_fabric(name: str, hosts: int, nics: int, link: LinkModel) -> SwitchedFabric:
    key = name.lower().replace("_", "-").replace("rail-optimized", "rail-optimised")
    if key not in SWITCHED:
        raise ValueError(f"unknown switched baseline {name!r}; known: {', '.join(SWITCHED)}")
    r, rail = SWITCHED[key]
    return SwitchedFabric("baseline", key, key, hosts, nics, link, oversubscription=r, rail_only=rail)
