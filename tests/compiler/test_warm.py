"""Kernel warm-up (services.compiler.warm): every step runs and is reported in order, the synthesis library's
first (what a plan needs first), and the quiet report of the worker's fork server names only the steps numba
had to compile."""
from __future__ import annotations

from services.compiler import warm as compiler_warm
from services.synthesis.bfb import warm as synthesis_warm


def test_every_step_is_reported_in_order():
    seen = []
    total = compiler_warm.warm(lambda i, n, name, s, cpu: seen.append((i, n, name)))
    names = [name for name, _ in compiler_warm.STEPS]
    assert seen == [(i, len(names), name) for i, name in enumerate(names, 1)]
    assert names[:len(synthesis_warm.STEPS)] == [name for name, _ in synthesis_warm.STEPS]
    assert len(set(names)) == len(names) and total > 0


def test_the_quiet_report_prints_only_compiled_steps(capsys):
    report = compiler_warm.slow_steps(at_least_cpu_s=2.0)
    report(1, 3, "loaded from the cache", 9.0, 0.3)          # slow on a loaded machine, yet no compilation
    report(2, 3, "compiled", 40.0, 35.0)
    err = capsys.readouterr().err
    assert "compiled: 40.0 s (35.0 s CPU)" in err and "[2/3]" in err and "loaded from the cache" not in err
