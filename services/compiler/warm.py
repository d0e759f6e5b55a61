"""Loading every compiled kernel (numba) a compile needs before the work that needs it: the synthesis library's kernels
(services.synthesis.bfb.warm), the message table's sorts and runs (services.compiler.common.radix and
message_kernels, for every column type they take, since tiny programs never reach the radix sort), then the
compiler's dependency pass (services.compiler.msccl.dep_kernels), connection ids
(services.compiler.msccl.conn_kernels), the program order (services.compiler.msccl.order_kernels) and XML text
writers (services.compiler.text.xmltext), by compiling one tiny allreduce for an MSCCL runtime and for oneCCL, the
checker's byte scanner and rules (services.compiler.check.scan, msccl_columns) by checking the MSCCL file, the
deadlock proof (services.compiler.check.deadlock_kernels) by proving it (the edges a cycle is named from, on no
steps), and the all-to-all pair index (services.compiler.lower.layout.AlltoallPairs) and homes on one transfer of
two ranks, and the tokenizer automaton a stored file is checked with (services.compiler.check.grammar).

Run once after installing (`python -m services.compiler.warm`; scripts/dev and the Dockerfile do) and before
forking workers, so that no process pays the compilation (about 15 s for the text kernels) inside a timed or
parallel section.
"""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from services.synthesis.bfb.warm import warm as warm_synthesis
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.construct import construct_collectives

from .api import check_xml, compile_schedule
from .check.deadlock_kernels import edges
from .check.tokenizer import lexical_findings
from .common import radix
from .lower.layout import AlltoallPairs, UnitLayout
from .msccl import message_kernels

__all__ = ["warm"]


def warm() -> float:
    """Compile (or load from numba's on-disk cache) every kernel on tiny inputs; returns the seconds taken."""
    t0 = time.perf_counter()
    warm_synthesis()
    radix.warm()
    message_kernels.warm()
    built = construct_collectives("ring(4)")[Collective.ALLREDUCE]
    xml = compile_schedule(built.schedule, built.topology, runtime="executor").xml.encode("ascii")
    check_xml(xml)
    check_xml(xml, simulate_max_steps=0)
    i64, i32 = np.zeros(0, np.int64), np.zeros(0, np.int32)
    edges(i64, np.zeros((0, 2), np.int64), np.zeros(1, np.int32), i32, i32, i32, i64, 0)
    one = np.ones(1, np.int64)
    pairs = AlltoallPairs(SimpleNamespace(nodes=2, grid=2, lo=one, hi=2 * one, source=0 * one, receiver=one))
    UnitLayout(Collective.ALLTOALL, 2, 2, False, lambda g, s: np.zeros(len(g), np.int32), pairs).home(one, 0 * one + 1)
    compile_schedule(built.schedule, built.topology, runtime="oneccl")
    lexical_findings(b"<algo/>")          # the tokenizer automaton (services.compiler.check.grammar)
    return time.perf_counter() - t0


if __name__ == "__main__":
    print(f"fabricplan: compiled kernels ready in {warm():.1f} s")
