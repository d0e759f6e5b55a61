"""Served schedules replayed by two outside simulators beside our two times (DESIGN section 2).

    python -m bench.simulate            # the cases below, a table
    python -m bench.simulate --quick    # the 16-node cases at 1 MiB

For each served schedule (uniform, degraded, heterogeneous, all-to-all; N <= 64, M <= 64 MiB) the bench prints
our dependency-driven time (`time_us`, what we serve) and step-synchronous price (`barrier_time_us`), SimGrid's
flow-level replay of the dependency-driven run (CM02, ideal links: it must equal `time_us`;
`services.synthesis.schedule.replay`) and ns-3's packet-level replay of the same run, so header and transport
overheads are measured, not guessed: ns-3 3.37 (Debian's libns3-dev), one point-to-point link per arc (data rate
b_l, delay alpha_l), each group cut into 4096-byte payloads carrying 58 bytes of RoCE-like headers (Ethernet 14,
IPv4 20, UDP 8, BTH 12, ICRC 4) plus the device's 2-byte PPP header, sent back to back from a drop-free queue
(bench/ns3/replay.cc, compiled here at run time with g++ against libns3-dev; it is not committed as a binary).
A link takes its next group when its data has arrived (the last packet of every group it depends on), the same
rule as ours, and (column ns3_us) when its previous group has been received, so a link is busy alpha + bytes / b
per group as we charge it; column ns3_pipe_us lets a link send its next group as soon as the previous one has
left (alpha is then a propagation delay overlapping the next group's transmission). Links: 25 Gbps and 10 us;
"slow" arcs 5 Gbps.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

GBPS = 1e9 / 8
MIB = 1 << 20
HEADER_BYTES = 58
MTU = 4096
DRIVER = Path(__file__).with_name("ns3") / "replay.cc"
NS3_LIBS = ("ns3-core", "ns3-network", "ns3-point-to-point")


def build_driver(workdir: Path) -> Path | str:
    """Compile the ns-3 driver; returns its path, or the reason it cannot be built."""
    if shutil.which("g++") is None or shutil.which("pkg-config") is None:
        return "g++ or pkg-config missing"
    cflags = subprocess.run(["pkg-config", "--cflags", *NS3_LIBS], capture_output=True, text=True)
    if cflags.returncode != 0:
        return "ns-3 not found by pkg-config (apt-get install -y libns3-dev)"
    exe = workdir / "ns3_replay"
    # link the ns-3 libraries by name: Debian's .pc files also name gsl's .so, which only libgsl-dev installs
    cmd = ["g++", "-O2", "-std=c++17", "-o", str(exe), str(DRIVER), *cflags.stdout.split(),
           "-lns3-point-to-point", "-lns3-network", "-lns3-core"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return f"g++ failed: {r.stderr.strip()[-500:]}"
    return exe


def ns3_replay(exe: Path, groups, serial: bool) -> float:
    """Seconds ns-3 takes to run the transfer groups (dependency mode); `serial`: a link takes its next group when
    the previous one has been received (alpha + bytes / b per group, as we charge), else as soon as it is sent."""
    lines = [f"{groups.alpha_s.size} {groups.groups} {HEADER_BYTES} {MTU} {int(serial)}"]
    lines += [f"{a!r} {b!r}" for a, b in zip(groups.alpha_s.tolist(), groups.bandwidth_Bps.tolist())]
    deps, ptr = groups.deps.tolist(), groups.dep_ptr.tolist()
    for g, (link, size) in enumerate(zip(groups.link.tolist(), groups.bytes.tolist())):
        d = deps[ptr[g]:ptr[g + 1]]
        lines.append(" ".join(map(str, [link, repr(size), len(d), *d])))
    r = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"ns-3 replay failed: {r.stderr.strip()[-500:]}")
    return float(r.stdout.strip().splitlines()[-1])


def _slow(g, count: int, seed: int):
    from services.synthesis.schedule.links import LinkCosts

    rng = np.random.default_rng(seed)
    bw = np.full(g.arcs, 25 * GBPS)
    bw[rng.choice(g.arcs, count, replace=False)] = 5 * GBPS
    return LinkCosts(g, np.full(g.arcs, 10e-6), bw)


def cases(quick: bool):
    """(label, schedule, link costs, size) of served schedules."""
    from services.synthesis.bfb.compare import schedule_collectives
    from services.synthesis.bfb.degraded import degraded_schedules
    from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.links import LinkCosts
    from services.synthesis.topology.catalog import build

    link = LinkModel.from_units(10, 100)               # B = 100 Gbps over d = 4 links: 25 Gbps each
    out = []

    def served(label, g, costs, collective, size, schedulers=("bfb", "greedy", "bfb-fast", "trees")):
        cmp = schedule_collectives(g, costs, size, collectives=(collective,), schedulers=schedulers)[collective]
        out.append((f"{label} {g.expr} {collective.value} ({cmp.chosen.scheduler})", cmp.chosen.schedule, costs,
                    size))

    sizes = (MIB,) if quick else (MIB, 64 * MIB)
    g16 = build("torus(4, 4)")
    for m in sizes:
        served("uniform", g16, LinkCosts.uniform(g16, link), Collective.ALLREDUCE, m, ("bfb", "greedy"))
        served("hetero", g16, _slow(g16, 6, 5), Collective.ALLGATHER, m)
    a2a = alltoall_schedule(g16).schedule
    for m in sizes:
        out.append(("all-to-all torus(4, 4) uniform", a2a, LinkCosts.uniform(g16, link), m))
        out.append(("all-to-all torus(4, 4) hetero", a2a, _slow(g16, 6, 5), m))
    if not quick:
        g48 = build("genkautz(4, 48)")
        served("hetero", g48, _slow(g48, 6, 3), Collective.ALLGATHER, MIB)
        served("hetero", g48, _slow(g48, 6, 3), Collective.REDUCESCATTER, 16 * MIB)
        g64 = build("torus(8, 8)")
        dg = degraded_schedules(g64, [(0, 1), (9, 17)], link, float(MIB), collectives=(Collective.ALLREDUCE,))
        chosen = dg.comparisons[Collective.ALLREDUCE].chosen
        out.append((f"degraded {dg.topology.expr} allreduce ({chosen.scheduler})", chosen.schedule, dg.costs, MIB))
        served("uniform", g64, LinkCosts.uniform(g64, link), Collective.ALLGATHER, 4 * MIB, ("bfb",))
    return out


def main(argv=None) -> int:
    from services.synthesis.schedule.dependency import dependency_time
    from services.synthesis.schedule.replay import simgrid_available, simgrid_replay, transfer_groups

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    sg_reason = simgrid_available()
    with tempfile.TemporaryDirectory(prefix="fabricplan-ns3-") as tmp:
        exe = build_driver(Path(tmp))
        if not isinstance(exe, Path):
            print(f"ns-3 column skipped: {exe}")
        if sg_reason:
            print(f"SimGrid column skipped: {sg_reason}")
        print(f"{'schedule':<62} {'N':>3} {'M':>7} {'groups':>6} {'time_us':>11} {'barrier_us':>11} "
              f"{'simgrid_us':>11} {'ns3_us':>11} {'ns3/time':>8} {'ns3_pipe_us':>11} {'pipe/time':>9} {'ns3 s':>6}")
        for label, s, costs, size in cases(args.quick):
            served = dependency_time(s, costs, size) * 1e6
            barrier = costs.time(s, size) * 1e6
            tg = transfer_groups(s, costs, size)
            sg = simgrid_replay(tg, "dependency") * 1e6 if sg_reason is None else float("nan")
            t0 = time.perf_counter()
            ns3 = ns3_replay(exe, tg, True) * 1e6 if isinstance(exe, Path) else float("nan")
            pipe = ns3_replay(exe, tg, False) * 1e6 if isinstance(exe, Path) else float("nan")
            wall = time.perf_counter() - t0
            m = f"{size // MIB}MiB"
            print(f"{label[:62]:<62} {s.nodes:>3} {m:>7} {tg.groups:>6} {served:>11.2f} {barrier:>11.2f} "
                  f"{sg:>11.2f} {ns3:>11.2f} {ns3 / served:>8.4f} {pipe:>11.2f} {pipe / served:>9.4f} {wall:>6.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
