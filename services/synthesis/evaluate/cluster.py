"""A shared cluster: many training jobs at once on one fabric (TopoOpt, NSDI'23, section 5.6 and App. C).

Setting (TopoOpt section 5.1 and 5.6): S servers, each with `gpus_per_server` GPUs and d ports of B each; a job
mix (catalogued models with weights; each job asks for the same number of servers); a number of active jobs
(the load: TopoOpt runs 5, 10, 15, 20 and 27 jobs of 16 servers on 432 servers for 20-100 %). Jobs are drawn
from the mix by largest remainder (5 jobs of 40/30/20/10 % give 2/2/1/0), in a fixed order.

Fabrics:
- `direct` (TopoOpt): each job gets a shard of its own (App. C, Fig. 26: servers and links disjoint from every
  other job's), wired as the best topology our finder has for (servers per job, d) for that job's model
  (`evaluate_training`: the frontier entry with the shortest iteration), or, for a job with model-parallel
  traffic (DLRM's tables), TopoOpt's own co-optimised topology when it is faster (`topoopt.co_optimise`:
  TopologyFinder with host forwarding); jobs never contend. Before a job starts
  its panels are reconfigured (optional `Reconfiguration`: a patch panel moves `batch` cross-connects per
  `batch_s`, an OCS switches all at once; with look-ahead the next job is provisioned while the current runs,
  so nothing is waited for).
- switched fabrics, a k-ary fat-tree with k^3/4 >= S hosts (432 = 12^3 / 4: TopoOpt's cluster is a k = 12
  fat-tree), k/2 hosts per ToR, every link the host's bandwidth:
  - `fat-tree`: full bisection at TopoOpt's cost (section 5.1: "each server has one NIC and the bandwidth of each
    link is d x B', where B' is lower than B and is selected such that Fat-tree's cost is similar"): the host
    bandwidth is d B / `fat_tree_cost_ratio`, the ratio of a full-bisection fat-tree's cost to TopoOpt's at the
    same bandwidth (section 5.2: 3.2 on average, the default);
  - `fat-tree-2to1`, `fat-tree-4to1`: d B per host, the ToR uplinks cut to 1/2 or 1/4 (section 5.1: "half of
    the links in the ToR uplink layer are omitted");
  - `rail-optimised`: d B per host, every host on one switch per rail (no ToR uplinks to share: the
    non-blocking rail switch, Wang et al. 2023), so jobs do not contend, as on the ideal switch.
  Jobs are placed on servers in order (`placement="packed"`: job j on servers j*n .. j*n+n-1, ToRs shared at
  the edges) or at random (`"random"`, seeded: a fragmented cluster). Routing (`routing`): `"ecmp"` (the
  default) puts each flow on one shortest path chosen at random (seeded): a uniformly chosen ToR uplink and,
  leaving the pod, a uniformly chosen core uplink, so flows can collide; TopoOpt's packet simulator runs the
  fat-tree with htsim's TCP, one path per connection (section 5.1, htsim [7]; the Fig. 16 scripts of the
  paper's artifact, github.com/hipersys-team/TopoOpt simulation/scripts/fig16, run htsim_tcp_fattree_multijob).
  `"spray"` splits each flow evenly over every shortest path, packet by packet (NDP's load balancing): the
  fabric's best case. All jobs run the same phase
  at once (the congested case TopoOpt's shared-cluster experiment exposes): the rates of every job's allreduce
  flows are the max-min fair share of every link when all jobs allreduce together, and likewise their
  all-to-all flows when all all-to-all jobs exchange together (progressive filling: Bertsekas and Gallager,
  "Data Networks", section 6.5.2).
  A job's data-parallel allreduce is a ring over its servers (one flow to the next server); it runs at its
  slowest flow's rate: tau = 2 (n-1)/n H / r_min on 2 (n-1) steps. Its all-to-all (DLRM's embedding exchange,
  MoE dispatch) is one flow per ordered pair of its servers, ending with its slowest flow.
A job's iteration is the layer model of `iteration.simulate_iteration` (DDP buckets, all-to-alls in the
compute stream) on these costs, with the job's best bucket; its completion time is its wait for the panels
plus `iterations` iterations.

Compute: each server's GPUs at their dense peak for `precision` (`PEAK_FLOPS`: bf16 by default) times the
device's efficiency. TopoOpt's simulator takes its operators' times from FlexFlow's measurements instead
(section 5.1), in FlexFlow's fp32; the paper's artifact measured them on V100s (its Fig. 16 measurement
scripts ask SLURM for gpu:volta) although the simulated servers are A100s, so its jobs compute far longer
than ours and are less communication-bound (docs/cluster.md).

Output per (load, fabric): mean and p99 iteration time over the jobs (p99 by linear interpolation, numpy's
default), mean job completion time, utilisation (servers held by jobs / S), reconfiguration time spent (the sum
over jobs of the time their panels take), and hosts idle for fragmentation: free hosts when the next job of the
mix cannot be placed (a switched fabric and the direct fabric place any n free servers, so this is S mod n at
full load and 0 below it; placement policies on real fabrics report it per plan).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import lru_cache

import numpy as np

from services.synthesis.evaluate.iteration import CollectiveCost, TopologyCosts, best_bucket
from services.synthesis.evaluate.model_catalog import CATALOG, catalog_model
from services.synthesis.evaluate.topoopt import co_optimise, strategies_for
from services.synthesis.evaluate.training_job import DEVICES, DeviceProfile, ModelSpec
from services.synthesis.schedule.cost import LinkModel

__all__ = ["CLUSTER_FABRICS", "ClusterResult", "ClusterSpec", "JobOutcome", "MAX_CLUSTER_SERVERS", "PEAK_FLOPS",
           "ROUTINGS", "Reconfiguration", "SwitchedJob", "TOPOOPT_BATCH_PER_GPU", "TraceResult", "fat_tree_arity", "jobs_from_mix",
           "max_min_rates", "simulate_cluster", "simulate_trace", "switched_iterations"]

MAX_CLUSTER_SERVERS = 8192
MAX_JOBS = 1024
ROUTINGS = ("ecmp", "spray")
# dense peak FLOP/s per precision (NVIDIA A100 SXM4 and H100 SXM5 datasheets: BF16 tensor, TF32 tensor, FP32
# without tensor cores); a server's compute is its GPUs' peak at the job's precision times the device's efficiency
PEAK_FLOPS = {"a100": {"bf16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
              "h100": {"bf16": 989e12, "tf32": 494.5e12, "fp32": 67e12}}
CLUSTER_FABRICS = ("direct", "fat-tree", "fat-tree-2to1", "fat-tree-4to1", "rail-optimised")
_OVERSUB = {"fat-tree": 1, "fat-tree-2to1": 2, "fat-tree-4to1": 4}
# TopoOpt List 1 (App. D), the section 5.6 column: batch per GPU
TOPOOPT_BATCH_PER_GPU = {"dlrm": 256, "bert-large": 16, "bert-topoopt": 16, "candle": 256, "vgg16": 64}


@dataclass(frozen=True)
class Reconfiguration:
    """How long a job's panels take before it can start: `changes` cross-connects in batches of `batch` per
    `batch_s` seconds (a patch panel's robot; `batch=None`: an OCS, all at once in `batch_s`)."""

    batch_s: float
    batch: int | None
    lookahead: bool = False

    def seconds(self, changes: int) -> float:
        if self.lookahead or changes <= 0:
            return 0.0
        return self.batch_s if self.batch is None else math.ceil(changes / self.batch) * self.batch_s


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster and its mix (module docstring). `bandwidth_gbps` is one port's B (TopoOpt's convention)."""

    servers: int
    degree: int
    bandwidth_gbps: float
    mix: tuple[tuple[str, float], ...]
    servers_per_job: int = 16
    gpus_per_server: int = 4
    alpha_us: float = 1.0
    device: str = "a100"
    iterations: int = 1000
    fat_tree_cost_ratio: float = 3.2
    placement: str = "packed"
    seed: int = 0
    reconfiguration: Reconfiguration | None = None
    routing: str = "ecmp"
    precision: str = "bf16"

    def __post_init__(self):
        _positive_int("servers", self.servers, MAX_CLUSTER_SERVERS)
        _positive_int("degree", self.degree, 64)
        _positive_int("servers_per_job", self.servers_per_job, self.servers)
        _positive_int("gpus_per_server", self.gpus_per_server, 64)
        _positive_int("iterations", self.iterations, 10 ** 9)
        if self.servers_per_job < 2:
            raise ValueError("servers_per_job must be at least 2 (a job of one server has no network traffic)")
        for name in ("bandwidth_gbps", "alpha_us", "fat_tree_cost_ratio"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < 1e9 or v != v:
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if not self.mix:
            raise ValueError("the job mix is empty")
        for model, weight in self.mix:
            if model not in CATALOG:
                raise ValueError(f"unknown model {model!r} in the mix; the catalog has {', '.join(CATALOG)}")
            if not 0 < weight <= 1e6:
                raise ValueError(f"mix weight of {model} must be positive, got {weight!r}")
        if self.placement not in ("packed", "random"):
            raise ValueError(f"placement must be 'packed' or 'random', got {self.placement!r}")
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; known: {', '.join(DEVICES)}")
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, got {self.routing!r}")
        if self.precision not in PEAK_FLOPS[self.device]:
            raise ValueError(f"precision must be one of {', '.join(PEAK_FLOPS[self.device])}, got {self.precision!r}")

    @property
    def port_Bps(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8

    @property
    def max_jobs(self) -> int:
        return self.servers // self.servers_per_job


def _positive_int(name: str, v, most: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= most:
        raise ValueError(f"{name} must be an integer in 1..{most}, got {v!r}")


@dataclass(frozen=True)
class JobOutcome:
    model: str
    servers: tuple[int, ...]
    iteration_s: float
    completion_s: float
    reconfiguration_s: float
    expr: str | None = None


@dataclass(frozen=True)
class ClusterResult:
    """One (load, fabric) row of the simulation (module docstring)."""

    jobs: int
    fabric: str
    load: float
    mean_iteration_s: float
    p99_iteration_s: float
    mean_completion_s: float
    utilisation: float
    reconfiguration_s: float
    fragmentation_idle_hosts: int
    host_bandwidth_gbps: float
    per_model_iteration_s: dict[str, float] = field(default_factory=dict)
    outcomes: tuple[JobOutcome, ...] = ()

    def to_dict(self, with_jobs: bool = False) -> dict:
        out = asdict(self)
        if not with_jobs:
            out.pop("outcomes")
        return out


def jobs_from_mix(mix: tuple[tuple[str, float], ...], count: int) -> list[str]:
    """`count` models drawn from the weighted mix by largest remainder (Hamilton's method), ties by mix order,
    then interleaved in mix order (round robin) so every prefix keeps the proportions.

    >>> jobs_from_mix((("dlrm", 0.4), ("bert-large", 0.3), ("candle", 0.2), ("vgg16", 0.1)), 5)
    ['dlrm', 'bert-large', 'candle', 'dlrm', 'bert-large']
    """
    total = sum(w for _, w in mix)
    quotas = [count * w / total for _, w in mix]
    counts = [int(q) for q in quotas]
    order = sorted(range(len(mix)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[:count - sum(counts)]:
        counts[i] += 1
    out = []
    while len(out) < count:
        for i, (name, _) in enumerate(mix):
            if counts[i]:
                out.append(name)
                counts[i] -= 1
    return out


def fat_tree_arity(servers: int) -> int:
    """The smallest even k with k^3 / 4 >= servers (a three-tier k-ary fat-tree holds k^3 / 4 hosts).

    >>> fat_tree_arity(432), fat_tree_arity(128)
    (12, 8)
    """
    k = 2
    while k ** 3 // 4 < servers:
        k += 2
    return k


def max_min_rates(flow_links: list[np.ndarray], capacity: np.ndarray,
                  flow_shares: list[np.ndarray] | None = None) -> np.ndarray:
    """Max-min fair rates of flows over links (progressive filling): every unfrozen flow's rate grows at the
    same pace; a link that fills freezes the flows through it. O(links x flows) at most. `flow_shares[f][i]`:
    the fraction of flow f's rate on its i-th link (default 1: the flow on one path; a flow sprayed over
    several paths puts a fraction on each).

    >>> caps = np.array([10.0, 4.0])                  # flows 0, 1 share link 0; flow 1 also crosses link 1
    >>> max_min_rates([np.array([0]), np.array([0, 1]), np.array([1])], caps).tolist()
    [8.0, 2.0, 2.0]
    >>> max_min_rates([np.array([0, 1]), np.array([1])], np.array([1.0, 1.0]),   # flow 0 sprayed half-half
    ...               [np.array([0.5, 0.5]), np.array([1.0])]).tolist()
    [0.6666666666666666, 0.6666666666666666]
    """
    nf = len(flow_links)
    rates = np.zeros(nf)
    if nf == 0:
        return rates
    lengths = np.array([len(f) for f in flow_links])
    rows = np.repeat(np.arange(nf), lengths)
    cols = np.concatenate(flow_links) if nf else np.zeros(0, dtype=np.int64)
    weights = np.concatenate(flow_shares).astype(np.float64) if flow_shares is not None else np.ones(len(cols))
    remaining = capacity.astype(np.float64).copy()
    active = lengths > 0
    rates[~active] = np.inf
    while active.any():
        on = active[rows]
        load = np.bincount(cols[on], weights=weights[on], minlength=len(capacity))
        used = load > 0
        share = np.full(len(capacity), np.inf)
        share[used] = remaining[used] / load[used]
        step = share.min()
        rates[active] += step
        remaining -= step * load
        full = used & (remaining <= 1e-9 * capacity)
        frozen = np.zeros(nf, dtype=bool)
        np.logical_or.at(frozen, rows, full[cols])
        newly = active & frozen
        if not newly.any():            # numerical safety: freeze the flows of the tightest link
            newly = active & np.isin(np.arange(nf), rows[cols == int(np.argmin(np.where(used, share, np.inf)))])
        active &= ~newly
    return rates


class _FatTree:
    """Links of a k-ary fat-tree: host up/down, ToR up/down per uplink, agg up/down per core link."""

    def __init__(self, servers: int, oversub: int, host_Bps: float, rng: np.random.Generator):
        k = fat_tree_arity(servers)
        self.k, self.half, self.rng = k, k // 2, rng
        self.tor_hosts = k // 2
        self.tor_up = max(1, self.half // oversub)
        n_tor = math.ceil(servers / self.tor_hosts)
        self.n_host = servers
        # link ids: host up, host down, ToR up (per ToR, per uplink), ToR down, agg up (per pod agg, per core), agg down
        self.base = {"hu": 0, "hd": servers}
        self.base["tu"] = 2 * servers
        self.base["td"] = self.base["tu"] + n_tor * self.tor_up
        self.base["au"] = self.base["td"] + n_tor * self.tor_up
        aggs = k * self.half
        self.base["ad"] = self.base["au"] + aggs * self.half
        self.n_links = self.base["ad"] + aggs * self.half
        capacity = np.full(self.n_links, host_Bps)
        self.capacity = capacity

    def sprayed(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """A flow sprayed packet by packet over every shortest path (NDP's per-packet multipath, the load
        balancing of htsim's fat-trees): an equal share on each ToR uplink and, leaving the pod, on each core
        link above them (the mirror links down)."""
        tor_a, tor_b = a // self.tor_hosts, b // self.tor_hosts
        links, shares = [self.base["hu"] + a, self.base["hd"] + b], [1.0, 1.0]
        if tor_a != tor_b:
            ups = np.arange(self.tor_up)
            links += [*(self.base["tu"] + tor_a * self.tor_up + ups), *(self.base["td"] + tor_b * self.tor_up + ups)]
            shares += [1.0 / self.tor_up] * (2 * self.tor_up)
            pod_a, pod_b = tor_a // self.half, tor_b // self.half
            if pod_a != pod_b:
                aggs = np.unique(ups % self.half)
                per = np.bincount(ups % self.half, minlength=self.half)[aggs] / (self.tor_up * self.half)
                cores = np.arange(self.half)
                for base, pod in (("au", pod_a), ("ad", pod_b)):
                    links += [*((self.base[base] + (pod * self.half + aggs[:, None]) * self.half + cores).ravel())]
                    shares += [*np.repeat(per, self.half)]
        return np.asarray(links, dtype=np.int64), np.asarray(shares)

    def path(self, a: int, b: int) -> np.ndarray:
        """A flow on one path, hashed by ECMP: a uniformly chosen ToR uplink and, leaving the pod, core link."""
        tor_a, tor_b = a // self.tor_hosts, b // self.tor_hosts
        links = [self.base["hu"] + a, self.base["hd"] + b]
        if tor_a != tor_b:
            up = int(self.rng.integers(self.tor_up))
            links += [self.base["tu"] + tor_a * self.tor_up + up, self.base["td"] + tor_b * self.tor_up + up]
            pod_a, pod_b = tor_a // self.half, tor_b // self.half
            if pod_a != pod_b:
                agg = up % self.half
                core = int(self.rng.integers(self.half))
                links += [self.base["au"] + (pod_a * self.half + agg) * self.half + core,
                          self.base["ad"] + (pod_b * self.half + agg) * self.half + core]
        return np.asarray(links, dtype=np.int64)


@lru_cache(maxsize=64)
def _model(name: str, spec: ClusterSpec) -> ModelSpec:
    per_gpu = TOPOOPT_BATCH_PER_GPU.get(name)
    batch = per_gpu * spec.gpus_per_server if per_gpu else None
    base = DEVICES[spec.device]
    peak = PEAK_FLOPS[spec.device][spec.precision]
    device = DeviceProfile(name=f"{spec.gpus_per_server}x{base.name}-{spec.precision}",
                           peak_flops=peak * spec.gpus_per_server, efficiency=base.efficiency,
                           source=f"{spec.gpus_per_server} x ({base.source}; {spec.precision} peak {peak / 1e12:g} "
                                  "TFLOP/s)")
    if CATALOG[name].global_batch:
        return catalog_model(name, spec.servers_per_job, device=device)
    return catalog_model(name, spec.servers_per_job, device=device, batch=batch)


@lru_cache(maxsize=64)
def _direct(name: str, spec: ClusterSpec) -> tuple[float, str]:
    from services.synthesis.evaluate.training import evaluate_training

    link = LinkModel(alpha_s=spec.alpha_us * 1e-6, node_bandwidth_Bps=spec.degree * spec.port_Bps)
    model = _model(name, spec)
    ev = evaluate_training(model, spec.servers_per_job, spec.degree, link, baselines=())
    best = (ev.best.report.iteration_s, ev.best.expr)
    if any(l.is_moe for l in model.layers):          # model-parallel traffic: TopoOpt's own co-optimisation too
        strategy, design, t = co_optimise(strategies_for(model, spec.servers_per_job), spec.servers_per_job,
                                          spec.degree, link)
        if t < best[0]:
            best = (t, f"topoopt({strategy.name}: rings {list(design.generators)}, "
                       f"{len(design.mp_links) // spec.servers_per_job} MP matchings)")
    return best


def _fraction(x: float) -> Fraction:
    return Fraction(x).limit_denominator(10 ** 9)


@dataclass(frozen=True)
class SwitchedJob:
    """A job on a shared switched fabric: its iteration and how much slower than its host links its slowest
    allreduce flow and all-to-all flow run (host bandwidth / max-min rate; 1 = no contention)."""

    iteration_s: float
    allreduce_slowdown: float
    alltoall_slowdown: float


def switched_iterations(spec: ClusterSpec, fabric: str, models: list[str], placement: list[np.ndarray],
                        host_Bps: float) -> list[SwitchedJob]:
    """Each job's iteration on a shared switched fabric (module docstring): the max-min rates of every job's
    flows when all jobs run the same phase; `placement[j]` lists job j's servers."""
    n = spec.servers_per_job
    rng = np.random.default_rng(spec.seed)
    tree = _FatTree(spec.servers, _OVERSUB[fabric], host_Bps, rng) if fabric in _OVERSUB else None
    capacity = tree.capacity if tree else np.full(2 * spec.servers, host_Bps)

    spray = spec.routing == "spray"

    def phase(pairs_of) -> list[np.ndarray]:
        """Each job's flows' max-min rates when every job runs this phase's collective at once."""
        flows, shares, owner = [], [], []
        for j, hosts in enumerate(placement):
            for a, b in pairs_of(j, hosts):
                if tree is not None and spray:
                    links, share = tree.sprayed(int(a), int(b))
                else:
                    links = tree.path(int(a), int(b)) if tree else np.array([int(a), spec.servers + int(b)])
                    share = np.ones(len(links))
                flows.append(links)
                shares.append(share)
                owner.append(j)
        rates, owner_a = max_min_rates(flows, capacity, shares), np.asarray(owner, dtype=np.int64)
        return [rates[owner_a == j] for j in range(len(placement))]

    specs = [_model(name, spec) for name in models]
    ring = phase(lambda j, h: [(h[i], h[(i + 1) % n]) for i in range(n)] if specs[j].gradient_bytes else [])
    a2a = phase(lambda j, h: [(a, b) for a in h for b in h if a != b]
                if any(l.is_moe for l in specs[j].layers) else [])
    link = LinkModel(alpha_s=spec.alpha_us * 1e-6, node_bandwidth_Bps=host_Bps)
    out = []
    for j, model in enumerate(specs):
        slow_ring = host_Bps / ring[j].min() if ring[j].size else 1.0
        slow_a2a = host_Bps / a2a[j].min() if a2a[j].size else 1.0
        # ring: each server sends 2 (n-1)/n M to its successor; all-to-all: D/n to each other server
        costs = TopologyCosts(fabric, n, 1, CollectiveCost(2 * (n - 1), _fraction(2 * (n - 1) / n * slow_ring)),
                              alltoall_schedule=CollectiveCost(1, _fraction(slow_a2a / n)))
        out.append(SwitchedJob(best_bucket(model, costs, link).iteration_s, float(slow_ring), float(slow_a2a)))
    return out


def _placement(spec: ClusterSpec, count: int) -> list[np.ndarray]:
    n = spec.servers_per_job
    if spec.placement == "packed":
        return [np.arange(j * n, (j + 1) * n) for j in range(count)]
    perm = np.random.default_rng(spec.seed + 1).permutation(spec.servers)
    return [np.sort(perm[j * n:(j + 1) * n]) for j in range(count)]


def _row(spec: ClusterSpec, fabric: str, models: list[str], placement, iterations: list[float],
         reconf: list[float], host_Bps: float, exprs: list[str | None]) -> ClusterResult:
    n = spec.servers_per_job
    it = np.asarray(iterations)
    outcomes = tuple(JobOutcome(m, tuple(int(h) for h in p), float(t), float(r + spec.iterations * t), float(r), e)
                     for m, p, t, r, e in zip(models, placement, it, reconf, exprs))
    per_model = {m: float(np.mean([o.iteration_s for o in outcomes if o.model == m])) for m in dict.fromkeys(models)}
    free = spec.servers - n * len(models)
    idle = free if free < n else 0
    return ClusterResult(len(models), fabric, n * len(models) / spec.servers, float(it.mean()),
                         float(np.percentile(it, 99)), float(np.mean([o.completion_s for o in outcomes])),
                         n * len(models) / spec.servers, float(sum(reconf)), idle, host_Bps * 8 / 1e9,
                         per_model, outcomes)


def simulate_cluster(spec: ClusterSpec, job_counts: list[int], fabrics: list[str]) -> list[ClusterResult]:
    """One row per (number of active jobs, fabric), in that order (module docstring)."""
    if not job_counts or len(job_counts) > 64:
        raise ValueError("give between 1 and 64 job counts")
    for c in job_counts:
        if not isinstance(c, int) or isinstance(c, bool) or not 1 <= c <= min(spec.max_jobs, MAX_JOBS):
            raise ValueError(f"{c!r} jobs of {spec.servers_per_job} servers do not fit {spec.servers} servers "
                             f"(1..{spec.max_jobs})")
    bad = [f for f in fabrics if f not in CLUSTER_FABRICS]
    if bad or not fabrics:
        raise ValueError(f"unknown fabric {bad[0] if bad else None!r}; known: {', '.join(CLUSTER_FABRICS)}")
    rows = []
    for count in job_counts:
        models = jobs_from_mix(spec.mix, count)
        placement = _placement(spec, count)
        for fabric in fabrics:
            if fabric == "direct":
                results = [_direct(m, spec) for m in models]
                changes = spec.servers_per_job * spec.degree
                reconf = [spec.reconfiguration.seconds(changes) if spec.reconfiguration else 0.0] * count
                rows.append(_row(spec, fabric, models, placement, [r[0] for r in results], reconf,
                                 spec.degree * spec.port_Bps, [r[1] for r in results]))
                continue
            host = spec.degree * spec.port_Bps
            if fabric == "fat-tree":
                host /= spec.fat_tree_cost_ratio
            its = [j.iteration_s for j in switched_iterations(spec, fabric, models, placement, host)]
            rows.append(_row(spec, fabric, models, placement, its, [0.0] * count, host, [None] * count))
    return rows


@dataclass(frozen=True)
class TraceResult:
    """One fabric over a Poisson trace of job arrivals (`simulate_trace`)."""

    fabric: str
    jobs: int
    arrivals_per_hour: float
    mean_iteration_s: float
    p99_iteration_s: float
    mean_completion_s: float
    p99_completion_s: float
    mean_wait_s: float
    utilisation: float
    reconfiguration_s: float
    fragmentation_idle_host_s: float
    makespan_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def _iteration_times(spec: ClusterSpec, fabric: str, models: list[str], placement: list[np.ndarray]) -> list[float]:
    if fabric == "direct":
        return [_direct(m, spec)[0] for m in models]
    host = spec.degree * spec.port_Bps / (spec.fat_tree_cost_ratio if fabric == "fat-tree" else 1.0)
    return [j.iteration_s for j in switched_iterations(spec, fabric, models, placement, host)]


def simulate_trace(spec: ClusterSpec, fabric: str, arrivals_per_hour: float, jobs: int) -> TraceResult:
    """Jobs arriving as a Poisson process (seeded by `spec.seed`), each `spec.iterations` iterations of a model
    drawn from the mix by weight, placed first-come first-served on the lowest free servers (a job waits in a
    FIFO queue while fewer than its servers are free), a direct job after its panels' reconfiguration. Running
    jobs progress at the iteration time of the current job set (switched fabrics: recomputed at every start and
    end, the max-min shares of the jobs then running); the simulation is event-driven and fluid between events.
    Reported: per job, its mean iteration time (run time / iterations) and completion time (from arrival), its
    wait in the queue; utilisation = held server-seconds (a job holds its servers from its start, reconfiguration
    included) / (servers x makespan); reconfiguration seconds summed
    over jobs; fragmentation: server-seconds left free while the queue's head waited for more."""
    if fabric not in CLUSTER_FABRICS:
        raise ValueError(f"unknown fabric {fabric!r}; known: {', '.join(CLUSTER_FABRICS)}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs must be an integer in 1..{MAX_JOBS}, got {jobs!r}")
    if not isinstance(arrivals_per_hour, (int, float)) or not 0 < arrivals_per_hour <= 1e9:
        raise ValueError(f"arrivals_per_hour must be a number in (0, 1e9], got {arrivals_per_hour!r}")
    rng = np.random.default_rng(spec.seed)
    names = [m for m, _ in spec.mix]
    weights = np.array([w for _, w in spec.mix], dtype=np.float64)
    arrival = np.cumsum(rng.exponential(3600.0 / arrivals_per_hour, size=jobs))
    model = [names[i] for i in rng.choice(len(names), size=jobs, p=weights / weights.sum())]
    n = spec.servers_per_job
    changes = n * spec.degree
    reconf = spec.reconfiguration.seconds(changes) if (spec.reconfiguration and fabric == "direct") else 0.0
    free = np.ones(spec.servers, dtype=bool)
    queue: list[int] = []
    running: dict[int, list] = {}        # job -> [servers, start of running, iterations left]
    run_time = np.zeros(jobs)
    start_at, end_at = np.zeros(jobs), np.zeros(jobs)
    now, nxt, busy, frag = 0.0, 0, 0.0, 0.0
    rates: dict[int, float] = {}

    def refresh() -> None:
        ids = sorted(running)
        times = _iteration_times(spec, fabric, [model[j] for j in ids], [running[j][0] for j in ids]) if ids else []
        rates.clear()
        rates.update({j: t for j, t in zip(ids, times)})

    while nxt < jobs or queue or running:
        # the next event: an arrival, or the first running job to finish (after its reconfiguration)
        finish = {j: max(r[1], now) + r[2] * rates[j] for j, r in running.items()}
        t_end = min(finish.values(), default=np.inf)
        t_arr = arrival[nxt] if nxt < jobs else np.inf
        t = min(t_end, t_arr)
        dt = t - now
        busy += dt * n * len(running)
        if queue:
            frag += dt * int(free.sum())
        for j, r in running.items():                  # fluid progress since the last event
            ran = max(0.0, t - max(r[1], now))
            r[2] -= ran / rates[j]
            run_time[j] += ran
        now = t
        if t_end <= t_arr:
            done = min(finish, key=finish.get)
            free[running[done][0]] = True
            end_at[done] = now
            del running[done]
        else:
            queue.append(nxt)
            nxt += 1
        while queue and free.sum() >= n:              # FIFO: the head starts on the lowest free servers
            j = queue.pop(0)
            servers = np.flatnonzero(free)[:n]
            free[servers] = False
            start_at[j] = now
            running[j] = [servers, now + reconf, float(spec.iterations)]
        refresh()
    iteration = run_time / spec.iterations
    completion = end_at - arrival
    return TraceResult(fabric, jobs, float(arrivals_per_hour), float(iteration.mean()),
                       float(np.percentile(iteration, 99)), float(completion.mean()),
                       float(np.percentile(completion, 99)), float((start_at - arrival).mean()),
                       float(busy / (spec.servers * now)) if now > 0 else 0.0, reconf * jobs, float(frag), float(now))
