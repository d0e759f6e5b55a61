"""`fabricplan` command line (DESIGN section 5). Bad input: a message on stderr and exit code 2."""
from __future__ import annotations

import argparse
import json
import sys
import time


class UsageError(Exception):
    """Bad input from the command line (exit code 2)."""


def _topology(expr: str):
    from .synthesis.catalog import build

    try:
        return build(expr)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_bfb(args) -> int:
    from .synthesis.bfb import ScheduleTooLarge, bfb_allgather, bfb_schedule
    from .synthesis.report import schedule_summary
    from .synthesis.schedule import Collective
    from .synthesis.verify import verify

    topo = _topology(args.expr)
    collective = Collective.parse(args.collective)
    t0 = time.perf_counter()
    try:
        opts = dict(workers=args.workers, shortcut=not args.no_shortcut, chunks=args.chunks)
        result = bfb_allgather(topo, **opts)
        schedule = result.schedule if collective is Collective.ALLGATHER else bfb_schedule(topo, collective, **opts)
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    seconds = time.perf_counter() - t0
    report = verify(schedule, topo)
    summary = schedule_summary(topo, report, seconds, collective, result.tau)
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(schedule.to_bytes())
        summary["output"] = args.output
    _emit(summary, args.json)
    return 0 if report.ok else 1


def _emit(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    width = max(len(k) for k in summary)
    for k, v in summary.items():
        print(f"{k:<{width}}  {v}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fabricplan", description="Direct-connect topologies and collective schedules.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bfb", help="BFB schedule of a topology expression, model-checked")
    b.add_argument("expr", help="topology expression, e.g. 'torus(4, 6)' or 'genkautz(4, 64)'")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--collective", default="allgather", help="allgather (default), reducescatter or allreduce")
    b.add_argument("--chunks", type=int, default=None, help="discrete BFB: P equal chunks per shard (App. E.2)")
    b.add_argument("--workers", type=int, default=None, help="processes for the per-receiver LPs (default: all cores)")
    b.add_argument("--no-shortcut", action="store_true", help="solve every node even on vertex-transitive topologies")
    b.add_argument("-o", "--output", help="write the schedule as one compressed blob (.npz)")
    b.set_defaults(func=cmd_bfb)
    return p



def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "collective", None) is not None:
            from .synthesis.schedule import Collective
            try:
                Collective.parse(args.collective)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        return args.func(args)
    except UsageError as exc:
        print(f"fabricplan: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
