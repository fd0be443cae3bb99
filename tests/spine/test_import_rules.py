"""The layering, read from the source: which packages may import which heavy libraries,
and the one package that writes SQL."""

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

RULES = {
    # library: the only places allowed to import it
    "torch": ["trainer/"],
    "transformers": ["trainer/"],
    "textual": ["rngdctl/tui/"],
    "textual_plotext": ["rngdctl/tui/"],
    "kubernetes": ["daemon/launchers/k8s/client.py"],
    # The trackers write TensorBoard's files and speak MLflow's REST API themselves
    # (daemon/trackers/): the packages are the tests' readers only.
    "tensorboard": [],
    "mlflow": [],
}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


SOURCES = sorted(p for package in ("rngdctl", "daemon", "trainer")
                 for p in (REPO / package).rglob("*.py"))


@pytest.mark.parametrize("library, allowed", RULES.items())
def test_heavy_libraries_are_imported_only_where_they_belong(library, allowed):
    offenders = [str(p.relative_to(REPO)) for p in SOURCES
                 if library in imports(p)
                 and not any(str(p.relative_to(REPO)).startswith(a) for a in allowed)]
    assert offenders == []


def test_the_contract_and_the_trainer_packages_import_no_torch():
    # Every package of the trainer too: importing trainer.engine.timing (the recipe does, at
    # its top) runs trainer/engine/__init__.py first, and the recipe imports torch lazily.
    packages = sorted(str(p.relative_to(REPO)) for p in (REPO / "trainer").rglob("__init__.py"))
    assert "trainer/__init__.py" in packages and len(packages) > 1
    for name in ("trainer/records.py", *packages):
        assert not imports(REPO / name) & {"torch", "transformers"}, name


# The statements and calls that are SQL: a string that starts like a statement, or a
# connection's execute. Only the store package (daemon/store/) may hold them.
SQL_STATEMENT = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|PRAGMA|BEGIN|COMMIT|ROLLBACK|WITH)\s")
SQL_CALLS = {"execute", "executemany", "executescript"}


def sql_written(path: Path) -> list[int]:
    """Lines of ``path`` that write SQL: a statement's text, an execute, a sqlite3.connect."""
    def is_sql(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and bool(SQL_STATEMENT.match(node.value))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            return False
        return node.func.attr in SQL_CALLS or (
            node.func.attr == "connect" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "sqlite3")

    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted(node.lineno for node in ast.walk(tree) if is_sql(node))


def test_sql_is_written_only_in_the_store_package():
    sources = SOURCES + sorted((REPO / "bench").rglob("*.py"))
    offenders = {str(p.relative_to(REPO)): lines for p in sources
                 if not str(p.relative_to(REPO)).startswith("daemon/store/")
                 and (lines := sql_written(p))}
    assert offenders == {}


def test_the_sql_rule_sees_a_query_written_outside_the_store(tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text('import sqlite3\nconn = sqlite3.connect("x.db")\n'
                     'rows = conn.execute(f"SELECT * FROM runs WHERE id = {1}")\n')
    assert sql_written(stray) == [2, 3, 3]


# === the layers ==============================================================
# rngdctl -> daemon -> the shared modules; the trainer apart. The shared modules sit at the top
# of the trainer's package (the contract, records.py, was there first; the trainer's own parts
# are its subpackages) but import no torch and nothing of the trainer's own: the daemon reads
# them, the trainer runs on them.
SHARED = {"trainer.records", "trainer.placement", "trainer.config", "trainer.devices",
          "trainer.errors", "trainer.ownership", "trainer.modelconfig", "trainer.footprint",
          "trainer.datafile", "trainer.datatable"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path, name: str | None = None) -> set[str]:
    """The project modules ``path`` (module ``name``) imports anywhere in it (a function's
    import counts: a layer is not kept by hiding its breach inside a function)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = {module_name(p) for p in SOURCES}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{up}.{base}" if base else up
            # ``from trainer import records`` imports the module trainer.records; ``from
            # trainer.records import Step`` a name of it.
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                         for a in node.names)
    out = set()
    for target in found:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name and target.split(".")[0] in ("rngdctl", "daemon",
                                                                   "trainer"):
            out.add(target)
    return out


def breaches(importer: str, allowed) -> dict[str, list[str]]:
    return {module_name(p): bad for p in SOURCES if module_name(p).startswith(importer)
            and (bad := sorted(n for n in project_imports(p) if not allowed(n)))}


def test_the_trainer_imports_nothing_of_the_daemon_or_the_cli():
    assert breaches("trainer", lambda n: n.startswith("trainer")) == {}


def test_the_daemon_imports_nothing_of_the_cli_and_only_the_shared_modules_of_the_trainer():
    assert breaches("daemon", lambda n: n.startswith("daemon") or n in SHARED) == {}


def test_the_shared_modules_import_no_torch_and_only_each_other():
    for name in SHARED:
        path = REPO / (name.replace(".", "/") + ".py")
        assert not imports(path) & {"torch", "transformers"}, name
        assert project_imports(path) <= SHARED, name


def test_the_layer_rule_sees_an_upward_import_inside_a_function(tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text("def f():\n    from daemon.store import Store\n    from . import data\n")
    assert project_imports(stray, "trainer.stray") == {"daemon.store", "trainer.data"}


# === no import cycles ========================================================
# A cycle was broken before by an import inside a function (or under TYPE_CHECKING): the
# graph counts those too, so a cycle is fixed by moving what both sides need, not hidden.


def with_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with the packages an import runs on its way: ``import a.b.c`` runs
    ``a/__init__.py`` and ``a/b/__init__.py`` first, except those the importer sits in (they
    are already running). So a module that imports ``daemon.stepmodel.stats.steps`` depends on
    everything ``daemon/stepmodel/stats/__init__.py`` imports."""
    out = {}
    for name, targets in graph.items():
        out[name] = set()
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                step = ".".join(parts[:i])
                if step in graph and step != name and not name.startswith(step + "."):
                    out[name].add(step)
    return out


def import_graph() -> dict[str, set[str]]:
    """Every module of rngdctl/, daemon/ and trainer/ and the project modules it imports."""
    return with_packages({module_name(p): project_imports(p) for p in SOURCES})


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of each group of modules that import each other (directly or through others),
    as ``a -> b -> a`` from the group's first module by name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(_shortest_cycle(graph, group) for group in groups)


def _shortest_cycle(graph: dict[str, set[str]], group: set[str]) -> str:
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first, inside the group, back to the start
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    return " -> ".join([*paths[node], start])
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle back to {start} in {sorted(group)}")


def test_no_module_imports_itself_through_others():
    assert cycles(import_graph()) == []


def test_the_cycle_rule_names_a_cycle_and_sees_one_through_a_package():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    # The old plots/statistics knot: the plots read one name of daemon/stepmodel/stats/steps.py, but
    # that import runs daemon/stepmodel/stats/__init__.py, which imports the seal, which imports the
    # plots.
    graph = {"daemon": set(), "daemon.run": set(), "daemon.run.plots": {"daemon.stepmodel.stats.steps"},
             "daemon.stepmodel.stats": {"daemon.stepmodel.stats.sealed", "daemon.stepmodel.stats.steps"},
             "daemon.stepmodel.stats.sealed": {"daemon.run.plots", "daemon.stepmodel.stats.steps"},
             "daemon.stepmodel.stats.steps": set()}
    assert cycles(graph) == []
    assert cycles(with_packages(graph)) == [
        "daemon.run.plots -> daemon.stepmodel.stats -> daemon.stepmodel.stats.sealed -> daemon.run.plots"]


def test_the_graph_holds_an_import_inside_a_function_and_under_type_checking(tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from rngdctl.tui.data.predictions import Predicted\n"
                     "def f():\n    from daemon.stepmodel.stats import seal\n")
    assert project_imports(stray, "rngdctl.tui.data.reader") == {
        "rngdctl.tui.data.predictions", "daemon.stepmodel.stats"}
    assert "daemon.scheduling.baselines" in import_graph()["daemon.scheduling.estimate"]  # in a function


def test_every_folder_of_modules_is_a_package_that_an_install_ships():
    # setuptools' find_packages (pyproject.toml) leaves out a folder without __init__.py.
    folders = {p.parent for p in SOURCES}
    assert sorted(str(f.relative_to(REPO)) for f in folders
                  if not (f / "__init__.py").exists()) == []


# === one name, one idea ======================================================
#: File names that repeat across rngdctl/, daemon/ and trainer/, and the folders that may hold
#: one: the same idea in parallel places. Any other repeated name fails.
PARALLEL_NAMES = {
    "__main__.py": {"rngdctl", "trainer"},  # each program's `python -m`
    "cli.py": {"rngdctl", "trainer"},  # each program's command line
    "errors.py": {"daemon", "trainer"},  # each side's errors
    # An idea's store part, its step-model or statistics part, its command, its view data and
    # its widget.
    "cards.py": {"daemon/store", "rngdctl/commands", "rngdctl/tui/data", "rngdctl/tui/widgets"},
    "events.py": {"daemon/store", "rngdctl/commands", "rngdctl/tui/widgets"},
    "history.py": {"rngdctl/tui/data", "rngdctl/tui/widgets"},
    "host.py": {"daemon/store", "rngdctl/tui/data"},
    "queue.py": {"daemon/store", "rngdctl/tui/data", "rngdctl/tui/widgets"},
    "runs.py": {"daemon/store", "daemon/stepmodel", "rngdctl/commands", "rngdctl/tui/data"},
    "steps.py": {"daemon/store", "daemon/stepmodel/stats"},
    # A daemon module and the command or widget over it.
    "agent.py": {"daemon/launchers/k8s", "rngdctl/commands"},
    "diff.py": {"daemon/run", "rngdctl/commands"},
    "doctor.py": {"daemon/launchers/k8s", "rngdctl/commands"},
    "holders.py": {"daemon/probes", "rngdctl/commands", "rngdctl/tui/widgets"},
    "nodes.py": {"daemon/gates", "rngdctl/tui/widgets"},
    "plan.py": {"daemon/scheduling", "rngdctl/commands"},
    "replicas.py": {"daemon/scheduling", "rngdctl/tui/widgets"},
}


def repeated_names(paths) -> dict[str, list[str]]:
    """Each file name held by more than one folder, past ``__init__.py`` and the parallel ones
    in their folders: the folders that hold it."""
    folders: dict[str, set[str]] = {}
    for path in paths:
        folders.setdefault(path.name, set()).add(str(path.parent.relative_to(REPO)))
    return {name: sorted(where) for name, where in folders.items()
            if len(where) > 1 and name != "__init__.py"
            and not where <= PARALLEL_NAMES.get(name, set())}


def test_no_two_modules_share_a_name_unless_they_are_one_idea_in_parallel_places():
    assert repeated_names(SOURCES) == {}


def named_as_their_package(paths) -> list[str]:
    """Modules named as the package that holds them (``trainer/data/data.py``): the name said
    twice, where the module's own idea has a name of its own."""
    return sorted(str(p.relative_to(REPO)) for p in paths if p.stem == p.parent.name)


def test_no_module_is_named_as_its_package():
    assert named_as_their_package(SOURCES) == []


def test_the_name_rule_sees_a_repeated_name():
    stray = [REPO / "daemon/run/plots.py", REPO / "rngdctl/tui/plots.py",
             REPO / "daemon/run/diff.py", REPO / "rngdctl/commands/diff.py"]
    assert repeated_names(stray) == {"plots.py": ["daemon/run", "rngdctl/tui"]}


def test_the_package_name_rule_sees_a_module_named_as_its_package():
    stray = [REPO / "trainer/data/data.py", REPO / "trainer/data/batches.py"]
    assert named_as_their_package(stray) == ["trainer/data/data.py"]
