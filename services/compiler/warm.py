"""Loading every compiled kernel (numba) a plan needs before the work that needs it, in the order a first
plan needs them: the synthesis library's kernels (services.synthesis.bfb.warm: distances, BFB, greedy, tree
packing), then the message table's sorts and runs (services.compiler.common.radix and msccl.message_kernels, for every
column type they take, since tiny programs never reach the radix sort), then the compiler's dependency pass
(services.compiler.msccl.dep_kernels), connection ids (services.compiler.msccl.conn_kernels), the program order
(services.compiler.msccl.order_kernels) and XML text writers (services.compiler.text.xmltext), by compiling one tiny
allreduce for an MSCCL runtime, the checker's byte scanner and rules (services.compiler.check.scan,
msccl_columns) by checking that file, the deadlock proof (services.compiler.check.deadlock_kernels) by proving it
(the edges a cycle is named from, on no steps), the all-to-all pair index (services.compiler.lowering.layout.
AlltoallPairs) and homes on one transfer of two ranks, the oneCCL writer, and the tokenizer automaton a
stored file is checked with (services.compiler.check.grammar).

numba compiles each kernel the first time and keeps it in its on-disk cache (NUMBA_CACHE_DIR; scripts/dev
keeps it in the venv): the first run after an install compiles them all (several CPU-minutes, printed step by
step), later runs load them in a second or two. `python -m services.compiler.warm` prints every step; the
embedded worker's fork server (workers.preload) runs the same steps in the background while the API already
answers, and the scaled worker before it forks its pool.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np

from services.synthesis.bfb.warm import STEPS as SYNTHESIS_STEPS, Report, print_step, run_steps

__all__ = ["STEPS", "slow_steps", "warm"]


def _tiny_allreduce():
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.construct import construct_collectives

    return construct_collectives("ring(4)")[Collective.ALLREDUCE]


def _sorts() -> None:
    from .common import radix
    from .msccl import message_kernels

    radix.warm()
    message_kernels.warm()


def _msccl() -> None:
    from .api import check_xml, compile_schedule

    built = _tiny_allreduce()
    xml = compile_schedule(built.schedule, built.topology, runtime="executor").xml.encode("ascii")
    check_xml(xml)
    check_xml(xml, simulate_max_steps=0)


def _deadlock() -> None:
    from .check.deadlock_kernels import edges

    i64, i32 = np.zeros(0, np.int64), np.zeros(0, np.int32)
    edges(i64, np.zeros((0, 2), np.int64), np.zeros(1, np.int32), i32, i32, i32, i64, 0)


def _alltoall() -> None:
    from services.synthesis.schedule.ir import Collective

    from .lowering.layout import AlltoallPairs, UnitLayout

    one = np.ones(1, np.int64)
    pairs = AlltoallPairs(SimpleNamespace(nodes=2, grid=2, lo=one, hi=2 * one, source=0 * one, receiver=one))
    UnitLayout(Collective.ALLTOALL, 2, 2, False, lambda g, s: np.zeros(len(g), np.int32), pairs).home(one, 0 * one + 1)


def _oneccl() -> None:
    from .api import compile_schedule

    built = _tiny_allreduce()
    compile_schedule(built.schedule, built.topology, runtime="oneccl")


def _grammar() -> None:
    from .check.tokenizer import lexical_findings

    lexical_findings(b"<algo/>")


STEPS: list[tuple[str, Callable[[], None]]] = [
    *SYNTHESIS_STEPS,
    ("message table sorts and runs (compiler.common.radix, msccl.message_kernels)", _sorts),
    ("MSCCL compile and check: layout, dependency pass, connections, order, XML text, scanner, rules", _msccl),
    ("deadlock proof (compiler.check.deadlock_kernels)", _deadlock),
    ("all-to-all pairs and homes (compiler.lowering.layout)", _alltoall),
    ("oneCCL compile (compiler.text.oneccl)", _oneccl),
    ("runtime grammar tokenizer (compiler.check.grammar)", _grammar),
]


def warm(report: Report | None = None) -> float:
    """Compile (or load from numba's on-disk cache) every kernel on tiny inputs, telling `report` (step
    number, steps, name, seconds) after each step; returns the seconds taken."""
    return run_steps(STEPS, report)


def slow_steps(at_least_cpu_s: float = 2.0) -> Report:
    """A report that prints only the steps that took `at_least_cpu_s` CPU seconds or more: the ones numba
    compiled (loading a group from its cache takes a fraction of a CPU second), so a warm start prints
    nothing, however loaded the machine."""
    def report(i: int, n: int, name: str, seconds: float, cpu_s: float) -> None:
        if cpu_s >= at_least_cpu_s:
            print_step(i, n, name, seconds, cpu_s)
    return report


if __name__ == "__main__":
    print(f"fabricplan: loading {len(STEPS)} groups of compiled kernels (numba compiles them on the first run "
          "after an install and caches them)", file=sys.stderr, flush=True)
    print(f"fabricplan: compiled kernels ready in {warm(print_step):.1f} s", file=sys.stderr)
