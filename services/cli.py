"""`fabricplan` command line (DESIGN section 5). Bad input: a message on stderr and exit code 2."""
from __future__ import annotations

import argparse
import json
import sys
import time


class UsageError(Exception):
    """Bad input from the command line (exit code 2)."""


def _topology(expr: str):
    from services.synthesis.topology.catalog import build

    try:
        return build(expr)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_bfb(args) -> int:
    from services.synthesis.bfb.lp import ScheduleTooLarge, bfb_allgather, bfb_schedule
    from services.synthesis.schedule.report import schedule_summary
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.verify import verify

    topo = _topology(args.expr)
    collective = Collective.parse(args.collective)
    t0 = time.perf_counter()
    try:
        opts = dict(workers=args.workers, shortcut=not args.no_shortcut, chunks=args.chunks)
        result = bfb_allgather(topo, **opts)
        schedule = bfb_schedule(topo, collective, allgather=result.schedule, **opts)
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


def cmd_schedule(args) -> int:
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.search.construct import construct
    from services.synthesis.schedule.report import schedule_summary
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.verify import verify

    _topology(args.expr)                      # validates the expression with a clear message
    collective = Collective.parse(args.collective)
    try:
        built = construct(args.expr, collective)
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    report = verify(built.schedule, built.topology)
    phases = 2 if collective is Collective.ALLREDUCE else 1
    summary = schedule_summary(built.topology, report, built.seconds, collective,
                               built.prediction.tau / phases)
    summary["method"] = built.method
    summary["predicted_steps"] = built.prediction.steps
    summary["prediction_matches"] = report.ok and (report.steps, report.tau) == (built.prediction.steps,
                                                                                built.prediction.tau)
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(built.schedule.to_bytes())
        summary["output"] = args.output
    _emit(summary, args.json)
    return 0 if report.ok else 1


def _frontier(args):
    from services.synthesis.search.finder import FinderError, frontier
    from services.synthesis.search.pricing import CACHE, default_cache_dir

    if CACHE.path is None:                   # the CLI keeps evaluated prices on disk between runs
        CACHE.attach(default_cache_dir())
    try:
        return frontier(args.nodes, args.degree, bidirectional=args.bidirectional, collective=args.collective)
    except FinderError as exc:
        raise UsageError(str(exc)) from None


def _entry(c, collective: str) -> dict:
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import frontier_entry

    return frontier_entry(c, Collective.parse(collective))


def cmd_frontier(args) -> int:
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import bounds

    entries = [_entry(c, args.collective) for c in _frontier(args)]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    b = bounds(args.nodes, args.degree, Collective.parse(args.collective))
    print(f"Pareto frontier for N = {args.nodes}, d = {args.degree}, {Collective.parse(args.collective).value}"
          f"{' (bidirectional only)' if args.bidirectional else ''}; bound: {b['steps']} steps, "
          f"tau {float(b['tau']):.4f}")
    print(f"{'steps':>5} {'tau':>8} {'D':>4}  {'BW':>3} {'Moore':>5}  expr")
    for e in entries:
        print(f"{e['steps']:>5} {e['tau']:>8.4f} {str(e['diameter']):>4}  {'yes' if e['bw_optimal'] else '':>3} "
              f"{'yes' if e['moore_optimal'] else '':>5}  {e['expr']}")
    return 0


def cmd_select(args) -> int:
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.finder import FinderError, WorkloadItem, select
    from services.synthesis.schedule.ir import Collective

    if args.alpha_us < 0 or args.bandwidth_gbps <= 0:
        raise UsageError("--alpha-us must be >= 0 and --bandwidth-gbps > 0")
    if not args.size:
        raise UsageError("give at least one --size in bytes")
    weights = args.weight or [1.0] * len(args.size)
    if len(weights) != len(args.size):
        raise UsageError(f"{len(args.size)} sizes but {len(weights)} weights")
    collective = Collective.parse(args.collective)
    items = [WorkloadItem(collective, float(s), float(w)) for s, w in zip(args.size, weights)]
    link = LinkModel.from_units(args.alpha_us, args.bandwidth_gbps)
    if args.alltoall_weight and not args.alltoall_bytes:
        raise UsageError("--alltoall-weight needs --alltoall-bytes")
    try:
        cands = _frontier(args)
        f_of = {}
        if args.alltoall_weight:
            from services.synthesis.evaluate.alltoall import alltoall_throughput
            from services.synthesis.topology.catalog import build

            f_of = {c.expr: alltoall_throughput(build(c.expr)).throughput for c in cands}
        sel = select(cands, link, items, alltoall_bytes=args.alltoall_bytes or 0.0,
                     alltoall_weight=args.alltoall_weight, alltoall_f=lambda c: f_of.get(c.expr))
    except FinderError as exc:
        raise UsageError(str(exc)) from None
    from services.synthesis.search.finder import baseline_times

    out = {"best": {**_entry(sel.best, args.collective), "time_us": _time_of(sel, sel.best) * 1e6},
           "frontier": [{**_entry(c, args.collective), "time_us": t * 1e6} for c, t in sel.times_s],
           "baselines_time_us": {k: v * 1e6 for k, v in baseline_times(
               args.nodes, args.degree, link, items, args.alltoall_bytes or 0.0, args.alltoall_weight).items()}}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"best: {sel.best.expr} ({out['best']['time_us']:.1f} us for the workload)")
        for e in out["frontier"]:
            print(f"  {e['time_us']:>12.1f} us  steps {e['steps']:>3}  tau {e['tau']:.4f}  {e['expr']}")
        print("today's alternatives:")
        for name, us in out["baselines_time_us"].items():
            print(f"  {us:>12.1f} us  {name}")
    return 0


def _time_of(sel, cand) -> float:
    return next(t for c, t in sel.times_s if c is cand)


def cmd_serve(args) -> int:
    import uvicorn

    from .api.app import create_app
    from .config import get_settings

    st = get_settings()
    mode = "embedded (SQLite + in-process worker)" if st.embedded else f"broker {st.broker_url.split('@')[-1]}"
    print(f"fabricplan: serving on http://{args.host}:{args.port} - {mode}; database "
          f"{st.sqlalchemy_url.split('@')[-1]}", file=sys.stderr)
    _warm_kernels()
    if args.workers > 1:      # several processes: uvicorn needs the factory's import path
        uvicorn.run("services.api.app:create_app", factory=True, host=args.host, port=args.port,
                    workers=args.workers, log_level=args.log_level, access_log=False)
    else:
        uvicorn.run(create_app(st), host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0


def _warm_kernels() -> None:
    """Load the compiled kernels (numba's on-disk cache; compiled on the first start after an install) so
    the first plan does not pay for it."""
    from services.synthesis.bfb.kernels import warm

    print(f"fabricplan: compiled kernels ready in {warm():.1f} s", file=sys.stderr)


def cmd_worker(args) -> int:
    from .config import get_settings

    st = get_settings()
    if st.embedded:
        raise UsageError("fabricplan worker needs FABRICPLAN_BROKER_URL (the embedded service runs its own worker)")
    from workers.app import celery_app

    argv = ["worker", f"--concurrency={args.concurrency}", f"--loglevel={args.log_level.upper()}",
            "--without-gossip", "--without-mingle"]
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    _warm_kernels()           # before the pool forks: every child starts with the kernels loaded
    celery_app.worker_main(argv)
    return 0


def cmd_migrate(args) -> int:
    from .config import get_settings
    from .store.db import migrate

    st = get_settings()
    migrate(st.sqlalchemy_url, args.revision)
    print(f"fabricplan: database at revision {args.revision}", file=sys.stderr)
    return 0


def cmd_keys(args) -> int:
    from sqlalchemy import select

    from .api.auth import create_key
    from .config import get_settings
    from .store.db import migrate, session_scope
    from .store.models import ApiKey

    st = get_settings()
    migrate(st.sqlalchemy_url)
    with session_scope(st.sqlalchemy_url) as s:
        if args.action == "create":
            if not args.name or not args.role:
                raise UsageError("keys create needs --name and --role")
            try:
                secret, key = create_key(s, args.name, args.role, args.panel)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(json.dumps({"id": key.id, "name": key.name, "role": key.role, "panel_id": key.panel_id,
                              "key": secret, "note": "shown once; only its hash is stored"}, indent=2))
        elif args.action == "list":
            for k in s.scalars(select(ApiKey).order_by(ApiKey.created_at)):
                print(f"{k.id}  {k.role:<9} {k.panel_id or '-':<12} {'revoked' if k.revoked else 'active':<8} {k.name}")
        else:
            key = s.get(ApiKey, args.id or "")
            if key is None:
                raise UsageError(f"no API key with id {args.id!r}")
            key.revoked = True
            print(f"revoked {key.id}")
    return 0


def cmd_compile(args) -> int:
    from .compiler.api import check_xml, compile_schedule
    from .compiler.errors import CompileError
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.search.construct import construct
    from services.synthesis.schedule.ir import Collective

    _topology(args.expr)
    collective = Collective.parse(args.collective)
    try:
        built = construct(args.expr, collective)
        art = compile_schedule(built.schedule, built.topology, args.format, dialect=args.dialect,
                               channels=args.channels, max_chunks=args.max_chunks)
    except (ScheduleTooLarge, CompileError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    summary = art.as_dict()
    code = 0
    if args.check:
        report = check_xml(art.xml, args.format)
        summary["check"] = {"ok": report.ok, "errors": [str(e) for e in report.errors[:5]]}
        code = 0 if report.ok else 1
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(art.xml)
        summary["output"] = args.output
        _emit(summary, args.json)
    else:
        sys.stdout.write(art.xml if art.xml.endswith("\n") else art.xml + "\n")
        print(json.dumps(summary), file=sys.stderr)
    return code


def _emit(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    width = max(len(k) for k in summary)
    for k, v in summary.items():
        print(f"{k:<{width}}  {v}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fabricplan", description="Direct-connect topologies and collective schedules.")
    p.add_argument("--version", action="version", version="fabricplan 0.1.0")
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

    sc = sub.add_parser("schedule", help="the schedule the finder would use for an expression, model-checked")
    sc.add_argument("expr")
    sc.add_argument("--collective", default="allgather")
    sc.add_argument("--json", action="store_true")
    sc.add_argument("-o", "--output", help="write the schedule as one compressed blob (.npz)")
    sc.set_defaults(func=cmd_schedule)

    fr = sub.add_parser("frontier", help="Pareto-efficient topologies for N nodes of degree d")
    fr.add_argument("nodes", type=int)
    fr.add_argument("degree", type=int)
    fr.add_argument("--bidirectional", action="store_true", help="only topologies duplex cabling can realise")
    fr.add_argument("--collective", default="allgather",
                    help="allgather (default), reducescatter or allreduce: whose (steps, tau) the frontier is on")
    fr.add_argument("--json", action="store_true")
    fr.set_defaults(func=cmd_frontier)

    se = sub.add_parser("select", help="the frontier topology fastest for a workload")
    se.add_argument("nodes", type=int)
    se.add_argument("degree", type=int)
    se.add_argument("--alpha-us", type=float, required=True)
    se.add_argument("--bandwidth-gbps", type=float, required=True, help="node egress bandwidth B")
    se.add_argument("--size", type=float, nargs="+", required=True, help="collective sizes in bytes")
    se.add_argument("--weight", type=float, nargs="+", help="one weight per size (default 1)")
    se.add_argument("--collective", default="allreduce")
    se.add_argument("--alltoall-bytes", type=float, default=None, help="bytes per node of an all-to-all")
    se.add_argument("--alltoall-weight", type=float, default=0.0, help="all-to-alls per unit of --weight")
    se.add_argument("--bidirectional", action="store_true")
    se.add_argument("--json", action="store_true")
    se.set_defaults(func=cmd_select)

    co = sub.add_parser("compile", help="compile an expression's schedule to MSCCL or oneCCL XML")
    co.add_argument("expr")
    co.add_argument("--collective", default="allreduce")
    co.add_argument("--format", choices=["msccl", "oneccl"], default="msccl")
    co.add_argument("--dialect", default="executor", help="MSCCL runtime: executor, rccl or legacy")
    co.add_argument("--channels", type=int, default=1)
    co.add_argument("--max-chunks", type=int, default=64, help="bound on chunks per shard when lowering")
    co.add_argument("-o", "--output", help="write the XML here (default: stdout, summary on stderr)")
    co.add_argument("--check", action="store_true", help="validate and simulate the XML on CPU")
    co.add_argument("--json", action="store_true")
    co.set_defaults(func=cmd_compile)

    sv = sub.add_parser("serve", help="run the HTTP API (and the embedded worker unless a broker is configured)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--log-level", default="info")
    sv.add_argument("--workers", type=int, default=1, help="API processes (each embedded one runs its own worker)")
    sv.set_defaults(func=cmd_serve)

    wk = sub.add_parser("worker", help="run a Celery worker for the scaled deployment (needs FABRICPLAN_BROKER_URL)")
    wk.add_argument("--concurrency", type=int, default=2)
    wk.add_argument("--hostname", default=None)
    wk.add_argument("--log-level", default="info")
    wk.set_defaults(func=cmd_worker)

    mg = sub.add_parser("migrate", help="apply database migrations (Alembic)")
    mg.add_argument("--revision", default="head")
    mg.set_defaults(func=cmd_migrate)

    ky = sub.add_parser("keys", help="manage API keys (scheduler, agent bound to a panel, viewer)")
    ky.add_argument("action", choices=["create", "list", "revoke"])
    ky.add_argument("--name")
    ky.add_argument("--role", choices=["scheduler", "agent", "viewer"])
    ky.add_argument("--panel", help="the panel an agent key is bound to")
    ky.add_argument("--id", help="the key to revoke")
    ky.set_defaults(func=cmd_keys)
    return p





def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "collective", None) is not None:
            from services.synthesis.schedule.ir import Collective
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
