"""What every `fabricplan` command shares (DESIGN section 5): the usage error (exit code 2) and its JSON form,
printing a summary (`emit`: one JSON object under --json, aligned `key  value` lines otherwise), the link-cost
arguments, the progress bar, and loading the compiled kernels before serving.
"""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager

__all__ = ["SIGPIPE_EXIT", "UsageError", "add_cost_arguments", "emit", "error_object", "jsonable", "progress_bar",
           "report_error", "warm_kernels"]

SIGPIPE_EXIT = 141          # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


class UsageError(Exception):
    """Bad input from the command line (exit code 2). `type` and `fields` go into the JSON error object."""

    def __init__(self, message: str, *, type: str = "usage", **fields):
        super().__init__(message)
        self.type, self.fields = type, fields


def error_object(message: str, type: str = "usage", **fields) -> dict:
    """The JSON form of an error under --json: {"error": {"type", "message", "exit_code", ...fields}}.

    type: usage (bad arguments or input), refused (a compile that nothing fits: `limit`, `value`, `maximum`
    name the runtime's rule), unverified (no schedule passed the model checker, exit code 1).
    """
    exit_code = 1 if type == "unverified" else 2
    return {"error": {"type": type, "message": message, "exit_code": exit_code,
                      **{k: v for k, v in fields.items() if v is not None}}}


def report_error(message: str, as_json: bool, type: str = "usage", **fields) -> None:
    if as_json:
        print(json.dumps(error_object(message, type, **fields)), file=sys.stderr)
    else:
        print(f"fabricplan: error: {message}" if type != "unverified" else f"fabricplan: {message}",
              file=sys.stderr)


def jsonable(v):
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


def emit(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    width = max(len(k) for k in summary)
    for k, v in summary.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            print(k)
            for x in v:
                print("  " + "  ".join(f"{a}={b}" for a, b in x.items()))
        else:
            print(f"{k:<{width}}  {v}")


def add_cost_arguments(p: argparse.ArgumentParser) -> None:
    """The link model the schedulers are compared on (the paper's table units by default)."""
    p.add_argument("--alpha-us", type=float, default=10.0, help="link latency alpha (default 10 us)")
    p.add_argument("--bandwidth-gbps", type=float, default=100.0,
                   help="node egress bandwidth B; a link carries B/d (default 100 Gbps)")
    p.add_argument("--size", type=float, default=float(1 << 20),
                   help="collective size M in bytes: decides which schedule is faster (default 1 MiB)")
    p.add_argument("--greedy-chunks", type=int, default=1,
                   help="chunks per shard of the greedy (TACOS) scheduler (default 1)")


@contextmanager
def progress_bar(desc: str, stream=None, unit: str = "candidate"):
    """Yield progress(message): each call advances a bar on `stream` (default stderr; tqdm) by one and shows the
    message, when it is a terminal; otherwise a no-op, so piped and `--json` output stays clean."""
    stream = sys.stderr if stream is None else stream
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield lambda message=None: None
        return
    from tqdm import tqdm

    # a candidate takes milliseconds to seconds: every one is drawn
    bar = tqdm(desc=desc, file=stream, unit=unit, leave=False, dynamic_ncols=True, mininterval=0.0)

    def progress(message=None) -> None:
        if message:
            bar.set_postfix_str(str(message)[:60], refresh=False)
        bar.update(1)

    try:
        yield progress
    finally:
        bar.close()


def warm_kernels() -> None:
    """Load the compiled kernels (numba's on-disk cache; compiled on the first start after an install, each
    compiled step printed) so the first plan does not pay for it."""
    from services.compiler.warm import slow_steps, warm

    print(f"fabricplan: compiled kernels ready in {warm(slow_steps()):.1f} s", file=sys.stderr)
