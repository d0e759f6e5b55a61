"""Schedule compilers (paper section 7): schedule IR -> MSCCL XML (GPUs) and oneCCL XML (CPUs), plus a
validator and CPU simulator for any MSCCL or oneCCL XML. Pure library: no web, DB or Celery imports.

Stable API:
    compile_schedule(schedule, topology, fmt="msccl"|"oneccl", **options) -> CompiledArtifact
    check_xml(xml, fmt="msccl"|"oneccl", **options) -> CheckReport
    CompileError (.limit, .value, .maximum, .gpu, .tb), CheckReport, Finding, DIALECTS
"""
from .api import FORMATS, CompiledArtifact, check_xml, compile_schedule
from .errors import CheckReport, CompileError, Finding, XmlInvalid
from .limits import DIALECTS, RuntimeLimits
from .lowering import Lowered, chunked_bfb, lower

__all__ = ["FORMATS", "CompiledArtifact", "check_xml", "compile_schedule", "CheckReport", "CompileError",
           "Finding", "XmlInvalid", "DIALECTS", "RuntimeLimits", "Lowered", "chunked_bfb", "lower"]
