"""Schedule compiler benchmark: compile time, peak memory, XML size and steps per runtime, N = 16 ... 1024.

    python -m bench.compile                             # line(circulant(16, 1, 4), k) allreduce, k = 0..3, all runtimes
    python -m bench.compile --collective allgather --runtime rccl
    python -m bench.compile --expr "genkautz(4, 256)" --runtime rccl --check
    python -m bench.compile --json

The default family ends at the issue's 1024-host plan, line(circulant(16, 1, 4), 3) (N = 16, 64, 256, 1024).
Targets (issue 11): the 1024-host allreduce compiles in at most 30 s and 2 GiB, or is refused quickly with the
reason. Columns: the outcome (fitted with its options, or the limit that refused it), compile wall and CPU
seconds (the schedule is built beforehand and not timed), the compile's peak memory above what the process
held before it (sampled RSS), XML size, XML steps in all and in the fullest thread block, thread blocks per
gpu (oneCCL: instructions of the busiest rank under "tb st"), and the alpha-beta time of the compiled program beside the schedule's (alpha = 10 us, B = 100 Gbit/s; a
chunked re-solve costs bandwidth). --check also validates and simulates the file (slow above N = 256).
The machine these figures come from is shared: compare CPU seconds, and rerun on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time

FAMILY = ["circulant(16, 1, 4)", "line(circulant(16, 1, 4))", "line(circulant(16, 1, 4), 2)",
          "line(circulant(16, 1, 4), 3)"]
RUNTIMES = ["executor", "rccl", "legacy", "oneccl"]
SIZES = (1 << 20, 1 << 28)
TARGET_S, TARGET_MB = 30.0, 2048.0


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRss:
    """Peak resident memory while a block runs, above the level when it started (sampled every 20 ms)."""

    def __enter__(self):
        self.base = self.peak = _rss_mb()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, _rss_mb())

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, _rss_mb())
        self.mb = self.peak - self.base


def run(expr: str, collective: str, runtimes: list[str], check: bool) -> list[dict]:
    from services.compiler import CompileError, check_xml, compile_schedule
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.construct import construct_collectives

    t0 = time.perf_counter()
    built = construct_collectives(expr)[Collective.parse(collective)]
    sched_s = time.perf_counter() - t0
    link = LinkModel.from_units(10, 100)
    rows = []
    for runtime in runtimes:
        row = {"expr": expr, "nodes": built.topology.nodes, "collective": collective, "runtime": runtime,
               "sched_s": sched_s}
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            with PeakRss() as mem:
                art = compile_schedule(built.schedule, built.topology, runtime=runtime, link=link, sizes=SIZES)
        except CompileError as e:
            row.update(ok=False, limit=e.limit, reason=str(e), wall_s=time.perf_counter() - w0,
                       cpu_s=time.process_time() - c0, peak_mb=mem.mb)
            rows.append(row)
            continue
        row.update(ok=True, wall_s=time.perf_counter() - w0, cpu_s=time.process_time() - c0, peak_mb=mem.mb,
                   xml_mb=art.xml_bytes / 2**20, xml_steps=art.xml_steps, tb_steps=art.max_tb_steps,
                   tbs=art.threadblocks, options=art.options, lowering=art.lowering, loss=art.loss,
                   predicted_us=art.predicted_time_us, schedule_us=art.schedule_time_us)
        if check:
            t1 = time.perf_counter()
            rep = check_xml(art.xml, art.fmt, runtime=None if art.fmt == "oneccl" else runtime)
            row.update(check_s=time.perf_counter() - t1, check_ok=rep.ok, check_error=str(rep.error or ""))
        del art
        rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--expr", action="append", help="topology expression (repeatable); default: the 16..1024 family")
    ap.add_argument("--collective", default="allreduce", choices=["allgather", "reducescatter", "allreduce"])
    ap.add_argument("--runtime", action="append", choices=RUNTIMES, help="repeatable; default: all four")
    ap.add_argument("--check", action="store_true", help="also validate and simulate every file")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = []
    for expr in a.expr or FAMILY:
        rows.extend(run(expr, a.collective, a.runtime or RUNTIMES, a.check))
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{a.collective}; targets at N = 1024: <= {TARGET_S:.0f} s and <= {TARGET_MB:.0f} MiB (or a quick refusal)")
    head = (f"{'N':>5} {'runtime':8} {'wall s':>7} {'cpu s':>6} {'peak MB':>8} {'XML MB':>7} {'steps':>8} {'tb st':>5} "
            f"{'tbs':>4}  {'1 MiB us (sched)':>17}  {'256 MiB us (sched)':>19}  outcome")
    print(head)
    print("-" * len(head))
    for r in rows:
        base = f"{r['nodes']:>5} {r['runtime']:8} {r['wall_s']:7.1f} {r['cpu_s']:6.1f} {r['peak_mb']:8.0f}"
        if not r["ok"]:
            print(f"{base} {'-':>7} {'-':>8} {'-':>5} {'-':>4}  {'-':>17}  {'-':>19}  refused: {r['limit']}: "
                  f"{r['reason'][:160]}")
            continue
        small, big = (str(s) for s in SIZES)
        times = (f"{r['predicted_us'][small]:8.1f} ({r['schedule_us'][small]:6.1f})  "
                 f"{r['predicted_us'][big]:9.1f} ({r['schedule_us'][big]:7.1f})")
        outcome = f"{r['lowering']} loss={r['loss']:.3f} [{r['options']}]"
        if "check_ok" in r:
            outcome += f" check={'ok' if r['check_ok'] else r['check_error']} ({r['check_s']:.1f} s)"
        steps = f"{r['xml_steps']:8d}" if r["xml_steps"] is not None else f"{'-':>8}"   # oneCCL: instructions
        tbs = f"{r['tbs']:4d}" if r["tbs"] is not None else f"{'-':>4}"
        print(f"{base} {r['xml_mb']:7.1f} {steps} {r['tb_steps']:5d} {tbs}  {times}  {outcome}")
    print(f"({r['expr']}: the family ends at the issue's plan; the schedule itself is built before timing)")


if __name__ == "__main__":
    main()
