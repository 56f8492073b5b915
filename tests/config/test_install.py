"""A plain `pip install -e .` (no peft extra) runs the ladder, and the console shows the run, not library noise; `make
test`'s xdist mode builds a module's fixtures once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli

# A `None` in sys.modules makes `import peft` fail and `importlib.util.find_spec("peft")` return
# None, exactly as when the package is not installed (transformers, TRL and accelerate all ask so).
HIDE_PEFT = "import sys\nsys.modules['peft'] = None\n"

# What the libraries print on every stage unless quieted (core.models.quiet_libraries); and vLLM's import,
# which a run that does not use it (the tiny model's heads of 16 are not vLLM's) keeps unloaded
# (core.models.defer_vllm).
NOISE = ("`gradient_checkpointing` is deprecated", "`is_gradient_checkpointing` is deprecated", "Loading weights",
         "Writing model shards", "Map:", "Filter:", "Triton is installed")


@pytest.fixture
def without_peft(tmp_path) -> dict:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE_PEFT)
    env = {"PYTHONPATH": str(site)}
    hidden = subprocess.run([sys.executable, "-c", "import peft"], cwd=ROOT, capture_output=True, text=True,
                            env={"PATH": "", **env})
    assert "ModuleNotFoundError" in hidden.stderr, "peft is hidden in the subprocesses of this test"
    return env


@pytest.mark.run
def test_the_smoke_ladder_runs_without_peft_and_its_console_is_the_run(tmp_path, cache_dir, without_peft):
    run_dir = tmp_path / "run"
    done = run_cli("train", "+curriculum=kk_ladder", "experiment=smoke", f"paths.cache_dir={cache_dir}",
                   f"hydra.run.dir={run_dir}", env=without_peft)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [s["status"] for s in json.loads((run_dir / "run.json").read_text())["stages"]] == ["done"] * 5
    console = done.stdout + done.stderr
    assert "validation after 6ppl" in console and "stage 5/5 · 6ppl · 2 steps" in console, "the tables and banners"
    assert [noise for noise in NOISE if noise in console] == []


@pytest.mark.run
def test_lora_without_peft_names_the_extra_before_anything_is_written(tmp_path, cache_dir, without_peft):
    run_dir = tmp_path / "run"
    refused = run_cli("train", "+curriculum=kk_ladder", "experiment=smoke", f"paths.cache_dir={cache_dir}",
                      "model.lora={r: 4}", f"hydra.run.dir={run_dir}", env=without_peft)
    assert refused.returncode != 0
    assert "config error: model.lora: LoRA needs the peft extra: pip install -e '.[peft]'" in refused.stderr
    assert not (run_dir / "run.json").exists()


def test_the_license_is_an_spdx_string_so_setuptools_does_not_warn_on_install():
    # setuptools >= 77 warns "`project.license` as a TOML table is deprecated" on every build of a table
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert project["build-system"]["requires"] == ["setuptools>=77"]  # the first to read an SPDX string


PROBE = '''
import os
import pytest

@pytest.fixture(scope="module")
def built():
    with open(os.environ["SETUPS"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")

@pytest.mark.parametrize("i", range(8))
def test_uses_the_module_fixture(built, i):
    pass
'''


def test_make_tests_xdist_mode_builds_a_modules_fixtures_once(tmp_path):
    """`make test` shares the tests out over cores a module at a time, so a module fixture (many run a whole
    curriculum) is built once: split over two workers, each would build it. `--dist loadgroup` with marks fails
    this under pytest 9 (xdist 3.8 writes the group where pytest 9 no longer reads it)."""
    [mode] = re.findall(r"^XDIST \?=.*--dist (\w+)", (ROOT / "Makefile").read_text(), flags=re.M)
    (tmp_path / "test_probe.py").write_text(PROBE)
    setups = tmp_path / "setups.txt"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", mode,
                           "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path / "test_probe.py")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "SETUPS": str(setups)})
    assert done.returncode == 0, done.stdout[-2000:]
    assert len(setups.read_text().split()) == 1, f"--dist {mode}: the module fixture was built on {setups.read_text()}"
