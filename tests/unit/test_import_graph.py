"""The package's layering, read from its source: every import counts, including those under
``if TYPE_CHECKING:`` and inside functions (docs/architecture.md says what may import what)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import trainjob_magics.engine as engine

PACKAGE = Path(__file__).resolve().parents[2] / "trainjob_magics"
TOP = "trainjob_magics"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str) -> Iterator[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    yield sub, None, node.lineno
                else:
                    yield target, alias.name, node.lineno


def _owner(target: str) -> str | None:
    """The project module an import reaches (None: outside the project)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _name, _line in _imports(module):
            owner = _owner(target) if target.startswith(TOP) else None
            if owner and owner != module:
                edges[module].add(owner)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def _in(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def test_every_module_is_read() -> None:
    assert len(MODULES) > 80
    assert f"{TOP}.engine.session" in MODULES and f"{TOP}.magics.magics" in MODULES


def test_no_import_cycles_at_all() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_magics_use_only_the_engines_public_names() -> None:
    public = set(engine.__all__)
    bad = []
    for module in MODULES:
        if not _in(module, f"{TOP}.magics"):
            continue
        for target, name, line in _imports(module):
            if not _in(target, f"{TOP}.engine"):
                continue
            if target != f"{TOP}.engine" or (name is not None and name not in public):
                bad.append(f"{module}:{line} imports {target}{'.' + name if name else ''}")
    assert bad == []


@pytest.mark.parametrize("room", ["engine", "localcluster"])
def test_engine_and_local_cluster_never_import_ipython(room: str) -> None:
    bad = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        if _in(module, f"{TOP}.{room}")
        for target, _name, line in _imports(module)
        if target.split(".")[0] in ("IPython", "ipywidgets", "ipykernel")
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("room", "forbidden"),
    [
        ("localcluster", ("engine", "magics")),
        ("engine", ("magics", "localcluster")),
        ("magics", ("localcluster",)),
    ],
)
def test_rooms_point_down(room: str, forbidden: tuple[str, ...]) -> None:
    bad = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        if _in(module, f"{TOP}.{room}")
        for target, _name, line in _imports(module)
        if any(_in(target, f"{TOP}.{f}") for f in forbidden)
    ]
    assert bad == []


def test_errors_and_result_are_leaves() -> None:
    edges = _graph()
    for leaf in ("engine.errors", "engine.result"):
        assert edges[f"{TOP}.{leaf}"] == set(), leaf


def test_no_private_name_crosses_a_module() -> None:
    bad = [
        f"{module}:{line} imports {name} from {target}"
        for module in MODULES
        for target, name, line in _imports(module)
        if name and name.startswith("_") and not name.startswith("__") and target.startswith(TOP)
    ]
    assert bad == []


# Rooms in the order they may import each other: a room imports only rooms to its left.
ENGINE_ORDER = [
    ("errors", "result"),
    ("notify", "validation"),
    ("kube",),
    ("exec",),
    ("kueue",),
    ("trainjob",),
    ("files",),
    ("python",),
    ("forward",),
    ("detach",),
    ("inventory",),
    ("session",),
    ("connecting",),
]


def _engine_rank(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != [TOP, "engine"] or len(parts) < 3:
        return None
    return next((i for i, names in enumerate(ENGINE_ORDER) if parts[2] in names), None)


def test_engine_rooms_point_down() -> None:
    ranked = [m for m in MODULES if m.startswith(f"{TOP}.engine.")]
    assert all(_engine_rank(m) is not None for m in ranked), "every engine room has a rank"
    bad = []
    for module, targets in _graph().items():
        mine = _engine_rank(module)
        if mine is None:
            continue
        for target in targets:
            theirs = _engine_rank(target)
            if theirs is not None and theirs >= mine and not _same_room(module, target):
                bad.append(f"{module} imports {target}")
    assert bad == []


def _same_room(a: str, b: str) -> bool:
    return a.split(".")[:3] == b.split(".")[:3]


def test_views_import_no_command_module_registry_or_engine() -> None:
    bad = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if _in(module, f"{TOP}.magics.views")
        for target in targets
        if not _in(target, f"{TOP}.magics.views")
    ]
    assert bad == []
