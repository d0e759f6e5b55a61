"""`fabricplan` command line (DESIGN section 5): one module per command, each adding its sub-parser
(`register(sub)`, its handler `run(args)`); `build_parser` finds them, so a new command is a new module.

    bfb, schedule, frontier, select, train (hybrid), compile    the synthesis library and the compilers
    serve, worker, migrate, keys                                the service
    common      usage errors and their JSON form, `emit`, cost arguments, progress bar
    inputs      command-line input read into library objects (topology, link costs, frontier, schedule set)

Bad input and refusals: exit code 2 with a message on stderr, `fabricplan: error: ...`; under `--json` the
message is one JSON object on stderr instead (stdout keeps only results), `{"error": {"type", "message",
...}}` (see `error_object`). A reader that closes the pipe early (`... --json | head`) ends the command
quietly with the shell's SIGPIPE status (141), not a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys

from .common import SIGPIPE_EXIT, UsageError, error_object, progress_bar, report_error

__all__ = ["UsageError", "build_parser", "command_modules", "error_object", "main", "progress_bar"]


def command_modules() -> list:
    """The modules of this package that add a sub-command (they define `register`), in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if callable(getattr(module, "register", None)):
            found.append(module)
    return found


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fabricplan", description="Direct-connect topologies and collective schedules.")
    p.add_argument("--version", action="version", version="fabricplan 0.1.0")
    sub = p.add_subparsers(dest="command", required=True)
    for module in command_modules():
        module.register(sub)
    return p


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors (unknown option, bad choice) follow --json like every other error."""

    json_errors = False

    def error(self, message: str):
        if _Parser.json_errors:
            print(json.dumps(error_object(f"{self.prog}: {message}")), file=sys.stderr)
            raise SystemExit(2)
        super().error(message)


def main(argv: list[str] | None = None) -> int:
    """Run one command; a closed stdout (`| head`) ends it with status 141 and no traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        _silence_stdout()
        return SIGPIPE_EXIT


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _main(argv: list[str] | None) -> int:
    from services.runtime import tune_gc

    tune_gc()
    argv = sys.argv[1:] if argv is None else list(argv)
    _Parser.json_errors = "--json" in argv
    parser = build_parser()
    args = parser.parse_args(argv)
    as_json = bool(getattr(args, "json", False))
    try:
        if getattr(args, "collective", None) is not None:
            from services.synthesis.schedule.ir import Collective
            try:
                Collective.parse(args.collective)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        code = args.func(args)
        sys.stdout.flush()                    # a closed pipe surfaces here, inside the handler in main
        return code
    except UsageError as exc:
        report_error(str(exc), as_json, exc.type, **exc.fields)
        return 2
