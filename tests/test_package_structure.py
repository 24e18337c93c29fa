"""The package's shape (issue 16): no import cycle between its modules, counting imports inside
functions too (so none is hidden by importing late), and one owner per concept."""

from __future__ import annotations

import ast
from pathlib import Path

import diffgrpo

PACKAGE = Path(diffgrpo.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def imports(name: str, path: Path, known: set[str], runtime_only: bool = False) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its source (``runtime_only``:
    leaving out the imports under ``if TYPE_CHECKING:``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t != "diffgrpo":
                out.add(t)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def package_graph() -> dict[str, set[str]]:
    mods = modules()
    graph = {n: imports(n, p, set(mods)) for n, p in mods.items()}
    # a package's own submodules are not a cycle through it: `train.run` importing `train.levels`
    # runs `train/__init__`, which imports `train.run` only after `train.run` started importing
    for pkg in [n for n, p in mods.items() if p.name == "__init__.py"]:
        for n in graph:
            if n.startswith(pkg + "."):
                graph[n].discard(pkg)
    return graph


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(package_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = package_graph()
    assert "diffgrpo.params" in graph["diffgrpo.select"]  # the graph is the package's own


def test_the_stage_modules_do_not_import_the_trainer():
    """The probe, select, evaluate and analyze stages run without importing TRL: they read a
    run through :mod:`diffgrpo.store.run_folder`, not :mod:`diffgrpo.train`."""
    graph = package_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for m in graph[todo.pop()] - seen:
                seen.add(m)
                todo.append(m)
        return seen

    for stage in ("diffgrpo.probe", "diffgrpo.select", "diffgrpo.evaluate", "diffgrpo.analysis.report", "diffgrpo.params"):
        assert not {m for m in reach(stage) if m.startswith("diffgrpo.train")}, stage


#: The layers of the package, lowest first (docs/architecture.md): a module imports only from its
#: own layer or a lower one, never back up. The longest matching prefix places a module.
LAYERS = [
    ("foundation", ["diffgrpo.registry", "diffgrpo.store.artifacts", "diffgrpo.progress", "diffgrpo.errors",
                    "diffgrpo.processes"]),
    ("extension points", ["diffgrpo.tasks", "diffgrpo.policies", "diffgrpo.rewards", "diffgrpo.online"]),
    ("config", ["diffgrpo.params"]),
    ("models", ["diffgrpo.models"]),
    ("store", ["diffgrpo.store"]),
    ("statistics", ["diffgrpo.stats", "diffgrpo.analysis.tables", "diffgrpo.analysis.uncertainty",
                    "diffgrpo.analysis.learnability"]),
    ("stages", ["diffgrpo.probe", "diffgrpo.select", "diffgrpo.train", "diffgrpo.evaluate"]),
    ("report", ["diffgrpo.analysis"]),
    ("runner", ["diffgrpo.study"]),
]


def layer_of(module: str) -> int:
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
                if module == p or module.startswith(p + ".")), default=None)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return best[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
                  for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m))


def test_no_import_runs_back_up_a_layer():
    mods = modules()
    graph = {n: imports(n, p, set(mods), runtime_only=True) for n, p in mods.items() if n != "diffgrpo"}
    assert upward_imports(graph) == []


def test_the_layer_check_sees_an_upward_import():
    assert upward_imports({"diffgrpo.params.schema": {"diffgrpo.analysis.papers"}}) == [
        "diffgrpo.params.schema (config) imports diffgrpo.analysis.papers (report)"]
    assert upward_imports({"diffgrpo.study.plan": {"diffgrpo.params"}}) == []


def test_the_top_level_holds_the_extension_points_and_a_handful_of_packages():
    top = sorted(p.name for p in PACKAGE.iterdir() if (p.suffix == ".py" or (p / "__init__.py").exists()))
    assert [t for t in top if t.endswith(".py")] == ["__init__.py", "errors.py", "evaluate.py", "policies.py",
                                                     "probe.py", "processes.py", "progress.py", "registry.py",
                                                     "rewards.py", "select.py"]
    assert len([t for t in top if not t.endswith(".py")]) <= 9  # stats: the statistics layer's own home (issue 44)


def test_no_function_in_the_library_is_over_80_lines():
    long = [f"{p.relative_to(PACKAGE)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in PACKAGE.rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80]
    assert long == []


def test_a_notebook_s_plan_cell_loads_neither_the_runner_nor_an_executor():
    """The stage notebooks' plan cell imports :mod:`diffgrpo.study.plan` and :mod:`diffgrpo.study.graph`
    only: in a fresh interpreter that loads no runner, no Slurm executor, no submitit, no papermill and
    not TRL or PEFT (the trainer). The package's lazy names (``diffgrpo.study.jobs``, ``.run_study``) still resolve."""
    import subprocess
    import sys

    code = ("import sys, diffgrpo.study.plan, diffgrpo.study.graph\n"
            "print(sorted(m for m in sys.modules if m in ('diffgrpo.study.runner', 'diffgrpo.study.slurm')\n"
            "             or m.split('.')[0] in ('submitit', 'papermill', 'trl', 'peft')))\n"
            "from diffgrpo import study\n"
            "assert study.jobs is diffgrpo.study.graph.jobs and study.campaign_jobs is diffgrpo.study.graph.campaign_jobs\n"
            "assert 'diffgrpo.study.runner' not in sys.modules  # a graph name does not load the runner\n"
            "from diffgrpo.study import runner\n"
            "assert study.run_study is runner.run_study and study.placement is runner.placement\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
