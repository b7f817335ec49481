"""The layering inside the one ``ballast`` package, floor by floor, each importing only the floors below:

- ``contract``: what crosses the cluster boundary (annotations, NodeLoad, topology result, quantities,
  times, reading a pod); pure, imports nothing else of Ballast;
- ``kube``: the API client and reflector, on the contracts;
- ``program``: what every program shares (flags, logs, health, metrics, leader election);
- ``model``: the pure load model (policy, verdicts, estimates), on the contracts only;
- the programs ``extender``, ``annotator``, ``rebalancer`` and ``agent``: on all of the above, never on
  each other;
- the ``ballast`` command (``ballast.cli``, ``__main__``), which composes the programs;
- ``testing``: the harnesses of ``tests/`` and ``bench/``, which may import anything and which nothing
  else imports.

Every module under the package is parsed (``ast``, nothing imported), every import statement counted,
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
PACKAGES = ("ballast",)
PROGRAMS = ("extender", "annotator", "rebalancer", "agent")
BELOW = ("contract", "kube", "program", "model")
ALLOWED: dict[str, set[str]] = {
    "contract": set(),
    "kube": {"contract"},
    "program": {"contract", "kube"},
    "model": {"contract"},
    **{program: set(BELOW) for program in PROGRAMS},
    "cli": {*BELOW, *PROGRAMS},
    "testing": {*BELOW, *PROGRAMS, "cli"},
}
"""Each floor (``ballast.<floor>``) -> the other floors it may import. The package's own ``__init__`` and
``__main__`` count as ``cli``."""


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
    nothing (``ballast.agent.cri._stubs`` extends ``ballast.agent.cri.__path__`` that way). A package
    importing its own
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


def floor_of(module: str) -> str:
    """``ballast.<floor>...`` -> the floor; the package itself and ``__main__`` are the command's floor."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "cli"
    return parts[1]


def layering_violations(graph: Mapping[str, Mapping[str, int]], root: Path = ROOT) -> list[str]:
    out = []
    for module, edges in sorted(graph.items()):
        own = floor_of(module)
        for target, line in sorted(edges.items()):
            theirs = floor_of(target)
            if theirs != own and theirs not in ALLOWED.get(own, set()):
                where = project_modules(root)[module].relative_to(root)
                out.append(f"{where}:{line}: {module} imports {target}")
    return out


def test_the_floors_import_only_downwards() -> None:
    """contract imports nothing of Ballast; kube only contracts; the model only contracts; no program
    imports another; only the command composes the programs; nothing but testing imports testing."""
    graph = import_graph()
    assert {floor_of(m) for m in graph} == set(ALLOWED)
    bad = layering_violations(graph)
    assert not bad, "imports across the floors:\n" + "\n".join(bad)


def test_the_layering_check_catches_a_crossing() -> None:
    assert (
        layering_violations({"ballast.agent.load.reporter": {"ballast.model.policy": 3, "ballast.model": 4}})
        == []
    )
    (bad,) = layering_violations({"ballast.agent.run": {"ballast.rebalancer.cache": 1}})
    assert bad.endswith("ballast.agent.run imports ballast.rebalancer.cache")
    (bad,) = layering_violations({"ballast.model.load": {"ballast.kube.client": 2}})
    assert bad.endswith("ballast.model.load imports ballast.kube.client")
    (bad,) = layering_violations({"ballast.extender.main": {"ballast.testing.fakekube": 2}})
    assert bad.endswith("ballast.extender.main imports ballast.testing.fakekube")


MODEL = "ballast.model"


def test_the_programs_build_on_the_model() -> None:
    graph = import_graph()
    for program in ("ballast.extender", "ballast.annotator", "ballast.rebalancer", "ballast.agent"):
        assert any(floor_of(t) == "model" for m, e in graph.items() if m.startswith(program) for t in e)


NUMA = "ballast.extender.numa"
NUMA_PURE = (
    "ballast.extender.numa.crane",
    "ballast.extender.numa.community",
    "ballast.extender.numa.community_assumed",
)
"""The NUMA arithmetic: tested with tables, so it reads no cluster and speaks no HTTP."""
NUMA_MAY_IMPORT = (
    NUMA,
    "ballast.extender.bind",
    "ballast.extender.wire",
    MODEL,
    "ballast.contract",
    "ballast.kube",
)
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
        allowed = (*NUMA_PURE, "ballast.contract") if module in NUMA_PURE else NUMA_MAY_IMPORT
        for target in sorted(edges):
            if not _within(target, allowed) or (module in NUMA_PURE and target == "ballast.kube.client"):
                out.append(f"{module} imports {target}")
    return out


def test_the_numa_package_stays_beside_the_verbs() -> None:
    graph = import_graph()
    assert {m for m in graph if _within(m, (NUMA,))} >= {NUMA, *NUMA_PURE}
    bad = numa_violations(graph)
    assert not bad, "NUMA imports past its layer:\n" + "\n".join(bad)


def test_the_numa_check_catches_a_crossing() -> None:
    graph = {
        "ballast.extender.numa.crane": {"ballast.kube.client": 1, "ballast.contract.pod": 2},
        "ballast.extender.numa.check": {"ballast.extender.cache": 3, "ballast.extender.numa.crane": 4},
        "ballast.extender.numa.crane_bind": {"ballast.extender.bind": 5, "ballast.kube.client": 6},
    }
    assert numa_violations(graph) == [
        "ballast.extender.numa.check imports ballast.extender.cache",
        "ballast.extender.numa.crane imports ballast.kube.client",
    ]


def test_the_module_graph_has_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_every_package_is_seen() -> None:
    """The walk reads every package, function-level imports included (else the two tests prove nothing)."""
    graph = import_graph()
    assert {m.partition(".")[0] for m in graph} == set(PACKAGES)
    assert {floor_of(m) for m in graph} == set(ALLOWED)
    assert "ballast.agent.load.loop" in graph["ballast.agent.run"]  # imported inside run
    assert {"ballast.extender.cli", "ballast.annotator.cli", "ballast.agent.cli"} <= set(graph["ballast.cli"])


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("files", "violation", "cycle"),
    [
        (  # two programs' commands: a lazy import inside a function is still an edge
            {
                "ballast/extender/cli.py": "from ballast.agent import cli as agent_cli\n",
                "ballast/agent/cli.py": "def f():\n    from ballast.extender.cli import add_common\n",
            },
            "ballast.extender.cli imports ballast.agent.cli",
            ["ballast.agent.cli", "ballast.extender.cli", "ballast.agent.cli"],
        ),
        (  # relative imports resolve against their package, at any level
            {
                "ballast/contract/a.py": "from . import b\n",
                "ballast/contract/b.py": "from .sub.c import X\n",
                "ballast/contract/sub/__init__.py": "",
                "ballast/contract/sub/c.py": "from ..a import Y\n",
                "ballast/model/x.py": "import ballast.agent.y\n",
                "ballast/agent/y.py": "",
            },
            "ballast.model.x imports ballast.agent.y",
            ["ballast.contract.a", "ballast.contract.b", "ballast.contract.sub.c", "ballast.contract.a"],
        ),
        (  # a package that imports its submodule, which imports a sibling that imports the package's name
            {
                "ballast/contract/p/__init__.py": "from ballast.contract.p import m\n",
                "ballast/contract/p/m.py": "import ballast.contract.p\nfrom ballast.contract.p import n\n",
                "ballast/contract/p/n.py": "import ballast.contract.p\n",
                "ballast/contract/k.py": "import ballast.kube.x\n",
                "ballast/kube/x.py": "import ballast.contract.k\n",
            },
            "ballast.contract.k imports ballast.kube.x",
            ["ballast.contract.k", "ballast.kube.x", "ballast.contract.k"],
        ),
        (  # the agent may read the shared model, never another program
            {
                "ballast/model/policy.py": "import ballast.agent.z\n",
                "ballast/extender/cache.py": "",
                "ballast/agent/z.py": (
                    "from ballast.model import policy\nfrom ballast.extender import cache\n"
                ),
            },
            "ballast.agent.z imports ballast.extender.cache",
            ["ballast.agent.z", "ballast.model.policy", "ballast.agent.z"],
        ),
        (  # nothing but the harnesses imports the harnesses
            {
                "ballast/kube/k.py": "import ballast.testing.t\n",
                "ballast/testing/t.py": "import ballast.kube.k\n",
            },
            "ballast.kube.k imports ballast.testing.t",
            ["ballast.kube.k", "ballast.testing.t", "ballast.kube.k"],
        ),
    ],
)
def test_the_checks_catch_what_they_are_for(
    tmp_path: Path, files: dict[str, str], violation: str, cycle: list[str]
) -> None:
    for package in ("ballast", *(f"ballast/{floor}" for floor in ALLOWED if floor != "cli")):
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
