"""The layering, read from the source: which packages may import which heavy libraries."""

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

RULES = {
    # library: the only places allowed to import it
    "torch": ["trainer/"],
    "transformers": ["trainer/"],
    "textual": ["rngdctl/tui/"],
    "textual_plotext": ["rngdctl/tui/"],
    "kubernetes": ["daemon/k8s/"],
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
