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


def test_the_contract_and_the_trainer_package_import_no_torch():
    for name in ("trainer/__init__.py", "trainer/records.py"):
        assert not imports(REPO / name) & {"torch", "transformers"}


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
# rngdctl -> daemon -> the shared modules; the trainer apart. The shared modules sit in the
# trainer's package (the contract, records.py, was there first) but import no torch and
# nothing of the trainer's own: the daemon reads them, the trainer runs on them.
SHARED = {"trainer.records", "trainer.placement", "trainer.config", "trainer.devices",
          "trainer.errors"}


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
