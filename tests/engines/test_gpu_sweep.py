"""A sweep on one machine with several GPUs (`launch=per_gpu`): one job per GPU at once, each job's run pinned
to its own GPU through CUDA_VISIBLE_DEVICES, the job process itself never loading torch.

This CPU has no GPU, so the device ids of `launch.gpus` are only names here; what is tested is what each run
is given: a real Hydra multirun (joblib, Optuna) of tiny one-stage smoke jobs whose training processes write
down the environment they got (tests/rank_drill.py `records_device`).
"""

from __future__ import annotations

import json
import threading
import time

import optuna
import pytest
from omegaconf import OmegaConf

from conf.errors import check_launch
from core.checks import ConfigError
from core.gpu_pool import claimed_gpus, visible_gpus
from tests.conftest import run_cli

ONE_STAGE = ["+curriculum=kk_ladder", "experiment=smoke", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}]"]


@pytest.mark.run
def test_two_gpus_run_three_optuna_trials_two_at_a_time_each_on_a_gpu_of_its_own(tmp_path, cache_dir):
    seen, sweep = tmp_path / "seen", tmp_path / "sweep"
    seen.mkdir()
    done = run_cli("train", "-m", *ONE_STAGE, "launch=per_gpu", "launch.gpus=[0,1]",
                   "+hparams_search=reward_optuna", "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=2",
                   f"hydra.sweeper.storage=sqlite:///{tmp_path}/optuna.db",
                   f"+reward.custom.seen={{_target_: tests.rank_drill.records_device, _partial_: true, out: {seen}}}",
                   f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}", merged=True)
    assert done.returncode == 0, done.stdout[-3000:]
    runs = {}  # run directory -> (GPUs it was given, its life from start to its last reward)
    for path in seen.glob("*.jsonl"):
        calls = [json.loads(line) for line in path.read_text().splitlines()]
        assert not any(c["parent_loaded_torch"] for c in calls), "the job process never loads torch (nor CUDA)"
        runs[calls[0]["run_dir"]] = (calls[0]["cuda_visible_devices"], calls[0]["started"], calls[-1]["now"])
    assert sorted(runs) == [str(sweep / job) for job in "012"], "one training process per job"
    assert {gpus for gpus, _, _ in runs.values()} <= {"0", "1"}, "each run sees one GPU of the pool"
    together = [(a, b) for a in runs for b in runs if a < b and runs[a][1] < runs[b][2] and runs[b][1] < runs[a][2]]
    assert together, "two jobs ran at once"
    assert all(runs[a][0] != runs[b][0] for a, b in together), f"jobs that ran at once shared a GPU: {runs}"
    study = optuna.load_study(study_name="reward_weights", storage=f"sqlite:///{tmp_path}/optuna.db")
    for trial in study.trials:  # the sweeper's trial k is job k; what it was told is what the run recorded
        manifest = json.loads((sweep / str(trial.number) / "run.json").read_text())
        assert (trial.state, trial.value) == (optuna.trial.TrialState.COMPLETE, manifest["objective"])


def test_gpus_are_claimed_exclusively_and_a_job_waits_for_the_first_one_let_go(tmp_path):
    """Kernel locks in the sweep folder: two holders never share a GPU, whichever ends first frees its GPU."""
    pool, folder = ["0", "1"], tmp_path / ".gpus"
    with claimed_gpus(pool, 1, folder) as first:
        with claimed_gpus(pool, 1, folder) as second:
            assert (first, second) == (["0"], ["1"])
            third: list[list[str]] = []
            waiting = threading.Thread(target=lambda: third.append(_claim_once(pool, folder)))
            waiting.start()
            time.sleep(0.5)
            assert not third, "no GPU free: the third job waits"
        waiting.join(timeout=30)  # the second job ended first: its GPU goes to the waiting one
        assert third == [["1"]]


def _claim_once(pool: list[str], folder) -> list[str]:
    with claimed_gpus(pool, 1, folder, wait_s=0.05) as gpus:
        return gpus


@pytest.mark.run
def test_the_pool_is_every_gpu_visible_to_the_sweep_and_sets_how_many_jobs_run_at_once(make_cfg, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5,7")
    cfg = make_cfg("+curriculum=kk_ladder", "launch=per_gpu", hydra_config=True)
    assert OmegaConf.to_container(cfg.launch, resolve=True)["gpus"] == ["2", "5", "7"] == visible_gpus()
    assert (cfg.hydra.launcher.n_jobs, cfg.hydra.launcher._target_.rsplit(".", 1)[1]) == (3, "JoblibLauncher")
    pairs = make_cfg("+curriculum=kk_ladder", "launch=per_gpu", "launch.launcher=torchrun", "launch.processes=2",
                     "launch.gpus=[0,1,2,3]", hydra_config=True)
    assert pairs.hydra.launcher.n_jobs == 2, "jobs of 2 GPUs each: 2 at once on 4"


@pytest.mark.parametrize(("launch", "refused"), [
    ({"launcher": "python", "processes": 1, "gpus": []}, "launch.gpus: no GPU to share out here"),
    ({"launcher": "python", "processes": 1, "gpus": ["0", "0"]}, "launch.gpus: ['0', '0'] must name distinct GPUs"),
    ({"launcher": "torchrun", "processes": 4, "gpus": ["0", "1"]}, "at least launch.processes (4)"),
    ({"launcher": "python", "processes": 2, "gpus": ["0", "1"]}, "launch.processes: launch.launcher=python starts one"),
    ({"launcher": None, "processes": 1, "gpus": ["0"]}, "launch.gpus: GPUs are shared out to jobs"),
    ({"launcher": "python", "processes": 1, "gpus": ["0", "GPU-8a1f"]}, None),
])
def test_a_pool_a_job_cannot_claim_from_is_refused_naming_the_key(launch, refused):
    launch = {"accelerate_config": "ddp", **launch}
    if refused is None:
        check_launch(launch)
        return
    with pytest.raises(ConfigError, match=refused.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        check_launch(launch)


@pytest.mark.run
def test_a_per_gpu_sweep_on_a_machine_without_gpus_is_refused_before_it_starts(tmp_path):
    sweep = tmp_path / "sweep"
    refused = run_cli("train", "-m", *ONE_STAGE, "launch=per_gpu", "seed=1,2", f"hydra.sweep.dir={sweep}",
                      env={"CUDA_VISIBLE_DEVICES": ""})  # no GPU visible: nvidia-smi is not asked
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith("config error: launch.gpus: no GPU to share out here")
    assert "Traceback" not in refused.stderr and not sweep.exists()


@pytest.mark.run
def test_a_job_whose_run_is_refused_keeps_its_folder_with_the_refusal_in_error_txt(tmp_path, cache_dir):
    """The run a job starts lives in the job's folder: refused by its config, it leaves the job's Hydra record and
    log there and says why in error.txt (what the sweep's report shows), and the sweep goes on (to exit 1)."""
    sweep = tmp_path / "sweep"
    done = run_cli("train", "-m", *ONE_STAGE, "launch=per_gpu", "launch.gpus=[0,1]", "grpo.learning_rate=-1,-2",
                   f"paths.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}")
    assert done.returncode == 1, "a sweep whose jobs failed says so in its exit status"
    for job in ("0", "1"):
        refusal = (sweep / job / "error.txt").read_text()
        assert refusal.startswith("config error: grpo.learning_rate: must be > 0") and refusal.count("\n") == 1
        assert (sweep / job / ".hydra" / "overrides.yaml").is_file() and (sweep / job / "__main__.log").is_file()
