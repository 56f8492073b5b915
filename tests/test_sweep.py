"""Hydra multirun over reward weights: one complete run directory per job, a failed job that does
not kill the sweep, and the Optuna / SLURM configs composing as documented."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from tests.conftest import run_cli


def test_two_value_sweep_plus_a_failing_job(tmp_path, cache_dir):
    sweep_dir = tmp_path / "sweep"
    # -1: a weight of the right type that the job's own checks refuse (a negative weight); a value of the
    # wrong type ("oops") is the schema's to refuse while Hydra composes that job, which ends the sweep
    done = run_cli("train", "-m", "+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=1",
                   f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep_dir}",
                   "reward.weights.format=0,0.5,-1")
    assert done.returncode == 0, done.stderr[-3000:]
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


def test_two_sweeps_never_share_a_wandb_run_and_each_job_is_named_and_grouped(tmp_path, cache_dir):
    # the same sweep twice: job 0 of each used to get the id "0-<config hash>", and online with resume="allow"
    # the second sweep's jobs were attached to the first sweep's runs
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


def test_the_gsm8k_reward_search_stores_its_study_in_the_sweep_folder_and_resumes_it(tmp_path, cache_dir):
    optuna = pytest.importorskip("optuna")
    sweep_dir = tmp_path / "sweep"
    search = ["train", "-m", "+curriculum=gsm8k_grpo", "+hparams_search=gsm8k_reward_optuna", "experiment=smoke",
              f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep_dir}"]

    def study():
        return optuna.load_study(study_name="gsm8k_reward_weights", storage=f"sqlite:///{sweep_dir / 'optuna.db'}")

    done = run_cli(*search, "hydra.sweeper.n_trials=2")
    assert done.returncode == 0, done.stderr[-3000:]
    first = study().trials
    assert [t.state.name for t in first] == ["COMPLETE"] * 2
    before = {job: (sweep_dir / job / "run.json").read_bytes() for job in ("0", "1")}
    for trial in first:  # each trial is the job of its number: its weights and its objective
        job = sweep_dir / str(trial.number)
        manifest = json.loads((job / "run.json").read_text())
        assert manifest["status"] == "done" and manifest["objective"] == trial.value
        weights = OmegaConf.load(job / "config.yaml").reward.weights
        assert {f"reward.weights.{k}": v for k, v in weights.items()} == trial.params
    resumed = run_cli(*search, "hydra.sweeper.n_trials=1")  # the same folder: the study continues
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    trials = study().trials
    assert [t.number for t in trials] == [0, 1, 2] and trials[2].state.name == "COMPLETE"
    assert json.loads((sweep_dir / "2" / "run.json").read_text())["objective"] == trials[2].value
    assert trials[2].params != trials[0].params, "a resumed sampler does not propose the first point again"
    assert {job: (sweep_dir / job / "run.json").read_bytes() for job in ("0", "1")} == before, "earlier jobs kept"


def test_gsm8k_reward_search_space_is_the_recipes_five_weights(make_cfg):
    cfg = make_cfg("+curriculum=gsm8k_grpo", "+hparams_search=gsm8k_reward_optuna", hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("StoredOptunaSweeper") and sweeper.direction == "maximize"
    assert set(sweeper.params) == {f"reward.weights.{name}" for name in cfg.reward.weights}
    assert sweeper.storage == f"sqlite:///{cfg.hydra.sweep.dir}/optuna.db"
