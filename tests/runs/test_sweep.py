"""Hydra multirun over reward weights: one complete run directory per job, a failed job that does
not kill the sweep, and the Optuna / SLURM configs composing as documented."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conf.sweep_end import job_failed, job_folders
from core.checks import ConfigError
from tests.conftest import ROOT, run_cli


@pytest.mark.run
def test_two_value_sweep_plus_a_failing_job(tmp_path, cache_dir):
    sweep_dir = tmp_path / "sweep"
    # -1: a weight of the right type that the job's own checks refuse (a negative weight); a value of the
    # wrong type ("oops") is the schema's to refuse while Hydra composes that job, which ends the sweep
    done = run_cli("train", "-m", "+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=1",
                   f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep_dir}",
                   "reward.weights.format=0,0.5,-1")
    # a failed job does not stop the sweep, but the sweep's exit status says one failed (not 0)
    assert done.returncode == 1, done.stderr[-3000:]
    jobs = {}
    for job in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()):
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        jobs[overrides.split("reward.weights.format=")[1].split()[0]] = job
    assert set(jobs) == {"0", "0.5", "-1"}
    for value in ("0", "0.5"):
        manifest = json.loads((jobs[value] / "run.json").read_text())
        assert manifest["status"] == "done" and [s["status"] for s in manifest["stages"]] == ["done"] * 5
        assert 0.0 <= manifest["objective"] <= 1.0
        assert (jobs[value] / "metrics.jsonl").exists() and (jobs[value] / "validation.jsonl").exists()
        assert OmegaConf.load(jobs[value] / "config.yaml").reward.weights.format == float(value)
    assert "reward.weights.format" in (jobs["-1"] / "error.txt").read_text()
    assert not (jobs["-1"] / "run.json").exists(), "the bad job failed before anything was trained"
    # the sweep ends by counting its failures and naming its own report (every job compared), not its last job's,
    # as the command a pip install runs (make's target would first check the whole install)
    assert done.stdout.strip().splitlines()[-2:] == [f"sweep done: {sweep_dir} (3 jobs, 1 failed)",
                                                     f"report of every job compared: python -m eval.report {sweep_dir}"]
    assert done.stderr.strip().splitlines()[-1] == f"1 of 3 jobs failed: {jobs['-1']} (each holds its error.txt)"


def test_slurm_launcher_config_resolves(make_cfg):
    cfg = make_cfg("+curriculum=kk_ladder", "hydra/launcher=submitit_slurm_gpu", "hydra.launcher.partition=gpu",
                   hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.gpus_per_node, launcher.nodes, launcher.tasks_per_node) == (1, 1, 1)
    assert launcher.partition == "gpu" and launcher.timeout_min == 720


def test_optuna_search_space_over_reward_weights(make_cfg):
    cfg = make_cfg("+curriculum=kk_ladder", "+hparams_search=reward_optuna", hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"reward.weights.format", "reward.weights.answer", "reward.weights.overlong"}


def offline_runs(job) -> dict[str, bytes]:
    """The wandb offline runs in a job folder, `offline-run-<YYYYMMDD_HHMMSS>-<run id>`: {run id: its record file}."""
    prefix = len("offline-run-20260101_000000-")
    runs = (job / "wandb").glob("offline-run-*")
    return {run.name[prefix:]: next(run.glob("run-*.wandb")).read_bytes() for run in runs}


@pytest.mark.run
def test_two_sweeps_never_share_a_wandb_run_and_each_job_is_named_and_grouped(tmp_path, cache_dir):
    # the same sweep twice: an id of job number and config hash alone ("0-<config hash>") would repeat, and online
    # with resume="allow" the second sweep's jobs would be attached to the first sweep's runs
    ids = {}
    for sweep in ("a", "b"):
        sweep_dir = tmp_path / "multirun" / sweep
        done = run_cli("train", "-m", "+curriculum=kk_mixed", "experiment=smoke", "limits.max_steps=1",
                       "logger=wandb", f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep_dir}", "seed=1,2",
                       env={"WANDB_MODE": "offline"})
        assert done.returncode == 0, done.stderr[-3000:]
        for job, seed in (("0", "1"), ("1", "2")):
            tracker_id = json.loads((sweep_dir / job / "run.json").read_text())["tracker_id"]
            runs = offline_runs(sweep_dir / job)
            assert list(runs) == [tracker_id], "one offline wandb run per job, under the id run.json keeps"
            record = runs[tracker_id]
            # name: the job and what its sweep varies; group: the sweep folder; job type: curriculum
            assert f"{job}: seed={seed}".encode() in record and f"multirun/{sweep}".encode() in record
            assert b"curriculum" in record and f"multirun/{'b' if sweep == 'a' else 'a'}".encode() not in record
            ids[(sweep, job)] = tracker_id
    assert len(set(ids.values())) == 4, ids


def killed_when(args: list[str], ready: Path) -> None:
    """Run `python -m <args>` and SIGKILL it once `ready` exists (a sweep's job has started its run)."""
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not ready.exists():
        assert proc.poll() is None, "the sweep ended before the moment to kill it"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.run
def test_a_killed_gsm8k_search_resumes_its_killed_trial_in_its_folder_and_runs_to_n_trials(tmp_path, cache_dir):
    optuna = pytest.importorskip("optuna")
    sweep_dir = tmp_path / "sweep"
    search = ["train", "-m", "+curriculum=gsm8k_grpo", "+hparams_search=gsm8k_reward_optuna", "experiment=smoke",
              f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep_dir}"]

    def study():
        return optuna.load_study(study_name="gsm8k_reward_weights", storage=f"sqlite:///{sweep_dir / 'optuna.db'}")

    killed_when([*search, "hydra.sweeper.n_trials=2"], ready=sweep_dir / "1" / "run.json")  # trial 1 mid-run
    assert [t.state.name for t in study().trials] == ["COMPLETE", "RUNNING"]
    job0 = (sweep_dir / "0" / "run.json").read_bytes()
    # the same folder and command, 3 trials in all: not 3 more, beside a trial RUNNING for ever and its half job
    resumed = run_cli(*search, "hydra.sweeper.n_trials=3")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"trial 1 (job {sweep_dir / '1'}) was left running by a sweep that was killed: resuming its run in its "
            "own folder") in resumed.stdout
    assert "2 of n_trials=3 trials finished; running 1 more" in resumed.stdout
    trials = study().trials
    assert [(t.number, t.state.name) for t in trials] == [(0, "COMPLETE"), (1, "COMPLETE"), (2, "COMPLETE")]
    assert sorted(p.name for p in sweep_dir.iterdir() if p.name.isdigit()) == ["0", "1", "2"], "a folder a trial"
    for trial in trials:  # each trial is the job of its number: its weights and its objective
        job = sweep_dir / str(trial.number)
        manifest = json.loads((job / "run.json").read_text())
        assert manifest["status"] == "done" and manifest["objective"] == trial.value
        weights = OmegaConf.load(job / "config.yaml").reward.weights
        assert {f"reward.weights.{k}": v for k, v in weights.items()} == trial.params
    assert list((sweep_dir / "1" / ".hydra").glob("resume-*")), "trial 1's run was resumed (its own record kept)"
    assert trials[2].params != trials[0].params, "a resumed sampler does not propose the first point again"
    assert (sweep_dir / "0" / "run.json").read_bytes() == job0, "a finished job is left as it was"


def a_stored_study(sweep_dir: Path) -> str:
    """A sweep folder as a first run of the search leaves it: a study of one finished trial, its job folder 0."""
    import optuna

    storage = f"sqlite:///{sweep_dir / 'optuna.db'}"
    (sweep_dir / "0").mkdir(parents=True)
    study = optuna.create_study(study_name="gsm8k_reward_weights", storage=storage, direction="maximize")
    trial = study.ask()
    trial.suggest_float("reward.weights.correctness", 0.5, 4.0)
    study.tell(trial, 0.25)
    return storage


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


@pytest.mark.parametrize("damage, refusal", [
    # SQLite opens an empty file as a new database: the search silently started over, numbering over job 0
    (lambda db: truncate(db, 0), r"optuna.db: empty \(0 bytes\): the sweep's study is gone"),
    # cut inside its header: named in one line, not an 89-line SQLAlchemy traceback ("file is not a database")
    (lambda db: truncate(db, 10), r"optuna.db: not an SQLite database \(damaged or truncated\)"),
    # cut further on: the header is whole, the pages are not
    (lambda db: truncate(db, 100), r"optuna.db: not a readable study \(database disk image is malformed\)"),
    (lambda db: db.unlink(), r"holds job folders 0..0 but its storage .* holds no study 'gsm8k_reward_weights'"),
])
def test_a_damaged_study_file_is_refused_naming_it(tmp_path, damage, refusal):
    pytest.importorskip("optuna")
    from hydra_plugins.kk_optuna_store._study import StoredSweeperImpl

    storage = a_stored_study(tmp_path)
    damage(tmp_path / "optuna.db")
    sweeper = StoredSweeperImpl(sampler=None, direction="maximize", storage=storage, study_name="gsm8k_reward_weights",
                                n_trials=3, n_jobs=1, max_failure_rate=0.0, search_space=None,
                                custom_search_space=None, params=None)
    with pytest.raises(ConfigError, match=refusal):
        sweeper.open_study(tmp_path)


@pytest.mark.run
def test_a_damaged_study_file_ends_the_search_in_one_line(tmp_path, cache_dir):
    pytest.importorskip("optuna")
    a_stored_study(tmp_path)
    truncate(tmp_path / "optuna.db", 100)
    done = run_cli("train", "-m", "+curriculum=gsm8k_grpo", "+hparams_search=gsm8k_reward_optuna", "experiment=smoke",
                   f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={tmp_path}")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"config error: sqlite:///{tmp_path / 'optuna.db'}: not a readable study (database disk image is malformed); "
        "restore it, or start the sweep in a new folder (hydra.sweep.dir)")


def test_gsm8k_reward_search_space_is_the_recipes_five_weights(make_cfg):
    cfg = make_cfg("+curriculum=gsm8k_grpo", "+hparams_search=gsm8k_reward_optuna", hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("StoredOptunaSweeper") and sweeper.direction == "maximize"
    assert set(sweeper.params) == {f"reward.weights.{name}" for name in cfg.reward.weights}
    assert sweeper.storage == f"sqlite:///{cfg.hydra.sweep.dir}/optuna.db"


# (what a job folder holds, whether the sweep's end counts it failed)
JOB_FOLDERS = [
    # a run that ended done
    ({"run.json": '{"status": "done"}'}, False),
    # a run stopped by an error: run.json says so
    ({"run.json": '{"status": "failed"}'}, True),
    # a job refused or failed before its run began: error.txt only
    ({"error.txt": "config error: ..."}, True),
    # a failed attempt's error.txt beside a run.json that is not done yet
    ({"run.json": '{"status": "running"}', "error.txt": "killed"}, True),
    # nothing at all: the job never ran
    ({}, True),
]


@pytest.mark.parametrize(("files", "failed"), JOB_FOLDERS, ids=["done", "failed", "error-only", "running", "empty"])
def test_the_sweep_end_counts_a_job_failed_unless_its_run_is_done(tmp_path, files, failed):
    job = tmp_path / "0"
    job.mkdir()
    for name, text in files.items():
        (job / name).write_text(text)
    (tmp_path / "optuna.db").write_text("")  # not a job: only numbered folders are
    assert job_folders(tmp_path) == [job]
    assert job_failed(job) is failed
