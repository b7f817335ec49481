"""The package layering: ``common`` is the shared kernel, ``app`` (extender, annotator) and ``agent`` (node
agent) build on it and never on each other, except that the agent reads the pure shared load model
``app.model`` (the policy, the annotation format, the hot value, the load-source rule: it writes the same
annotations as the annotator), never a program; only the ``ballast`` command composes both.

Every module under those packages is parsed (``ast``, nothing imported), every import statement counted,
the ones inside functions too, and resolved to the project module it loads (``from a import b`` loads
``a.b`` when that is a module, else ``a``; a relative import resolves against its package). The module
graph must have no cycle: an import inside a function does not fail at load, but it still ties the two
modules into one unit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "app", "agent", "ballast")
COMPOSER = "ballast"
"""The one package that may import both ``app`` and ``agent``."""


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under the project's packages."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The project module ``name`` loads: itself, else its nearest enclosing project module."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """``(imported project module, line)`` for every import in the file, at any depth."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}", modules)
                if target is not None:
                    yield target, node.lineno


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported project module: first line}. A module importing a package it is part of adds
    no edge: Python has loaded every enclosing package before the module itself, so that import loads
    nothing (``agent.cri._stubs`` extends ``agent.cri.__path__`` that way). A package importing its own
    submodule is an edge like any other."""
    modules = project_modules(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(module, path, modules):
            if target != module and not module.startswith(target + "."):
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def find_cycle(graph: Mapping[str, Mapping[str, int]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def layering_violations(graph: Mapping[str, Mapping[str, int]], root: Path = ROOT) -> list[str]:
    allowed = {
        "common": {"common"},
        "app": {"app", "common"},
        "agent": {"agent", "common"},
        COMPOSER: {COMPOSER, "app", "agent", "common"},
    }
    out = []
    for module, edges in sorted(graph.items()):
        top = module.partition(".")[0]
        for target, line in sorted(edges.items()):
            if top == "agent" and (target == MODEL or target.startswith(MODEL + ".")):
                continue  # the agent -> app.model edge, the one way into app
            if target.partition(".")[0] not in allowed[top]:
                where = project_modules(root)[module].relative_to(root)
                out.append(f"{where}:{line}: {module} imports {target}")
    return out


def test_the_packages_import_only_downwards() -> None:
    """common imports nothing from app or agent; app never imports agent; agent imports only app.model."""
    bad = layering_violations(import_graph())
    assert not bad, "imports across the layers:\n" + "\n".join(bad)


def test_the_agent_may_read_the_model_and_nothing_else_of_app() -> None:
    assert layering_violations({"agent.load.reporter": {"app.model.policy": 3, "app.model": 4}}) == []
    (bad,) = layering_violations({"agent.run": {"app.rebalancer.cache": 1}})
    assert bad.endswith("agent.run imports app.rebalancer.cache")


PROGRAMS = ("app.extender", "app.annotator", "app.rebalancer")
"""The cluster-level programs, each its own package on the shared load model."""
MODEL = "app.model"


def _package_of(module: str) -> str:
    """The program package or ``app.model`` a module under ``app`` belongs to, else the module itself."""
    for package in (*PROGRAMS, MODEL):
        if module == package or module.startswith(package + "."):
            return package
    return module


def program_violations(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    """A program importing another program's package, or the model importing any program."""
    out = []
    for module, edges in sorted(graph.items()):
        own = _package_of(module)
        if own not in (*PROGRAMS, MODEL):
            continue
        for target in sorted(edges):
            theirs = _package_of(target)
            if theirs in PROGRAMS and theirs != own:
                out.append(f"{module} imports {target}")
    return out


def test_no_program_imports_another() -> None:
    """extender, annotator and rebalancer build on ``app.model`` and ``common``, never on each other, and
    the model imports none of them: the tree says which modules are shared and which are one service's."""
    bad = program_violations(import_graph())
    assert not bad, "imports between programs:\n" + "\n".join(bad)
    graph = import_graph()
    for program in ("app.extender", "app.annotator"):
        assert any(_package_of(t) == MODEL for m, e in graph.items() if m.startswith(program) for t in e)


def test_the_program_check_catches_a_crossing() -> None:
    graph = {
        "app.model.load": {"app.extender.cache": 3},
        "app.annotator.run": {"app.extender.metrics": 5, "app.model.policy": 6},
        "app.extender.main": {"app.model.policy": 1},
    }
    assert program_violations(graph) == [
        "app.annotator.run imports app.extender.metrics",
        "app.model.load imports app.extender.cache",
    ]


NUMA = "app.extender.numa"
NUMA_PURE = ("app.extender.numa.crane", "app.extender.numa.community", "app.extender.numa.community_assumed")
"""The NUMA arithmetic: tested with tables, so it reads no cluster and speaks no HTTP."""
NUMA_MAY_IMPORT = (NUMA, "app.extender.bind", "app.extender.wire", MODEL, "common")
"""The NUMA package sits beside the verbs: it knows the bind contract and the wire shapes, never the
verbs' HTTP layer, the cache or the wiring that use it."""


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def numa_violations(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    """A NUMA module importing past its layer, or a pure one importing I/O (the kube client)."""
    out = []
    for module, edges in sorted(graph.items()):
        if not _within(module, (NUMA,)):
            continue
        allowed = (*NUMA_PURE, "common") if module in NUMA_PURE else NUMA_MAY_IMPORT
        for target in sorted(edges):
            if not _within(target, allowed) or (module in NUMA_PURE and target == "common.kube"):
                out.append(f"{module} imports {target}")
    return out


def test_the_numa_package_stays_beside_the_verbs() -> None:
    graph = import_graph()
    assert {m for m in graph if _within(m, (NUMA,))} >= {NUMA, *NUMA_PURE}
    bad = numa_violations(graph)
    assert not bad, "NUMA imports past its layer:\n" + "\n".join(bad)


def test_the_numa_check_catches_a_crossing() -> None:
    graph = {
        "app.extender.numa.crane": {"common.kube": 1, "common.podspec": 2},
        "app.extender.numa.check": {"app.extender.cache": 3, "app.extender.numa.crane": 4},
        "app.extender.numa.crane_bind": {"app.extender.bind": 5, "common.kube": 6},
    }
    assert numa_violations(graph) == [
        "app.extender.numa.check imports app.extender.cache",
        "app.extender.numa.crane imports common.kube",
    ]


def test_the_module_graph_has_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_every_package_is_seen() -> None:
    """The walk reads every package, function-level imports included (else the two tests prove nothing)."""
    graph = import_graph()
    assert {m.partition(".")[0] for m in graph} == set(PACKAGES)
    assert "agent.run" in graph["agent.cli"]  # imported inside run_agent
    assert {"app.extender.cli", "app.annotator.cli", "agent.cli"} <= set(graph["ballast.cli"])


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("files", "violation", "cycle"),
    [
        (  # the old app.extender.cli <-> agent.cli pair: a lazy import inside a function is still an edge
            {
                "app/extender/cli.py": "from agent import cli as agent_cli\n",
                "agent/cli.py": "def f():\n    from app.extender.cli import add_common\n",
            },
            "app.extender.cli imports agent.cli",
            ["agent.cli", "app.extender.cli", "agent.cli"],
        ),
        (  # relative imports resolve against their package, at any level
            {
                "common/a.py": "from . import b\n",
                "common/b.py": "from .sub.c import X\n",
                "common/sub/__init__.py": "",
                "common/sub/c.py": "from ..a import Y\n",
                "app/x.py": "import agent.y\n",
                "agent/y.py": "",
            },
            "app.x imports agent.y",
            ["common.a", "common.b", "common.sub.c", "common.a"],
        ),
        (  # a package that imports its submodule, which imports a sibling that imports the package's name
            {
                "common/p/__init__.py": "from common.p import m\n",
                "common/p/m.py": "import common.p\nfrom common.p import n\n",
                "common/p/n.py": "import common.p\n",
                "common/k.py": "import app.kube\n",
                "app/kube.py": "import common.k\n",
            },
            "common.k imports app.kube",
            ["app.kube", "common.k", "app.kube"],
        ),
        (  # the agent may read the shared model, never a program
            {
                "app/model/__init__.py": "",
                "app/model/policy.py": "import agent.z\n",
                "app/extender/__init__.py": "",
                "app/extender/cache.py": "",
                "agent/z.py": "from app.model import policy\nfrom app.extender import cache\n",
            },
            "agent.z imports app.extender.cache",
            ["agent.z", "app.model.policy", "agent.z"],
        ),
        (
            {"common/k.py": "import app.kube\n", "app/kube.py": "import common.k\n"},
            "common.k imports app.kube",
            ["app.kube", "common.k", "app.kube"],
        ),
    ],
)
def test_the_checks_catch_what_they_are_for(
    tmp_path: Path, files: dict[str, str], violation: str, cycle: list[str]
) -> None:
    for package in PACKAGES:
        _write(tmp_path, {f"{package}/__init__.py": ""})
    _write(tmp_path, files)
    graph = import_graph(tmp_path)
    assert any(violation in v for v in layering_violations(graph, tmp_path))
    assert find_cycle(graph) == cycle


def test_the_module_map_names_every_module() -> None:
    """The module map in docs/development.md names every module (a subpackage may be named as a whole,
    ``api/``), so every behaviour is one hop from it."""
    page = (ROOT / "docs" / "development.md").read_text()
    start = page.index("## Module map")
    block = page[page.index("```\n", start) : page.index("```\n", page.index("```\n", start) + 4)]
    missing = []
    for path in project_modules().values():
        rel = path.relative_to(ROOT)
        if path.name in ("__init__.py", "__main__.py") or "_pb2" in path.name:
            continue
        named = path.name in block
        subpackage = len(rel.parts) > 2 and (f"{rel.parts[-2]}/" in block)
        if not (named or subpackage):
            missing.append(str(rel))
    assert not missing, f"the module map in docs/development.md does not name: {missing}"
