"""The layers hold: every import in the product's packages, read from the source (ast), points down.

core/ (shared plumbing) stands below everything, and conf/ (the config root and its schema) just above
it; curriculum/ (the task) imports neither train/ nor eval/; eval/ works on any checkpoint and run
folder without the trainer, so never imports train/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package -> the product packages it must not import
FORBIDDEN = {
    "core": {"conf", "curriculum", "train", "eval"},
    "conf": {"curriculum", "train", "eval"},
    "curriculum": {"train", "eval"},
    "eval": {"train"},
}


def imported_packages(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in `source`, at any depth (also inside functions).

    >>> imported_packages("import os\\nfrom train.run.runner import x\\ndef f():\\n    import eval.report as r\\n")
    [(1, 'os'), (2, 'train'), (4, 'eval')]
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.partition(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.partition(".")[0]))
    return sorted(found)


def layer_violations(root: Path) -> list[str]:
    """`path:line imports package` for every import that breaks FORBIDDEN under `root`."""
    found = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((root / package).rglob("*.py")):
            for line, imported in imported_packages(path.read_text()):
                if imported in banned:
                    found.append(f"{path.relative_to(root)}:{line} imports {imported}")
    return found


def test_no_import_points_up_a_layer():
    assert layer_violations(ROOT) == []


@pytest.mark.parametrize(("path", "source", "expected"), [
    # the shared layer reaching into the trainer: the cycle this test exists to stop
    ("core/models.py", "from train.run.runner import CurriculumRun\n", ["core/models.py:1 imports train"]),
    # the task importing the grader (as curriculum/sft.py once did)
    ("curriculum/tasks/kk/planted.py", "from eval.generation import prompt_text\n",
     ["curriculum/tasks/kk/planted.py:1 imports eval"]),
    # eval importing the trainer lazily, inside a function, is still an import
    ("eval/validation.py", "def f():\n    import train.models\n", ["eval/validation.py:2 imports train"]),
    # downward imports are the point of the layers
    ("train/run/runner.py", "from core.models import resolve_model\nfrom eval.validation import validate\n", []),
    ("eval/report/run.py", "from core.rundir.files import RUN_JSON\nfrom curriculum.tasks.kk import solve\n", []),
])
def test_a_planted_import_is_found(tmp_path, path, source, expected):
    planted = tmp_path / path
    planted.parent.mkdir(parents=True)
    planted.write_text(source)
    assert layer_violations(tmp_path) == expected
