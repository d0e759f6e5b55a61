"""Schedule compilers (paper section 7): schedule IR -> MSCCL XML (GPUs: msccl-executor-nccl, RCCL,
microsoft/msccl) and oneCCL XML (CPUs), plus a validator and CPU simulator for any MSCCL or oneCCL XML.
Pure library: no web, DB or Celery imports.

Layout, one subpackage per stage in the order a compile runs them (docs/architecture.md, "Layout"):
lowering/ (chunk grid, channels, unit layout) -> msccl/ (the instruction-table IR and its five passes) -> text/
(XML writers; the oneCCL compiler) -> check/ (tokenizer, scanner, checkers, simulator, deadlock proof) -> fit/
(the fit search, which compiles and checks candidates); common/ and runtimes/ below them all, api.py on top.

Stable API:
    compile_schedule(schedule, topology, runtime="executor"|"rccl"|"legacy"|"oneccl", **options) -> CompiledArtifact
        (any collective of the IR, all-to-all included; the file is art.xml_data, ASCII bytes; art.xml a str copy)
    check_xml(xml, fmt="msccl"|"oneccl", runtime=...) -> CheckReport
    CompileOptions (a hashable set of options, .key() for caches), runtime_defaults(runtime, collective)
    CompileError (.limit, .value, .maximum, .gpu, .tb), CheckReport, Finding
    PROFILES / profile_for: the runtimes' limits (services.compiler.runtimes)
"""
from importlib import import_module

# the names below are loaded on first use (PEP 562), so importing a light submodule (runtimes.names: the runtime
# names the CLI's flags and the API's requests take) does not load the compiler itself
_HOME = {**dict.fromkeys(("FORMATS", "RUNTIMES", "CompiledArtifact", "CompileOptions", "check_xml", "compile_schedule",
                          "format_of", "runtime_defaults"), ".api"),
         **dict.fromkeys(("CheckReport", "CompileError", "Finding", "XmlInvalid"), ".errors"),
         **dict.fromkeys(("Lowered", "chunked_bfb", "lower"), ".lowering.grid"),
         **dict.fromkeys(("PROFILES", "RuntimeProfile", "profile_for"), ".runtimes")}
_ALIASES = {"DIALECTS": "PROFILES", "RuntimeLimits": "RuntimeProfile"}     # the old names

__all__ = ["FORMATS", "RUNTIMES", "CompiledArtifact", "CompileOptions", "check_xml", "compile_schedule",
           "format_of", "runtime_defaults", "CheckReport", "CompileError", "Finding", "XmlInvalid", "Lowered",
           "chunked_bfb", "lower", "PROFILES", "RuntimeProfile", "profile_for", "DIALECTS", "RuntimeLimits"]


def __getattr__(name: str):
    target = _ALIASES.get(name, name)
    if target not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_HOME[target], __name__), target)
    globals()[name] = value
    return value
