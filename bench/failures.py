"""Link failures: how fast a degraded topology gets verified schedules, and what a failure costs.

    python -m bench.failures            # both parts
    python -m bench.failures --quick    # part 1 at N = 64 and 256 only

Part 1: time from a failure (one, then two arcs removed) to verified allgather, reduce-scatter and allreduce
schedules (`degraded_schedules`: remove the arcs, BFB and the greedy scheduler on G and G^T, price both, model-
check the served one) for N = 64, 256, 1024, on the d = 4 frontier's lowest-latency and lowest-bandwidth
topologies. Each case runs in a fresh process after the compiled kernels are loaded; wall and CPU seconds
(this process and its BFB pool workers) are printed, since the machine may be shared. Target: the whole
revision including XML at most 15 s at N = 1024 on a quiet 2-core machine (part 3
measures the XML too).

Part 2: the predicted allreduce slowdown of one and of two failed links on the Table 7 frontier at N = 256
(d = 4, alpha = 10 us, B = 100 Gbps): failures drawn at random (seeded, only ones that keep the topology
strongly connected), every candidate schedule verified, the faster one served, against the frontier's own
prediction 2 (steps alpha + tau M/B) for the intact topology.

Part 3 (`--service`, also in the default run): the same through the service. The service is started as a
subprocess (`fabricplan serve`: SQLite and the embedded worker; `--backend redis`: PostgreSQL, Redis and one
`fabricplan worker`, as bench.service), a plan of N = 64, 256, 1024 nodes (d = 4, the minimal workload) is
made, then a link of its topology is reported failed (POST /v1/plans/{id}/failures) and then a second one:
the time from the POST to the revision's status done, polled every 20 ms, covers the outbox, the worker
process, the degraded schedules, the model check, the XML compile stage (every collective for the plan's
runtimes, the executor by default), the artifacts and the failure's cost. The revision reports its own times:
`build.schedules_s` (schedules and model check), `build.compile_s` (XML) and `build.cpu_s` (the worker's CPU
seconds for the whole revision), printed as sched s, xml s and cpu s; below each row, the revision's XML files
(a size range whose file is its collective's is not counted) with each file's compile seconds and the
schedule it holds.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SIZES = {"1 MiB": float(1 << 20), "1 GiB": float(1 << 30)}
TARGET_S = 15.0


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def failure_sets(topology, count: int, samples: int, seed: int) -> list[list[tuple[int, int, int]]]:
    """`samples` sets of `count` distinct arcs whose removal keeps the topology strongly connected."""
    import numpy as np

    from services.synthesis.topology.failures import remove_arcs
    from services.synthesis.topology.graph import TopologyError

    rng = np.random.default_rng(seed)
    out = []
    while len(out) < samples:
        arcs = rng.choice(topology.arcs, size=count, replace=False)
        triple = [(int(topology.tails[a]), int(topology.heads[a]), int(topology.lanes[a])) for a in arcs]
        if any(t == h for t, h, _ in triple):
            continue                          # a self-loop failing changes nothing worth measuring
        try:
            remove_arcs(topology, triple)
        except TopologyError:
            continue
        out.append(triple)
    return out


def run_case(expr: str, count: int, size: float) -> dict:
    from services.synthesis.bfb.degraded import degraded_schedules
    from services.synthesis.bfb.warm import warm
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.topology.catalog import build

    warm()
    g = build(expr)
    failed = failure_sets(g, count, 1, seed=count)[0]
    link = LinkModel.from_units(10, 100)
    c0, t0 = _cpu(), time.perf_counter()
    out = degraded_schedules(g, failed, link, size)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return {"expr": g.expr, "nodes": g.nodes, "failed": [f"{t}>{h}" for t, h, _ in failed], "wall_s": wall,
            "cpu_s": cpu, "peak_gib": peak_kib / 2**20,
            "served": {c.value: cmp.chosen.scheduler for c, cmp in out.comparisons.items()},
            "verified": all(cmp.chosen.verified for cmp in out.comparisons.values()),
            "allreduce": {"steps": out.comparisons[list(out.comparisons)[-1]].chosen.steps,
                          "tau": str(out.comparisons[list(out.comparisons)[-1]].chosen.tau)}}


def in_subprocess(expr: str, count: int, size: float) -> dict:
    res = subprocess.run([sys.executable, "-m", "bench.failures", "--case", expr, str(count), str(size)],
                         check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def part1(sizes_n: list[int]) -> None:
    from services.synthesis.search.finder import frontier

    print("Part 1: failure -> verified AG/RS/AR schedules (d = 4, alpha = 10 us, B = 100 Gbps; M decides "
          "which scheduler is served: at 1 GiB the greedy one is built too)")
    print(f"{'N':>5} {'M':>6} {'failed':>6} {'wall s':>7} {'cpu s':>7} {'peak GiB':>8}  {'served AG/RS/AR':<22} "
          f"{'AR steps, tau':<16} topology  [target {TARGET_S:.0f} s incl. XML at N = 1024]")
    for n in sizes_n:
        front = frontier(n, 4)
        for c in (front[0], front[-1]):
            for size in ("1 MiB", "1 GiB") if n == max(sizes_n) else ("1 MiB",):
                for count in (1, 2):
                    r = in_subprocess(c.expr, count, SIZES[size])
                    served = "/".join(r["served"].values())
                    ok = "" if r["verified"] else "  NOT VERIFIED"
                    print(f"{r['nodes']:>5} {size:>6} {count:>6} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} "
                          f"{r['peak_gib']:>8.2f}  {served:<22} {r['allreduce']['steps']:>4}, "
                          f"{r['allreduce']['tau']:<10} remove({c.expr}, {', '.join(r['failed'])}){ok}")


def part2(samples: int) -> None:
    from services.synthesis.bfb.degraded import degraded_schedules
    from services.synthesis.bfb.warm import warm
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import frontier
    from services.synthesis.topology.catalog import build

    warm()
    link = LinkModel.from_units(10, 100)
    print(f"\nPart 2: predicted allreduce slowdown after failed links, Table 7 frontier at N = 256 "
          f"(mean / worst of {samples} random failures; both schedulers verified, the faster served)")
    print(f"{'topology':<42} {'steps':>5} {'tau':>7} {'failed':>6}  " +
          "  ".join(f"{'slowdown ' + k:>22}" for k in SIZES) + "  served at 1 MiB / 1 GiB")
    for c in frontier(256, 4):
        g = build(c.expr)
        before = {k: link.collective_time(Collective.ALLREDUCE, c.steps, c.tau, m) for k, m in SIZES.items()}
        for count in (1, 2):
            ratios = {k: [] for k in SIZES}
            served = {k: set() for k in SIZES}
            for failed in failure_sets(g, count, samples, seed=100 + count):
                out = degraded_schedules(g, failed, link, SIZES["1 MiB"], collectives=[Collective.ALLREDUCE],
                                         verify_mode="all", prune=False)      # priced below at every size
                cands = [x for x in out.comparisons[Collective.ALLREDUCE].candidates if x.verified]
                for k, m in SIZES.items():
                    best = min(cands, key=lambda x: out.costs.time(x.schedule, m))
                    ratios[k].append(out.costs.time(best.schedule, m) / before[k])
                    served[k].add(best.scheduler)
            cells = "  ".join(f"{sum(v) / len(v):>10.3f} / {max(v):>9.3f}" for v in ratios.values())
            print(f"{c.expr:<42} {c.steps:>5} {float(c.tau):>7.4f} {count:>6}  {cells}  "
                  f"{','.join(sorted(served['1 MiB']))} / {','.join(sorted(served['1 GiB']))}")


def part3(sizes_n: list[int], backend: str) -> None:
    """Failure report -> verified revision through the service (the service's own worker included)."""
    import tempfile
    import uuid
    from pathlib import Path

    import httpx

    from bench.service import Proc, start_service, time_plan, wait_ready

    run_id = uuid.uuid4().hex[:8]
    print(f"\nPart 3: failure report -> verified revision through the service ({backend}; d = 4, minimal workload; "
          "wall s from the POST to done, worker CPU s of the revision)")
    print(f"{'N':>5} {'failed':>6} {'wall s':>7} {'cpu s':>7} {'sched s':>7} {'xml s':>7}  {'slowdown':>8}  revision topology"
          f"  [target {TARGET_S:.0f} s at N = 1024 incl. XML]")
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="fabricplan-bench-") as tmp:
        try:
            server, base_url = start_service(backend, Path(tmp), run_id, procs)
            with httpx.Client(base_url=base_url, timeout=30, trust_env=False) as client:
                wait_ready(client, server, timeout_s=300.0)   # a loaded machine starts slowly
                for n in sizes_n:
                    p = time_plan(client, n, run_id, 1800.0, procs)
                    if p["status"] != "done":
                        print(f"{n:>5}  plan {p['status']}: {p['reason']}")
                        continue
                    pair = failure_sets(_topology_of(client, p["id"]), 2, 1, seed=n)[0]   # removing both: still connected
                    for links in ([pair[0]], [pair[1]]):                                # one failed link, then two
                        r = _revision_through_service(client, p["id"], links, procs)
                        b = r.get("build") or {}
                        slow = ((r.get("failure_cost") or {}).get("workload_us") or {}).get("slowdown")
                        print(f"{n:>5} {len(r.get('failed') or []):>6} {r['wall_s']:>7.2f} "
                              f"{b.get('cpu_s') or float('nan'):>7.2f} {b.get('schedules_s') or float('nan'):>7.2f} "
                              f"{b.get('compile_s') or float('nan'):>7.2f}  "
                              f"{slow or float('nan'):>8.3f}  {r['status']}: {r.get('expr') or r.get('reason')}",
                              flush=True)
                        print(_files_line(r), flush=True)
        finally:
            for proc in reversed(procs):
                proc.stop()


def _files_line(rev: dict) -> str:
    """The revision's XML files: how many, and per file its compile seconds (the compile job's own `seconds`)
    and the schedule it holds (a range's `xml_schedule`; a range served by its collective's file is not a file)."""
    files = []
    for runtime, per in (rev.get("compiled") or {}).items():
        for c, summary in per.items():
            rows = [(c, summary, (rev.get("schedules") or {}).get(c, {}).get("scheduler"))] + [
                (f"{c}@{x['range']}", x, (x.get("xml_schedule") or {}).get("scheduler"))
                for x in summary.get("by_size") or [] if not x.get("same_file_as")]
            files += [(f"{runtime}:{name}", x.get("status"), x.get("seconds") or 0.0, held) for name, x, held in rows
                      if "status" in x]
    cells = ", ".join(f"{name} [{held}] {secs:.1f}s" + ("" if st == "done" else f" {st}")
                      for name, st, secs, held in files)
    return f"{'':>5} {len(files)} files, compile s summed {sum(f[2] for f in files):.1f}: {cells}"


def _topology_of(client, plan_id: str):
    """The plan's topology as a Topology, from its stored arcs (the expression may take long to rebuild)."""
    import numpy as np

    from services.synthesis.topology.graph import Topology

    t = client.get(f"/v1/plans/{plan_id}/topology").json()
    arcs = np.asarray(t["arcs"], dtype=np.int64)
    return Topology(t["nodes"], arcs[:, 0], arcs[:, 1], t["expr"], degree=t["degree"])


def _revision_through_service(client, plan_id: str, links: list, procs) -> dict:
    from bench.service import POLL_S

    t0 = time.perf_counter()
    r = client.post(f"/v1/plans/{plan_id}/failures",
                    json={"links": [{"arc": f"{t}>{h}", "lane": lane} for t, h, lane in links]})
    if r.status_code != 202:
        raise RuntimeError(f"POST failures answered {r.status_code}: {r.text[:300]}")
    url = r.json()["url"]
    while True:
        rev = client.get(url).json()
        if rev["status"] in ("done", "failed"):
            return {**rev, "wall_s": time.perf_counter() - t0}
        dead = [p for p in procs if not p.alive()]
        if dead:
            raise RuntimeError(f"{dead[0].name} exited:\n{dead[0].tail()}")
        time.sleep(POLL_S)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024], help="part 1 sizes")
    p.add_argument("--no-part2", action="store_true")
    p.add_argument("--samples", type=int, default=3, help="random failures per (topology, count) in part 2")
    p.add_argument("--service", action="store_true", help="part 3 only (through the service)")
    p.add_argument("--backend", choices=["embedded", "redis"], default="embedded", help="part 3's deployment")
    p.add_argument("--case", nargs=3, metavar=("EXPR", "COUNT", "SIZE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), float(args.case[2]))))
        return 0
    print("(measured on a machine shared with other work: compare CPU seconds; wall time varies)")
    sizes = [64, 256] if args.quick else args.nodes
    if not args.service:
        part1(sizes)
        if not (args.quick or args.no_part2):
            part2(args.samples)
    part3(sizes, args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
