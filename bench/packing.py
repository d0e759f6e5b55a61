"""Tree packing at 256 and 1024 nodes: is it exact, how much did the repair regrow, how long did it take.

    python -m bench.packing            # the target tori and random sparse digraphs, one JSON line each, then a table

Graphs: torus(16, 16) and torus(32, 32) with six 5 Gbps arcs (`bench.schedules --targets`' seeds), each also
transposed (the reduce-scatter's packing); torus(32, 32), genkautz(4, N) and random digraphs of in-degree 4 (a
Hamiltonian cycle plus three random in-arcs per node) at N = 256 and 1024 with every arc's bandwidth drawn from
{5, 10, 25} Gbps; others 25 Gbps. Per graph (`forest.packing.pack_trees`): x*, the method ("rerouted" when the
rerouted trees reach x*, "repaired" when `forest.repair` made them exact), x*/x (1 = exact, checked in
Fractions by pack_trees), W (each root's tree weights), the trees cut by the repair, the nodes it regrew, the
trees served, their height, the max flows and the seconds.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

GBPS = 1e9 / 8


def random_digraph(n: int, seed: int):
    """A Hamiltonian cycle plus three random in-arcs per node (self-loops dropped)."""
    from services.synthesis.topology.graph import Topology

    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    tails, heads = list(perm), list(np.roll(perm, -1))
    for _ in range(3):
        other = rng.permutation(n)
        keep = other != np.arange(n)
        tails += list(other[keep])
        heads += list(np.arange(n)[keep])
    return Topology(n, [int(x) for x in tails], [int(x) for x in heads], f"random({n}, in-degree 4, seed {seed})")


def cases():
    """(label, topology, bandwidths in bytes/s)."""
    from bench.schedules import _slow
    from services.synthesis.schedule.links import LinkCosts
    from services.synthesis.topology.catalog import build

    out = []
    for expr, seed in (("torus(16, 16)", 5), ("torus(32, 32)", 6)):
        g = build(expr)
        bw = np.full(g.arcs, 25 * GBPS)
        for a, gbps in _slow(g, 6, seed).items():
            bw[a] = gbps * GBPS
        gt = g.transpose()
        out.append(("six slow", g, bw))
        out.append(("six slow, transposed", gt, LinkCosts(g, np.full(g.arcs, 10e-6), bw).transposed(gt).bandwidth_Bps))
    for n in (256, 1024):
        for g in (build("torus(16, 16)" if n == 256 else "torus(32, 32)"), build(f"genkautz(4, {n})"),
                  random_digraph(n, 1), random_digraph(n, 2)):
            rng = np.random.default_rng(n + g.arcs)
            out.append(("5/10/25 Gbps", g, rng.choice([5.0, 10.0, 25.0], g.arcs) * GBPS))
    return out


def run() -> list[dict]:
    from services.synthesis.forest.lovasz import warm
    from services.synthesis.forest.packing import pack_trees

    warm()
    rows = []
    for label, g, bw in cases():
        t0 = time.perf_counter()
        pk = pack_trees(g, bw)
        row = {"graph": g.expr, "links": label, "nodes": g.nodes, "x_star": str(pk.optimal), "method": pk.method,
               "gap": float(pk.gap), "W": pk.per_root, "cut": pk.cut, "regrown": pk.regrown, "trees": len(pk.trees),
               "height": pk.height, "flows": pk.flows, "seconds": round(time.perf_counter() - t0, 2)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rows = run()
    print("| graph | links | x* | method | x*/x | W | cut | regrown | trees | height | max flows | s |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['graph']} | {r['links']} | {r['x_star']} | {r['method']} | {r['gap']:.4f} | {r['W']} | {r['cut']} "
              f"| {r['regrown']} | {r['trees']} | {r['height']} | {r['flows']} | {r['seconds']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
