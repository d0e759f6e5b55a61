"""Training-iteration simulation: data-parallel DDP buckets and expert-parallel all-to-all on one topology
(paper section 8.3 and App. A.4). Pure: no I/O, no solver; costs come in as numbers.

Model of one iteration (as the paper's simulator describes it):
- compute is one stream: the forward pass runs the layers in order, the backward pass in reverse;
- communication is one FIFO stream: each collective starts when it has been issued and the stream is free,
  and runs alone (all-to-alls and allreduces share the network, never overlap);
- a layer's gradient (`params_bytes`) joins the current bucket when its backward ends; a bucket whose bytes
  reach the capacity is full and launches an allreduce of all its bytes, and so does the last layer's
  bucket, however full; compute does not wait for allreduces; with expert-data parallelism (`expert_parallel`
  ep < N) a layer's expert gradients (1/ep of `expert_params_bytes` per node) join the bucket too and its
  allreduce adds their allreduce over the N/ep replicas;
- an MoE layer issues an all-to-all of `moe_tokens_bytes` when compute reaches it and another when its
  compute ends, in forward and in backward (route tokens to the experts and back), and compute waits for
  each to finish (it may first wait behind allreduces already in the stream); in backward the layer's
  gradient joins the bucket after its second all-to-all;
- the iteration ends when compute and the stream are both done.
Costs: an allreduce of S bytes takes steps * alpha + tau * S/B with (steps, tau) measured from the
topology's verified allreduce schedule (reduce-scatter and allgather costed separately: not always twice the
allgather); an all-to-all of D bytes per node takes steps * alpha + tau * D/B of a verified all-to-all
schedule when one is given, else the MCF time (D/N) / (f B/d) (paper section 7, no alpha term). Inside
expert-parallel groups of ep < N nodes (all groups at once) a node's D (ep-1)/ep bytes for the others leave at
the uniform all-to-all's rate, (N-1) f B/d (the MCF time scaled by ((ep-1)/ep) / ((N-1)/N), as `fabrics`
prices groups; a schedule's tau the same), and the replicas' allreduce of S bytes runs the N-node schedule's
steps with its bandwidth term scaled the same way to r = N/ep nodes: steps alpha + tau ((r-1)/r)/((N-1)/N) S/B.

Reported: iteration, compute and all-to-all time (the sum of the all-to-alls' durations: compute waits
for each of them), the exposed allreduce time (iteration - compute - all-to-all: the time compute waits
behind allreduces or for the last ones), the allreduce busy time, and the bucket capacity. Lower bound
(`iteration_lower_bound`): compute and all-to-all are serial and the stream runs everything, so
    iteration >= max(compute + A*, A* + R*),
with A* the all-to-all time at the Moore throughput bound f* (no d-regular N-node topology does better)
and R* = 2 (k*(N, d) alpha + (N-1)/N P/B) one allreduce of all P gradient bytes at the reduce-scatter +
allgather optimum (App. C.3: every bucket of an RS + AG allreduce pays at least this much per byte and
per step). `topology_lower_bound` is the same bound at one topology's own costs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction

from services.synthesis.evaluate.alltoall import moore_throughput_bound
from services.synthesis.evaluate.training_job import ModelSpec
from services.synthesis.schedule.cost import LinkModel, moore_steps

__all__ = ["CollectiveCost", "IterationReport", "TopologyCosts", "best_bucket", "iteration_lower_bound",
           "simulate_iteration", "topology_lower_bound"]


@dataclass(frozen=True)
class CollectiveCost:
    """(steps, tau) of a verified schedule: T = steps * alpha + tau * size / B."""

    steps: int
    tau: Fraction

    def time_s(self, link: LinkModel, size_bytes: float) -> float:
        return link.time(self.steps, self.tau, size_bytes)

    def to_dict(self) -> dict:
        return {"steps": self.steps, "tau": float(self.tau), "tau_exact": str(self.tau)}


@dataclass(frozen=True)
class TopologyCosts:
    """What the simulator needs to know about a topology: its allreduce cost and its all-to-all cost (the
    MCF throughput f in units of a link, or a verified all-to-all schedule's cost, used when given)."""

    name: str
    nodes: int
    degree: int
    allreduce: CollectiveCost
    alltoall_throughput: float | None = None
    alltoall_schedule: CollectiveCost | None = None

    def allreduce_s(self, link: LinkModel, size_bytes: float) -> float:
        return self.allreduce.time_s(link, size_bytes)

    def _group_share(self, group: int | None) -> float:
        """((g-1)/g) / ((N-1)/N): the bandwidth term of a group of g nodes relative to all N (module docstring)."""
        n = self.nodes
        if group is None or group >= n:
            return 1.0
        return ((group - 1) / group) / ((n - 1) / n)

    def alltoall_s(self, link: LinkModel, bytes_per_node: float, group: int | None = None) -> float:
        share = self._group_share(group)
        if group is not None and group <= 1:
            return 0.0
        if self.alltoall_schedule is not None:
            c = self.alltoall_schedule
            return link.time(c.steps, c.tau, bytes_per_node * share)
        if not self.alltoall_throughput or self.alltoall_throughput <= 0:
            raise ValueError(f"{self.name}: an all-to-all needs the topology's all-to-all throughput or schedule")
        return share * (bytes_per_node / self.nodes) / (self.alltoall_throughput * link.node_bandwidth_Bps / self.degree)

    def replica_allreduce_s(self, link: LinkModel, size_bytes: float, replicas: int) -> float:
        """The concurrent allreduces of `size_bytes` per node over groups of `replicas` nodes (module docstring)."""
        if replicas <= 1 or size_bytes <= 0:
            return 0.0
        return link.time(self.allreduce.steps, self.allreduce.tau, size_bytes * self._group_share(replicas))


@dataclass(frozen=True)
class IterationReport:
    iteration_s: float
    compute_s: float
    exposed_allreduce_s: float
    alltoall_s: float
    allreduce_s: float          # the stream's busy time on allreduces (overlapped or not)
    bucket_bytes: int
    allreduces: int
    alltoalls: int

    def to_dict(self) -> dict:
        return asdict(self)


def simulate_iteration(model: ModelSpec, costs: TopologyCosts, link: LinkModel, bucket_bytes: int) -> IterationReport:
    """One training iteration with DDP bucket capacity `bucket_bytes` (module docstring). O(layers).

    >>> from services.synthesis.evaluate.training_job import parse_model_spec
    >>> model = parse_model_spec({"name": "two", "layers": [
    ...     {"name": "a", "params_bytes": 100, "forward_s": 1.0, "backward_s": 2.0},
    ...     {"name": "b", "params_bytes": 100, "forward_s": 1.0, "backward_s": 2.0}]})
    >>> link = LinkModel(alpha_s=0.5, node_bandwidth_Bps=100.0)     # allreduce of S: 1 * 0.5 + 1 * S / 100
    >>> costs = TopologyCosts("t", 4, 2, CollectiveCost(1, Fraction(1)))
    >>> r = simulate_iteration(model, costs, link, 100)              # b's bucket at t = 4, a's at t = 6
    >>> r.iteration_s, r.exposed_allreduce_s, r.allreduces
    (7.5, 1.5, 2)
    """
    if not isinstance(bucket_bytes, int) or isinstance(bucket_bytes, bool) or bucket_bytes < 1:
        raise ValueError(f"bucket capacity must be a positive number of bytes, got {bucket_bytes!r}")
    fwd, bwd = (t.tolist() for t in model.compute_times())
    ep = model.expert_group(costs.nodes)
    group = None if ep == costs.nodes else ep
    replicas = costs.nodes // ep
    clock = stream = 0.0
    a2a_total = ar_total = 0.0
    n_ar = n_a2a = 0

    def alltoall(layer) -> None:
        nonlocal clock, stream, a2a_total, n_a2a
        duration = costs.alltoall_s(link, layer.moe_tokens_bytes, group)
        stream = max(clock, stream) + duration
        clock = stream                      # compute waits for it
        a2a_total += duration
        n_a2a += 1

    def allreduce(size: int, expert: float) -> None:
        nonlocal stream, ar_total, n_ar
        duration = (costs.allreduce_s(link, size) if size else 0.0) + costs.replica_allreduce_s(link, expert, replicas)
        stream = max(clock, stream) + duration
        ar_total += duration
        n_ar += 1

    for i, layer in enumerate(model.layers):
        if layer.is_moe:
            alltoall(layer)
        clock += fwd[i]
        if layer.is_moe:
            alltoall(layer)
    bucket, expert = 0, 0.0
    for i in range(len(model.layers) - 1, -1, -1):
        layer = model.layers[i]
        if layer.is_moe:
            alltoall(layer)
        clock += bwd[i]
        if layer.is_moe:
            alltoall(layer)
        bucket += layer.params_bytes
        if replicas > 1:
            expert += layer.expert_params_bytes / ep
        if bucket + expert >= bucket_bytes:
            allreduce(bucket, expert)
            bucket, expert = 0, 0.0
    if bucket or expert:
        allreduce(bucket, expert)
    compute = sum(fwd) + sum(bwd)
    iteration = max(clock, stream)
    return IterationReport(iteration, compute, max(0.0, iteration - compute - a2a_total), a2a_total, ar_total,
                           bucket_bytes, n_ar, n_a2a)


def best_bucket(model: ModelSpec, costs: TopologyCosts, link: LinkModel) -> IterationReport:
    """The iteration with the best of the model's bucket capacities (ties: the smaller bucket)."""
    return min((simulate_iteration(model, costs, link, b) for b in model.buckets_bytes),
               key=lambda r: (r.iteration_s, r.bucket_bytes))


def _bound(compute: float, alltoall: float, allreduce: float) -> float:
    """Compute and all-to-all are serial; the stream runs every collective."""
    return max(compute + alltoall, alltoall + allreduce)


def iteration_lower_bound(model: ModelSpec, nodes: int, degree: int, link: LinkModel) -> float:
    """max(compute + A*, A* + R*) (module docstring): no N-node degree-d topology with reduce-scatter +
    allgather allreduces runs the iteration faster."""
    fwd, bwd = model.compute_times()
    ep = model.expert_group(nodes)
    if ep == nodes:
        f_star = moore_throughput_bound(nodes, degree)
        a_star = 4 * sum((l.moe_tokens_bytes / nodes) / (f_star * link.node_bandwidth_Bps / degree)
                         for l in model.layers if l.is_moe)
    else:      # groups: every node injects D (ep-1)/ep bytes through its links of B in total
        a_star = 4 * sum(l.moe_tokens_bytes * (ep - 1) / ep / link.node_bandwidth_Bps for l in model.layers if l.is_moe)
    p = model.gradient_bytes
    r_star = 2 * link.time(moore_steps(nodes, degree), Fraction(nodes - 1, nodes), p) if p else 0.0
    r = nodes // ep
    if r > 1:     # the replicas' reduce-scatter and allgather each send (r-1)/r of a node's expert share
        r_star += 2 * (r - 1) / r * sum(l.expert_params_bytes for l in model.layers) / ep / link.node_bandwidth_Bps
    return _bound(float(fwd.sum() + bwd.sum()), a_star, r_star)


def topology_lower_bound(model: ModelSpec, costs: TopologyCosts, link: LinkModel) -> float:
    """The same bound at this topology's own costs: its all-to-alls, and one allreduce of all gradients (any
    bucketing sends every byte and pays the allreduce's steps at least once). How close an iteration comes to
    it shows what bucketing and overlap leave on the table."""
    fwd, bwd = model.compute_times()
    ep = model.expert_group(costs.nodes)
    group = None if ep == costs.nodes else ep
    a2a = 4 * sum(costs.alltoall_s(link, l.moe_tokens_bytes, group) for l in model.layers if l.is_moe)
    p = model.gradient_bytes
    expert = sum(l.expert_params_bytes for l in model.layers) / ep
    ar = (costs.allreduce_s(link, p) if p else 0.0) + costs.replica_allreduce_s(link, expert, costs.nodes // ep)
    return _bound(float(fwd.sum() + bwd.sum()), a2a, ar)
