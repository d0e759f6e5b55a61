"""The import graph of services/ and workers/ (read with `ast`, nothing imported): no circles, and imports go
one way (docs/architecture.md): api/workers -> jobs -> store/compiler/fabric -> synthesis.

Every import counts, the ones inside functions too (a lazy import is still a dependency), relative imports are
resolved against their package, `from pkg import name` counts pkg.name when that is a module, and importing
a.b.c also runs the package a.b's __init__."""
from __future__ import annotations

import ast
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


GRAPH = {m: _imports(m) for m in MODULES}


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
    assert "services.jobs.attempts" in GRAPH["workers.tasks"]                     # from services.jobs import attempts
    assert "services.jobs.plan.select" in GRAPH["workers.tasks"]          # from services.jobs.plan import select
    assert "services.jobs.compiling" in GRAPH["services.jobs.revision"]           # from . import compiling
    assert "services.store.repo" in GRAPH["services.jobs.attempts"]               # from ..store import repo
    assert "services.jobs.attempts" in GRAPH["services.api.dispatch"]             # inside a method
    assert "services.jobs" in GRAPH["workers.tasks"]                              # its package runs first
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


JOB_KINDS = ("services.jobs.plan", "services.jobs.compiling", "services.jobs.evaluation", "services.jobs.revision")


def _kind(module: str) -> str | None:
    return next((k for k in JOB_KINDS if _under(module, k) and module != "services.jobs.plan"), None)


def test_job_kinds_are_imported_only_by_workers_and_the_dispatcher():
    """A job kind imports the shared machinery, never another kind (a revision's compile stage is the compile
    module's), and only workers/ and the API's dispatcher import job kinds."""
    wrong = []
    for m, targets in sorted(GRAPH.items()):
        for t in sorted(targets):
            kind = _kind(t)
            if kind is None or _kind(m) == kind:
                continue
            if _under(m, "workers") or m == "services.api.dispatch":
                continue
            if (_kind(m), kind) == ("services.jobs.revision", "services.jobs.compiling"):
                continue
            wrong.append(f"{m} -> {t}")
    assert not wrong


def test_api_routes_import_no_other_route():
    assert not [e for m in MODULES if _under(m, "services.api.routes") and m != "services.api.routes"
                for e in _edges(m, ("services.api.routes",))
                if e.split(" -> ")[1] not in (m, "services.api.routes")]


def test_services_holds_packages_and_three_modules():
    modules = sorted(p.name for p in (ROOT / "services").glob("*.py"))
    assert modules == ["__init__.py", "config.py", "runtime.py"], modules
