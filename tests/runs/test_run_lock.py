"""Who may write a run directory, tried through the real CLI: a second process, two resumes at once, a
read-only file system, a sweep job resumed as a plain run, a fresh run refused by its config."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from eval.report import latest_output
from tests.conftest import ROOT, run_cli
from tests.runs.test_runlock import hold_lock

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

ONE_STEP = ["+curriculum=kk_ladder", "experiment=smoke", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 4}]",
            "eval.subsets=[2]"]


@pytest.fixture(scope="module")
def done_run(tmp_path_factory, cache_dir):
    """A finished one-step run (a resume of it validates nothing again and ends at once)."""
    run_dir = tmp_path_factory.mktemp("done") / "run"
    made = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}")
    assert made.returncode == 0, made.stderr[-3000:]
    return run_dir


def _copy(source, tmp_path):
    shutil.copytree(source, tmp_path / "run")
    return tmp_path / "run"


def _resume_records(run_dir) -> list[str]:
    return sorted(p.name for p in (run_dir / ".hydra").glob("resume-*"))


def test_a_refused_second_process_writes_nothing_into_the_live_run(done_run, tmp_path, cache_dir):
    run_dir = _copy(done_run, tmp_path)
    log = (run_dir / "__main__.log").read_bytes()
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_bytes()
    holder = hold_lock(run_dir)  # a live run in the directory
    try:
        refused = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"resume={run_dir}")
    finally:
        holder.kill()
        holder.wait()
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].endswith(
        f"already running (pid {holder.pid} holds {run_dir / 'run.lock'}); wait for it to finish, or stop it, "
        "before resuming")
    assert _resume_records(run_dir) == [], "no .hydra/resume-<time>/ of its own in the live run"
    assert (run_dir / "__main__.log").read_bytes() == log, "nothing appended to the live run's log"
    assert not (run_dir / "error.txt").exists(), "the live run is not marked failed"
    assert (run_dir / ".hydra" / "overrides.yaml").read_bytes() == overrides, "its overrides are its own"
    # the holder is dead: the kernel released its lock, and a resume goes through
    taken = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"resume={run_dir}")
    assert taken.returncode == 0, taken.stderr[-3000:]


def _files(run_dir) -> dict:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


# (an override the resume adds, the start of its one line): refused after Hydra's start, before the run goes on
REFUSED_RESUMES = [
    # another config, refused by the run once it holds the lock: wrote .hydra/resume-<time>/ and logged the run's size
    ("seed=3", "config error: resume={run}: the config differs from the one this run was started with"),
    # a check across keys, refused before the run opens: wrote .hydra/resume-<time>/
    ("eval.subsets=[2,9]", "config error: eval.subsets: unknown ppl 9"),
]


@pytest.mark.parametrize(("override", "line"), REFUSED_RESUMES, ids=[o for o, _ in REFUSED_RESUMES])
def test_a_resume_refused_after_hydras_start_changes_nothing_in_the_run(done_run, tmp_path, cache_dir, override,
                                                                        line):
    outputs = tmp_path / "out"
    run_dir = outputs / "runs" / "old"
    shutil.copytree(done_run, run_dir)  # its files keep their times: older than the sweep below
    sweep = outputs / "multirun" / "newer"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}\n")
    before = _files(run_dir)
    refused = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"resume={run_dir}", override)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].startswith(line.format(run=run_dir)), refused.stderr[-2000:]
    assert _resume_records(run_dir) == [], "no .hydra/resume-<time>/ in the refused run"
    assert _files(run_dir) == before, "every file as it was, the log too"
    assert latest_output(outputs) == sweep, "make report without RUN= still picks the newest output"


def test_two_resumes_of_one_run_at_once_one_wins_the_other_touches_nothing(done_run, tmp_path, cache_dir):
    run_dir = _copy(done_run, tmp_path)
    command = [sys.executable, "-m", "train", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"resume={run_dir}"]
    racers = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    outcomes = sorted((racer.wait(timeout=600), racer.stderr.read()) for racer in racers)
    (won, _), (lost, why) = outcomes
    assert won == 0 and lost != 0, [o[1][-2000:] for o in outcomes]
    assert "already running" in why.strip().splitlines()[-1]
    assert len(_resume_records(run_dir)) == 1, "the winner's record only"
    assert "already running" not in (run_dir / "__main__.log").read_text(), "the loser never logged there"


def _namespaces_available() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _namespaces_available(), reason="needs `unshare -rm` (user and mount namespaces) "
                                                        "to mount a read-only file system without privileges")
def test_a_resume_on_a_read_only_file_system_ends_naming_the_cause(done_run, tmp_path, cache_dir):
    mount = tmp_path / "ro"
    mount.mkdir()
    overrides = " ".join(f"'{o}'" for o in [*ONE_STEP, f"paths.cache_dir={cache_dir}", f"resume={mount}/run"])
    script = (f"mount -t tmpfs tmpfs {mount} && cp -r {done_run} {mount}/run && mount -o remount,ro {mount} && "
              f"cd {ROOT} && exec {sys.executable} -m train {overrides}")
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"{mount}/run: the run directory cannot be written: Read-only file system: {mount}/run/run.lock")


def test_a_sweep_job_resumes_as_a_plain_run_with_its_values_and_is_refused_by_name_without(tmp_path, cache_dir):
    sweep = run_cli("train", "-m", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={tmp_path}",
                    "seed=1,2")
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    job = tmp_path / "1"  # seed=2
    resumed = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", "seed=2", f"resume={job}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (job / ".hydra" / "overrides.yaml").read_text().count("seed=2") == 1, "the job's own record is kept"
    (job / "error.txt").write_text("an earlier attempt's error\n")
    other = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"resume={job}")  # seed 42: not the job's
    assert other.returncode != 0 and "Traceback" not in other.stderr
    line = other.stderr.strip().splitlines()[-1]  # one line, before the lock holder removed anything
    assert line.startswith(f"config error: resume={job}: the config differs from the one this run was started with")
    assert "in seed; resume with the values in" in line
    assert (job / "error.txt").read_text() == "an earlier attempt's error\n", "the refused resume removed nothing"


@pytest.mark.parametrize("override, line", [
    # a check across keys, made once the run has started: one line, and no folder left behind
    ("eval.subsets=[2,9]", "config error: eval.subsets: unknown ppl 9; puzzles exist for 2..8"),
    ("eval.subsets=[2,x]", "config error: eval.subsets: 'x' is not a number of people"),  # K&K's levels
    # a path, not a hub id: named as such, with no hub lookup and no traceback
    ("model.id=/nonexistent/dir", "config error: model.id: /nonexistent/dir is not a directory here"),
])
def test_a_fresh_run_refused_by_its_config_leaves_no_folder(tmp_path, cache_dir, override, line):
    run_dir = tmp_path / "run"
    extra = ["model.source=hub"] if override.startswith("model.id") else []
    refused = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", *extra, override, f"hydra.run.dir={run_dir}")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].startswith(line)
    assert "Traceback" not in refused.stderr
    assert not run_dir.exists()


def test_a_refused_config_leaves_a_folder_that_held_something_else(tmp_path, cache_dir):
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("kept")
    refused = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", "eval.subsets=[2,9]",
                      f"hydra.run.dir={run_dir}")
    assert refused.returncode != 0
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"], "only what Hydra wrote is removed"
