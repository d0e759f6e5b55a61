"""Validator and CPU simulator for ANY MSCCL XML, against the profile of the runtime that will load it
(services.compiler.runtimes; in the style of dromniscience/MSCCL-XML-Verifier).

The work is split by job: reading (services.compiler.check.msccl_parse, section 1), the rules (msccl_rules on
elements, msccl_columns on a scanned file's columns, sections 2-3) and the simulator (msccl_simulate, section 4);
a file too large to simulate has its deadlock freedom proved instead (services.compiler.check.deadlock).
"""
from __future__ import annotations

import numpy as np

from ..errors import CheckReport, Finding
from ..runtimes import RuntimeProfile
from .deadlock import deadlock_of_columns, deadlock_of_file
from .msccl_columns import validate_columns
from .msccl_parse import columns_of, gpus_of_columns, natural_sizes, parse_columns, parse_msccl
from .msccl_rules import validate
from .msccl_simulate import SIMULATE_MAX_BYTES, SIMULATE_MAX_STEPS, SIMULATED, Simulator, simulable

__all__ = ["check_msccl"]


def check_msccl(text: str | bytes, *, runtime: str | RuntimeProfile | None = None, dialect: str | None = None,
                simulate: bool = True, fifo: int | None = None, seed: int = 0,
                simulate_max_steps: int = SIMULATE_MAX_STEPS, scanner: bool = True,
                **limit_overrides) -> CheckReport:
    """Validate and simulate MSCCL XML text for a runtime; see the module docstring. A file too large to
    simulate (`simulable`: more than `simulate_max_steps` steps, or vector clocks above SIMULATE_MAX_BYTES) is
    not simulated: its deadlock freedom is proved instead (services.compiler.check.deadlock, linear in its steps),
    and a warning says so.

    A file in the canonical form (services.compiler.check.scan) is read into integer columns by a compiled
    scanner and validated on them (services.compiler.check.msccl_columns), in seconds for millions of steps; a file
    not in that form, or one the column rules do not accept, is read and validated element by element, which
    words every problem. Both give the same report (`scanner=False` takes the element path only: the reference
    the tests compare with). `text` may be the file's bytes (UTF-8), which spares the scanner a copy."""
    cols = columns_of(text) if scanner else None
    if cols is None:
        text = text.decode("utf-8") if isinstance(text, bytes) else text
        algo, profile, errors, warnings = parse_msccl(text, runtime or dialect, **limit_overrides)
    else:
        algo, profile, errors, warnings = parse_columns(text, cols, runtime or dialect, **limit_overrides)
    rep = CheckReport(False, "msccl", dialect=profile.name, errors=errors, warnings=warnings)
    if algo is None:
        return rep
    rep.collective, rep.ngpus, rep.chunks_per_loop = algo.coll, algo.ngpus, algo.nchunksperloop
    nat = natural_sizes(algo.coll, algo.ngpus, algo.nchunksperloop)
    accepted = None                     # the column rules' warnings when they find no error
    if cols is not None and not errors:
        accepted = validate_columns(cols, algo.coll, algo.ngpus, algo.nchunksperloop, algo.nchannels, nat, profile)
    if cols is not None and accepted is None and not errors:
        algo.gpus = gpus_of_columns(cols)              # validate words what the column rules found
    if not errors:
        e, w = validate(algo, profile) if accepted is None else ([], accepted)
        errors.extend(e)
        warnings.extend(w)
    if algo.gpus is None:
        per_tb = np.diff(cols.tb_step)
        rep.steps = int(per_tb.max(initial=0))
        rep.threadblocks = int(np.diff(cols.gpu_tb).max(initial=0))
        rep.xml_steps = int(per_tb.sum())
        threadblocks, published = cols.tbs.shape[0], int((cols.steps[9] == 1).sum())
    else:
        rep.steps = max((len(tb.steps) for g in algo.gpus for tb in g.tbs), default=0)
        rep.threadblocks = max((len(g.tbs) for g in algo.gpus), default=0)
        rep.xml_steps = sum(len(tb.steps) for g in algo.gpus for tb in g.tbs)
        threadblocks = sum(len(g.tbs) for g in algo.gpus)
        published = sum(st.hasdep == 1 for g in algo.gpus for tb in g.tbs for st in tb.steps)
    if errors:
        return rep
    if simulate:
        if nat is None:
            warnings.append(Finding("structure", f"collective {algo.coll_raw!r} is not simulated (only "
                                                 f"{', '.join(SIMULATED)})"))
        else:
            modes = []
            if algo.outofplace == 1 or (algo.outofplace is None and algo.inplace == 0):
                modes.append(False)
            if algo.inplace == 1:
                modes.append(True)
            if not modes:
                errors.append(Finding("structure", "the algorithm is neither in-place nor out-of-place"))
            depth = profile.fifo_messages(algo.proto) if fifo is None else fifo
            if modes and not simulable(rep.xml_steps, threadblocks, published, simulate_max_steps):
                warnings.append(Finding("structure", f"not simulated: {rep.xml_steps} steps over {threadblocks} "
                                                     f"thread blocks exceed what the simulator takes "
                                                     f"({simulate_max_steps} steps, "
                                                     f"{SIMULATE_MAX_BYTES >> 20} MiB of vector clocks); deadlock "
                                                     f"freedom proved from the waits instead"))
                stuck = (deadlock_of_file(algo, depth) if algo.gpus is not None else
                         deadlock_of_columns(cols, algo.ngpus, depth))
                if stuck is not None:
                    errors.append(stuck)
                modes = []
            if modes and algo.gpus is None:
                algo.gpus = gpus_of_columns(cols)
            for inplace in modes:
                sim = Simulator(algo, inplace=inplace, fifo=depth, seed=seed)
                err = sim.run()
                rep.simulated.append("in-place" if inplace else "out-of-place")
                if err is not None:
                    err.message = f"{'in-place' if inplace else 'out-of-place'}: {err.message}"
                    errors.append(err)
                    break
                rep.comm_steps = sim.max_hop
                rep.messages = sim.messages
    rep.ok = not errors
    return rep
