"""Schedule compilers (paper section 7): schedule IR -> MSCCL XML (GPUs: msccl-executor-nccl, RCCL,
microsoft/msccl) and oneCCL XML (CPUs), plus a validator and CPU simulator for any MSCCL or oneCCL XML.
Pure library: no web, DB or Celery imports.

Stable API:
    compile_schedule(schedule, topology, runtime="executor"|"rccl"|"legacy"|"oneccl", **options) -> CompiledArtifact
        (any collective of the IR, all-to-all included; the file is art.xml_data, ASCII bytes; art.xml a str copy)
    check_xml(xml, fmt="msccl"|"oneccl", runtime=...) -> CheckReport
    CompileOptions (a hashable set of options, .key() for caches), runtime_defaults(runtime, collective)
    CompileError (.limit, .value, .maximum, .gpu, .tb), CheckReport, Finding
    PROFILES / profile_for: the runtimes' limits (services.compiler.runtimes)
"""
from .api import (FORMATS, RUNTIMES, CompiledArtifact, CompileOptions, check_xml, compile_schedule, format_of,
                  runtime_defaults)
from .errors import CheckReport, CompileError, Finding, XmlInvalid
from .lower.lowering import Lowered, chunked_bfb, lower
from .runtimes import PROFILES, RuntimeProfile, profile_for

DIALECTS = PROFILES            # the runtimes' old name
RuntimeLimits = RuntimeProfile

__all__ = ["FORMATS", "RUNTIMES", "CompiledArtifact", "CompileOptions", "check_xml", "compile_schedule",
           "format_of", "runtime_defaults", "CheckReport", "CompileError", "Finding", "XmlInvalid", "Lowered",
           "chunked_bfb", "lower", "PROFILES", "RuntimeProfile", "profile_for", "DIALECTS", "RuntimeLimits"]
