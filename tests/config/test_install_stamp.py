"""`make`'s install stamp records what was installed, so a target that only needs the env (`make report`) installs
nothing when pyproject.toml is only newer (a fresh clone beside VENV=<an installed env>), and installs when what
the stamp records differs, or there is none (a fresh machine). Tried with `make -n` on a copy of the Makefile."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _dry_run(folder, target: str) -> str:
    done = subprocess.run(["make", "-n", target, "VENV=env"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def clone(tmp_path):
    """A copy of the Makefile and pyproject.toml, and the ID a fresh install there would record."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "env").mkdir()
    recorded = [line for line in _dry_run(tmp_path, "install").splitlines() if line.startswith("echo 'deps-")]
    assert len(recorded) == 1, "the install writes what it installed into the stamp"
    return tmp_path, recorded[0].split("'")[1]


def _stamp(folder, text: str, *, newer_than_pyproject: bool) -> None:
    stamp = folder / "env" / ".installed"
    stamp.write_text(text)
    pyproject = (folder / "pyproject.toml").stat().st_mtime
    when = pyproject + 60 if newer_than_pyproject else pyproject - 60
    os.utime(stamp, (when, when))


# (what the stamp holds, whether it is newer than pyproject.toml, whether `make report` installs first)
STAMPS = [
    # what this pyproject.toml installs, in a fresh clone whose pyproject.toml is newer: no reinstall (a
    # clone's file times say nothing of what was installed)
    ("{id}\n", False, False),
    # the same, the stamp newer: installed
    ("{id}\n", True, False),
    # another dependency list (or extras) recorded: install, however new the stamp
    ("deps-0000000000000000\n", True, True),
    # an empty stamp (it records no dependency list): the file times decide, older than pyproject.toml installs
    ("", False, True),
    # ...newer than it does not
    ("", True, False),
]


@pytest.mark.parametrize(("text", "newer", "installs"), STAMPS, ids=["same-older", "same-newer", "other", "empty-older",
                                                                      "empty-newer"])
def test_make_report_installs_only_when_what_was_installed_changed(clone, text, newer, installs):
    folder, install_id = clone
    _stamp(folder, text.format(id=install_id), newer_than_pyproject=newer)
    commands = _dry_run(folder, "report")
    assert ("pip install" in commands) is installs, commands
    assert "-m eval.report" in commands


def test_a_fresh_machine_installs_from_scratch(clone):
    folder, _ = clone
    commands = _dry_run(folder, "report")  # no stamp, no venv
    assert "python3 -m venv env" in commands and "pip install" in commands


def test_a_comment_in_pyproject_changes_nothing_a_dependency_does(clone):
    folder, install_id = clone
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("dependencies = [", "# a note\ndependencies = [", 1))
    _stamp(folder, install_id, newer_than_pyproject=False)
    assert "pip install" not in _dry_run(folder, "report"), "a comment is no dependency"
    pyproject.write_text(pyproject.read_text().replace("dependencies = [", 'dependencies = [\n  "six",', 1))
    assert "pip install" in _dry_run(folder, "report"), "a new dependency installs"
