"""One spelling for every set of compile options that makes the same file (what a compile job is keyed by).

`CompileOptions.key()` names the options as given: `inplace` left out and `inplace=both` (the executor's
default for an allreduce) were two keys, so two compile jobs for one file. `canonical_options` rewrites an
option equal to the runtime's default for the collective (services.compiler.api.runtime_defaults, and the
runtime's own step limit) to None,
and for the oneCCL format (services.compiler.text.oneccl: in-place flag and chunking only) drops every MSCCL
option the file does not depend on, so requests for the same file share one job and one stored result.
"""
from __future__ import annotations

from dataclasses import replace

from .api import CompileOptions, runtime_defaults
from .runtimes import profile_for

__all__ = ["canonical_options"]

ONECCL_READS = ("inplace", "max_chunks")          # what _compile_oneccl reads of the options


def canonical_options(options: CompileOptions, collective: str) -> CompileOptions:
    """`options` with every field that does not change the file for `collective` at its default.

    >>> canonical_options(CompileOptions("executor", inplace="both", min_bytes=0), "allreduce").key()
    'executor'
    >>> canonical_options(CompileOptions("oneccl", inplace="out", instances=4, channels=2), "allgather").key()
    'oneccl'
    """
    if options.runtime == "oneccl":
        kept = {name: getattr(options, name) for name in ONECCL_READS}
        options = CompileOptions("oneccl", **kept)
    defaults = runtime_defaults(options.runtime, collective)
    changes = {name: None for name, value in defaults.items() if getattr(options, name) == value}
    if options.runtime != "oneccl" and options.max_steps == profile_for(options.runtime).max_steps:
        changes["max_steps"] = None                # the runtime's own MSCCL_MAX_NUM_STEPS
    return replace(options, **changes)
