"""Schedule compiler benchmark: compile time, XML size and CPU-simulation time for N = 8 ... 64.

    python -m bench.compile                        # torus / circulant / genkautz / hypercube, N = 8..64
    python -m bench.compile --format oneccl        # the CPU compiler
    python -m bench.compile --collective allreduce --no-check
    python -m bench.compile --expr "torus(8, 8)" --consolidate true --dialect rccl

Columns: N, degree, collective, comm steps, chunks per shard P, most XML steps in one thread block (MSCCL,
nops included; oneCCL: instructions of one rank), messages per chunk loop, XML size, compile seconds
(lowering + code generation, the schedule itself is built beforehand and timed separately as `sched s`),
and the validator + simulator seconds with its verdict.
"""
from __future__ import annotations

import argparse
import json
import time

CASES = [
    "torus(2, 4)", "torus(4, 4)", "torus(4, 8)", "torus(8, 8)",
    "circulant(8)", "circulant(16)", "circulant(32)", "circulant(64)",
    "genkautz(4, 8)", "genkautz(4, 16)", "genkautz(4, 32)", "genkautz(4, 64)",
    "hypercube(3)", "hypercube(4)", "hypercube(5)", "hypercube(6)",
]


def run(expr: str, collectives, fmt: str, check: bool, **opts) -> list[dict]:
    from services.compiler import CompileError, check_xml, compile_schedule
    from services.synthesis.search.construct import construct_collectives
    from services.synthesis.schedule.ir import Collective

    t0 = time.perf_counter()
    built = construct_collectives(expr)
    sched_s = time.perf_counter() - t0
    rows = []
    for c in collectives:
        r = built[Collective.parse(c)]
        row = {"expr": expr, "nodes": r.topology.nodes, "degree": r.topology.degree, "collective": c,
               "sched_s": sched_s}
        t0 = time.perf_counter()
        try:
            art = compile_schedule(r.schedule, r.topology, fmt, **opts)
        except CompileError as e:
            row.update(error=f"{e.limit}: {e}")
            rows.append(row)
            continue
        row.update(compile_s=time.perf_counter() - t0, steps=art.steps, chunks=art.chunks,
                   tb_steps=art.max_tb_steps, messages=art.messages, kb=art.xml_bytes / 1024,
                   lowering=art.lowering, loss=art.loss, consolidated=art.consolidated)
        if check:
            t0 = time.perf_counter()
            rep = check_xml(art.xml, fmt, dialect=opts.get("dialect") if fmt == "msccl" else None,
                            max_steps=opts.get("max_steps"))
            row.update(check_s=time.perf_counter() - t0, ok=rep.ok,
                       comm_steps=rep.comm_steps, error=str(rep.error) if rep.error else None)
        rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", default="msccl", choices=["msccl", "oneccl"])
    ap.add_argument("--collective", action="append", choices=["allgather", "reducescatter", "allreduce"])
    ap.add_argument("--expr", action="append", help="topology expression (repeatable); default: the N=8..64 set")
    ap.add_argument("--dialect", default="executor", choices=["executor", "rccl", "legacy"])
    ap.add_argument("--consolidate", default="auto", choices=["auto", "true", "false"])
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--no-check", action="store_true", help="skip the validator/simulator")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    collectives = a.collective or ["allgather", "reducescatter", "allreduce"]
    opts = {}
    if a.format == "msccl":
        opts = {"dialect": a.dialect, "channels": a.channels,
                "consolidate": {"auto": "auto", "true": True, "false": False}[a.consolidate]}
    rows = []
    for expr in a.expr or CASES:
        rows.extend(run(expr, collectives, a.format, not a.no_check, **opts))
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    head = (f"{'expression':18s} {'N':>3s} {'d':>2s} {'collective':13s} {'steps':>5s} {'P':>3s} {'tb st':>5s} "
            f"{'msgs':>6s} {'XML KB':>7s} {'sched s':>7s} {'comp s':>7s} {'check s':>7s}  verdict")
    print(f"format={a.format}" + (f" dialect={a.dialect} consolidate={a.consolidate} channels={a.channels}"
                                  if a.format == "msccl" else ""))
    print(head)
    print("-" * len(head))
    for r in rows:
        if "compile_s" not in r:
            print(f"{r['expr']:18s} {r['nodes']:3d} {r['degree']:2d} {r['collective']:13s}  CompileError {r['error']}")
            continue
        verdict = "-" if "ok" not in r else ("ok" if r["ok"] and r["comm_steps"] == r["steps"] else f"FAIL {r['error']}")
        extra = (" cons" if r["consolidated"] else "") + (f" {r['lowering']} loss={r['loss']:.3f}"
                                                           if r["lowering"] != "exact" else "")
        print(f"{r['expr']:18s} {r['nodes']:3d} {r['degree']:2d} {r['collective']:13s} {r['steps']:5d} "
              f"{r['chunks']:3d} {r['tb_steps']:5d} {r['messages']:6d} {r['kb']:7.1f} {r['sched_s']:7.3f} "
              f"{r['compile_s']:7.3f} {r.get('check_s', float('nan')):7.3f}  {verdict}{extra}")


if __name__ == "__main__":
    main()
