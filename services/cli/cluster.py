"""`fabricplan cluster simulate`: many training jobs at once on one cluster, direct-connect against switched
fabrics (TopoOpt section 5.6; the model is services.synthesis.evaluate.cluster's docstring).

    fabricplan cluster simulate --servers 432 --degree 8 --bandwidth-gbps 100 \\
        --mix dlrm=0.4,bert-large=0.3,candle=0.2,vgg16=0.1 --servers-per-job 16 --jobs 5,10,15,20,27 \\
        --fabrics direct,fat-tree,fat-tree-2to1 --json

prints {"results": [{"jobs", "fabric", "mean_iteration_s", "p99_iteration_s", ...}, ...]}, one row per number of
active jobs and fabric. With `--arrivals poisson` the jobs arrive as a Poisson trace instead (one row per fabric,
with completion times, queue waits, utilisation and the server-seconds lost to fragmentation).
"""
from __future__ import annotations

import json

from .common import UsageError

__all__ = ["register", "run"]


def _mix(text: str) -> tuple[tuple[str, float], ...]:
    out = []
    for part in text.split(","):
        name, sep, weight = part.partition("=")
        try:
            out.append((name.strip().lower(), float(weight) if sep else 1.0))
        except ValueError:
            raise UsageError(f"--mix: {part!r} is not MODEL=WEIGHT") from None
    return tuple(out)


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a comma-separated list of integers") from None


def run(args) -> int:
    from services.fabric.devices import PROFILES
    from services.synthesis.evaluate.cluster import ClusterSpec, Reconfiguration, simulate_cluster, simulate_trace

    reconf = None
    if args.panel != "none":
        p = PROFILES[args.panel]
        reconf = Reconfiguration(p.reconfiguration_s, p.robot_batch_size, lookahead=args.lookahead)
    try:
        ratio = args.fat_tree_cost_ratio
        if ratio is None:                 # the cost-equivalent fat-tree at this cluster (TopoOpt 5.1, App. G)
            from services.fabric.cost import cost_equivalent_ratio

            ratio = cost_equivalent_ratio(args.servers, args.degree, args.bandwidth_gbps)
        spec = ClusterSpec(args.servers, args.degree, args.bandwidth_gbps, _mix(args.mix), args.servers_per_job,
                           args.gpus_per_server, args.alpha_us, args.device, args.iterations,
                           ratio, args.placement, args.seed, reconf, args.routing,
                           args.precision)
        fabrics = [f.strip() for f in args.fabrics.split(",")]
        if args.arrivals == "poisson":
            trace = [simulate_trace(spec, f, args.rate_per_hour, args.trace_jobs) for f in fabrics]
        else:
            rows = simulate_cluster(spec, _ints(args.jobs, "--jobs"), fabrics)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.arrivals == "poisson":
        return _print_trace(spec, trace, args.json)
    if args.json:
        print(json.dumps({"results": [r.to_dict(with_jobs=args.per_job) for r in rows]}, indent=2))
        return 0
    print(f"{spec.servers} servers, d = {spec.degree}, B = {spec.bandwidth_gbps:g} Gbps per port, "
          f"{spec.servers_per_job} servers per job, placement {spec.placement}, routing {spec.routing}")
    print(f"{'jobs':>4} {'load':>5}  {'fabric':<15} {'host Gbps':>9} {'mean ms':>9} {'p99 ms':>9} {'JCT s':>9} "
          f"{'reconf s':>9}")
    for r in rows:
        print(f"{r.jobs:>4} {r.load:>5.0%}  {r.fabric:<15} {r.host_bandwidth_gbps:>9.1f} "
              f"{r.mean_iteration_s * 1e3:>9.2f} {r.p99_iteration_s * 1e3:>9.2f} {r.mean_completion_s:>9.1f} "
              f"{r.reconfiguration_s:>9.0f}")
    return 0


def _print_trace(spec, rows, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"results": [r.to_dict() for r in rows]}, indent=2))
        return 0
    print(f"{spec.servers} servers, d = {spec.degree}, {rows[0].jobs} jobs arriving at {rows[0].arrivals_per_hour:g} "
          f"per hour, {spec.iterations} iterations each")
    print(f"{'fabric':<15} {'mean ms':>9} {'p99 ms':>9} {'JCT s':>9} {'p99 JCT s':>10} {'wait s':>8} {'util':>6} "
          f"{'reconf s':>9} {'frag host-s':>11}")
    for r in rows:
        print(f"{r.fabric:<15} {r.mean_iteration_s * 1e3:>9.2f} {r.p99_iteration_s * 1e3:>9.2f} "
              f"{r.mean_completion_s:>9.0f} {r.p99_completion_s:>10.0f} {r.mean_wait_s:>8.0f} {r.utilisation:>6.1%} "
              f"{r.reconfiguration_s:>9.0f} {r.fragmentation_idle_host_s:>11.0f}")
    return 0


def register(sub) -> None:
    """Add the `cluster` command (sub-command `simulate`) to the parser's subparsers."""
    p = sub.add_parser("cluster", help="many jobs on one cluster: direct-connect against switched fabrics")
    verbs = p.add_subparsers(dest="cluster_command", required=True)
    s = verbs.add_parser("simulate", help="a job mix at several loads on several fabrics (TopoOpt section 5.6)")
    s.add_argument("--servers", type=int, default=432, help="servers in the cluster (default 432)")
    s.add_argument("--degree", type=int, default=8, help="ports per server, d (default 8)")
    s.add_argument("--bandwidth-gbps", type=float, default=100.0,
                   help="one port's bandwidth B in Gbps (default 100; a server sends d x B)")
    s.add_argument("--alpha-us", type=float, default=1.0, help="per-step latency in microseconds (default 1)")
    s.add_argument("--mix", default="dlrm=0.4,bert-topoopt=0.3,candle=0.2,vgg16=0.1",
                   help="catalogued models with weights, MODEL=W,... (default: TopoOpt section 5.6's mix)")
    s.add_argument("--servers-per-job", type=int, default=16, help="servers each job asks for (default 16)")
    s.add_argument("--gpus-per-server", type=int, default=4, help="GPUs per server (default 4, TopoOpt's A100 servers)")
    s.add_argument("--device", default="a100", help="GPU profile of the catalog (default a100)")
    s.add_argument("--jobs", default="5,10,15,20,27", help="numbers of active jobs, comma-separated (the loads)")
    s.add_argument("--arrivals", choices=("fixed", "poisson"), default="fixed",
                   help="fixed: each --jobs count active at once (TopoOpt section 5.6); poisson: a trace of "
                        "--trace-jobs arrivals at --rate-per-hour, queued first-come first-served")
    s.add_argument("--rate-per-hour", type=float, default=30.0, help="Poisson arrivals per hour (with --arrivals poisson)")
    s.add_argument("--trace-jobs", type=int, default=100, help="jobs in the Poisson trace (with --arrivals poisson)")
    s.add_argument("--fabrics", default="direct,fat-tree,fat-tree-2to1",
                   help="direct, fat-tree, fat-tree-2to1, fat-tree-4to1, rail-optimised (comma-separated)")
    s.add_argument("--iterations", type=int, default=1000, help="iterations per job, for its completion time")
    s.add_argument("--fat-tree-cost-ratio", type=float, default=None,
                   help="cost of a full-bisection fat-tree over TopoOpt's at equal bandwidth; the cost-equivalent "
                        "fat-tree gives each server d x B / this (default: Table 2's prices at this cluster, "
                        "TopoOpt App. G: 1.94 for 432 servers, d = 8, 100 Gbps; section 5.2's average is 3.2)")
    s.add_argument("--placement", choices=("packed", "random"), default="packed",
                   help="jobs on consecutive servers (packed) or on random servers (a fragmented cluster)")
    s.add_argument("--routing", choices=("ecmp", "spray"), default="ecmp",
                   help="switched fabrics: each flow on one random shortest path (ECMP; TopoOpt's htsim TCP) or "
                        "sprayed over all of them (NDP)")
    s.add_argument("--precision", choices=("bf16", "tf32", "fp32"), default="bf16",
                   help="the GPUs' dense peak the compute runs at (datasheet; default bf16)")
    s.add_argument("--seed", type=int, default=0, help="seed of ECMP hashing and random placement")
    s.add_argument("--panel", choices=("patch_panel", "ocs", "none"), default="patch_panel",
                   help="what reconfigures a direct job's links before it starts (device profiles)")
    s.add_argument("--lookahead", action="store_true",
                   help="the next job's links are provisioned on the look-ahead plane (no wait)")
    s.add_argument("--per-job", action="store_true", help="with --json: each job's model, servers and times")
    s.add_argument("--json", action="store_true", help="one JSON object {\"results\": [...]} on stdout")
    s.set_defaults(func=run)
