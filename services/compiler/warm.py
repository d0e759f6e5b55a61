"""Loading every compiled kernel (numba) a compile needs before the work that needs it: the synthesis
library's kernels (services.synthesis.bfb.warm), then the compiler's dependency pass
(services.compiler.dep_kernels), connection ids (services.compiler.conn_kernels), the program order
(services.compiler.order_kernels) and XML text writers (services.compiler.xmltext), by compiling one tiny
allreduce for an MSCCL runtime and for oneCCL, and the checker's byte scanner and rules
(services.compiler.xmlscan, msccl_columns) by checking the MSCCL file.

Run once after installing (`python -m services.compiler.warm`; scripts/dev and the Dockerfile do) and before
forking workers, so that no process pays the compilation (about 15 s for the text kernels) inside a timed or
parallel section.
"""
from __future__ import annotations

import time

from services.synthesis.bfb.warm import warm as warm_synthesis
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.construct import construct_collectives

from .api import check_xml, compile_schedule

__all__ = ["warm"]


def warm() -> float:
    """Compile (or load from numba's on-disk cache) every kernel on tiny inputs; returns the seconds taken."""
    t0 = time.perf_counter()
    warm_synthesis()
    built = construct_collectives("ring(4)")[Collective.ALLREDUCE]
    check_xml(compile_schedule(built.schedule, built.topology, runtime="executor").xml.encode("ascii"))
    compile_schedule(built.schedule, built.topology, runtime="oneccl")
    return time.perf_counter() - t0


if __name__ == "__main__":
    print(f"fabricplan: compiled kernels ready in {warm():.1f} s")
