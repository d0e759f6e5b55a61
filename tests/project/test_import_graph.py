"""The import graph of services/ and workers/ (read with `ast`, nothing imported): no circles, and imports go
one way (docs/architecture.md): api/workers -> jobs -> store/compiler/fabric -> synthesis.

Every import counts, the ones inside functions too (a lazy import is still a dependency), relative imports are
resolved against their package, `from pkg import name` counts pkg.name when that is a module, and importing
a.b.c also runs the package a.b's __init__."""
from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("services", "workers")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _known(name: str) -> str | None:
    """The project module `name` names, or its nearest project ancestor (a name imported from a module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imports(module: str) -> set[str]:
    """The project modules `module` imports, anywhere in its body, with the packages that run on the way."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(_known(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for a in node.names:
                targets.add(_known(f"{source}.{a.name}") if f"{source}.{a.name}" in MODULES else _known(source))
    targets.discard(None)
    own = set(_ancestors(module))
    out = set()
    for t in targets:
        out.add(t)
        out.update(a for a in _ancestors(t) if a in MODULES and a not in own)   # a.b.__init__ runs first
    out.discard(module)
    return out


class _Graph(Mapping):
    """Module -> the project modules it imports; every file is read at the first look (a test), not when pytest
    collects this file."""

    @functools.cached_property
    def _edges(self) -> dict[str, set[str]]:
        return {m: _imports(m) for m in MODULES}

    def __getitem__(self, module: str) -> set[str]:
        return self._edges[module]

    def __iter__(self) -> Iterator[str]:
        return iter(self._edges)

    def __len__(self) -> int:
        return len(self._edges)


GRAPH = _Graph()


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): the import circles."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(set(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return comps


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each component of `_components`."""
    return [_cycle_in(graph, comp) for comp in _components(graph)]


def _cycle_in(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first search back to it)."""
    start = min(comp)
    parent, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in {comp}")


def _edges(src_prefix: str, dst_prefixes: tuple[str, ...]) -> list[str]:
    return [f"{m} -> {t}" for m, ts in sorted(GRAPH.items()) if _under(m, src_prefix)
            for t in sorted(ts) if any(_under(t, d) for d in dst_prefixes)]


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_graph_is_read():
    """The walk sees the edges it should (relative, lazy, and `from package import submodule` imports)."""
    assert "services.jobs.stages.attempts" in GRAPH["workers.tasks"]      # from services.jobs.stages import attempts
    assert "services.jobs.kinds.plan.select" in GRAPH["workers.tasks"]    # from services.jobs.kinds.plan import select
    assert "services.jobs.stages.compile_stage" in GRAPH["services.jobs.kinds.revision"]      # from a package
    assert "services.store.repo" in GRAPH["services.jobs.stages.attempts"]       # from services.store import repo
    assert "services.jobs.stages.attempts" in GRAPH["services.api.dispatch"]     # inside a method
    assert "services.jobs" in GRAPH["workers.tasks"]                              # its package runs first
    assert "services.api.schemas.common" in GRAPH["services.api.schemas.plans"]   # from .common import ...
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    comps = _components(GRAPH)
    assert not comps, "import cycles:\n" + "\n".join(
        f"{' -> '.join(_cycle_in(GRAPH, c))}   (modules on circles with it: {', '.join(sorted(c))})" for c in comps)


def test_the_synthesis_library_imports_no_service_layer():
    """The synthesis library is a library: no web, database, Celery, or any layer above it."""
    assert not _edges("services.synthesis", ("services.api", "services.store", "services.jobs", "services.fabric",
                                             "services.compiler", "services.config", "services.runtime",
                                             "services.cli", "workers"))
    third_party = ("celery", "fastapi", "starlette", "sqlalchemy", "alembic", "redis", "psycopg", "uvicorn")
    found = []
    for m, path in MODULES.items():
        if not _under(m, "services.synthesis"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
            found += [f"{m} imports {n}" for n in names if n.split(".")[0] in third_party]
    assert not found


def test_layers_point_one_way():
    """store, compiler and fabric import no job, API or worker module; jobs import neither the API nor workers."""
    for lower in ("services.store", "services.compiler", "services.fabric"):
        assert not _edges(lower, ("services.jobs", "services.api", "workers")), lower
    assert not _edges("services.jobs", ("services.api", "workers"))


KINDS = "services.jobs.kinds"
JOB_KINDS = tuple(f"{KINDS}.{name}" for name in ("plan", "compiling", "evaluation", "revision"))


def _kind(module: str) -> str | None:
    return next((k for k in JOB_KINDS if _under(module, k) and module != f"{KINDS}.plan"), None)


def test_every_job_kind_is_listed():
    """services/jobs/kinds/ holds the job kinds and nothing else: each is one of JOB_KINDS."""
    found = {f"{KINDS}.{p.stem if p.suffix else p.name}" for p in (ROOT / "services/jobs/kinds").iterdir()
             if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert found == set(JOB_KINDS), found


def test_job_kinds_are_imported_only_by_workers_and_the_dispatcher():
    """A job kind imports the shared stages and the request side, never another kind (a plan's and a
    revision's compile stage is services.jobs.stages.compile_stage), and only workers/ and the API's dispatcher
    import job kinds."""
    wrong = []
    for m, targets in sorted(GRAPH.items()):
        for t in sorted(targets):
            kind = _kind(t)
            if kind is None or _kind(m) == kind:
                continue
            if _under(m, "workers") or m == "services.api.dispatch":
                continue
            wrong.append(f"{m} -> {t}")
    assert not wrong


def test_stages_and_requests_import_no_job_kind():
    """The shared stages and the request side sit below the job kinds: they import none."""
    assert not _edges("services.jobs.stages", (KINDS,)) and not _edges("services.jobs.requests", (KINDS,))


def test_api_routes_import_no_other_route():
    assert not [e for m in MODULES if _under(m, "services.api.routes") and m != "services.api.routes"
                for e in _edges(m, ("services.api.routes",))
                if e.split(" -> ")[1] not in (m, "services.api.routes")]


def test_services_holds_packages_and_three_modules():
    modules = sorted(p.name for p in (ROOT / "services").glob("*.py"))
    assert modules == ["__init__.py", "config.py", "runtime.py"], modules


# The stacks inside the two libraries (docs/architecture.md, "Layout"): a module imports only from its own layer
# or the layers below it. Synthesis, by subpackage; the compiler, by pipeline stage (the package's own modules,
# `api` and what the service imports beside it, sit on top of the stages they run).
SYNTHESIS_LAYERS = (("topology",), ("schedule",), ("forest",), ("bfb",), ("search",), ("evaluate", ""))
COMPILER_LAYERS = (("errors", "runtimes"), ("common",), ("lowering",), ("msccl",), ("text",), ("check",), ("fit",),
                   ("api", "canonical", "size_sets", "warm", ""))
STACKS = {"services.synthesis": SYNTHESIS_LAYERS, "services.compiler": COMPILER_LAYERS}


def _layer(module: str, package: str, layers) -> int | None:
    """The index in `layers` of the part of `package` that `module` lives in ("" names the package's __init__)."""
    if not _under(module, package):
        return None
    rest = module[len(package) + 1:].split(".")[0] if module != package else ""
    return next((i for i, names in enumerate(layers) if rest in names), None)


def upward_imports(package: str, layers) -> list[str]:
    """The imports inside `package` from a layer above the importer's."""
    out = []
    for m, targets in sorted(GRAPH.items()):
        here = _layer(m, package, layers)
        if here is None:
            continue
        for t in sorted(targets):
            there = _layer(t, package, layers)
            if there is not None and there > here:
                out.append(f"{m} -> {t}")
    return out


def test_every_module_of_a_stack_has_a_layer():
    """A new subpackage or module of the synthesis library or the compiler is placed in the stack explicitly."""
    unplaced = [m for package, layers in STACKS.items() for m in MODULES
                if _under(m, package) and _layer(m, package, layers) is None]
    assert not unplaced


def test_synthesis_is_a_stack():
    """topology < schedule < forest < bfb < search < evaluate: no subpackage imports one above it."""
    assert not upward_imports("services.synthesis", SYNTHESIS_LAYERS)


def test_the_compiler_imports_in_pipeline_order():
    """errors, runtimes < common < lower < msccl < text < check < fit < the package's entry points."""
    assert not upward_imports("services.compiler", COMPILER_LAYERS)


def test_no_lazy_name_is_shadowed_by_a_subpackage():
    """A package that loads its names on first use (a module-level __getattr__, PEP 562) names no subpackage or
    module like one of them: once that submodule is imported, the package's attribute is the submodule and
    `from package import name` gets it instead of the name (a stage package `lower` once hid the compiler's
    `lower`)."""
    clashes = []
    for pkg, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        if not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            continue
        names = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)), [])
        clashes += [f"{pkg}.{name}" for name in names if f"{pkg}.{name}" in MODULES]
    assert not clashes


def layout_report() -> str:
    """The packages of services/ and workers/ with their module counts (the __init__ and the modules beside it),
    then each stack's order and upward imports, and the import circles (0 and 0 when the tests above pass)."""
    packages = sorted(m for m, p in MODULES.items() if p.name == "__init__.py")
    rows = [(pkg, 1 + sum(m.rpartition(".")[0] == pkg and MODULES[m].name != "__init__.py" for m in MODULES))
            for pkg in packages]
    width = max(len(p) for p, _ in rows)
    lines = [f"{'package'.ljust(width)}  modules"] + [f"{p.ljust(width)}  {n:7d}" for p, n in rows]
    lines.append(f"{'total'.ljust(width)}  {len(MODULES):7d}")
    for package, layers in STACKS.items():
        order = " < ".join("/".join(n or "(package)" for n in names) for names in layers)
        lines.append(f"{package}: {order}; upward imports: {len(upward_imports(package, layers))}")
    lines.append(f"import circles: {len(_components(GRAPH))}")
    return "\n".join(lines)


def test_layout_report():
    """`pytest -s` (or `python -m tests.project.test_import_graph`) prints the listing; it reports no upward import and
    no circle."""
    report = layout_report()
    print("\n" + report)
    assert report.endswith("import circles: 0") and "upward imports: 0" in report
    assert all(line.endswith("upward imports: 0") for line in report.splitlines() if "upward imports" in line)


if __name__ == "__main__":
    print(layout_report())
