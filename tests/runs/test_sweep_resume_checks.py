"""A stored Optuna study resumed with another search space or a trial count below 1 is refused in one line before
the study is touched, and a trial a stopped sweep left running without a job is marked failed at the next start
(hydra_plugins/kk_optuna_store). Each was a raw optuna ValueError, a trial RUNNING for ever, or both."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.checks import ConfigError
from tests.conftest import run_cli

optuna = pytest.importorskip("optuna")
from hydra_plugins.kk_optuna_store._study import StoredSweeperImpl, check_trial_count  # noqa: E402

STUDY = "gsm8k_reward_weights"
# the space conf/hparams_search/gsm8k_reward_optuna.yaml searches
SPACE = {"reward.weights.correctness": (0.5, 4.0), **{f"reward.weights.{name}": (0.0, 1.0) for name in
                                                         ("integer", "strict_format", "soft_format", "xml_count")}}
SEARCH = ["train", "-m", "+curriculum=gsm8k_grpo", "+hparams_search=gsm8k_reward_optuna", "experiment=smoke"]


def stored_study(sweep_dir: Path, space: dict = SPACE, *, running: bool = False) -> str:
    """A sweep folder as a first run of the search leaves it: one finished trial over `space` (job folder 0), and
    with `running` a second trial asked but never launched (a sweep stopped between the two)."""
    storage = f"sqlite:///{sweep_dir / 'optuna.db'}"
    (sweep_dir / "0").mkdir(parents=True)
    (sweep_dir / "0" / "run.json").write_text('{"status": "done"}')  # its run finished, as the trial did
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    trial = study.ask()
    for name, (low, high) in space.items():
        trial.suggest_float(name, low, high)
    study.tell(trial, 0.25)
    if running:
        study.ask()
    return storage


def _sweeper(storage: str) -> StoredSweeperImpl:
    return StoredSweeperImpl(sampler=None, direction="maximize", storage=storage, study_name=STUDY, n_trials=3,
                             n_jobs=1, max_failure_rate=0.0, search_space=None, custom_search_space=None, params=None)


def _space(**changed) -> dict:
    uniform = optuna.distributions.UniformDistribution  # what suggest_float records in this optuna
    return {name: uniform(*changed.get(name, bounds)) for name, bounds in SPACE.items()
            if changed.get(name, bounds) is not None}


@pytest.mark.parametrize(("space", "named"), [
    # a wider range: optuna takes it without a word, and the study mixes two searches
    (_space(**{"reward.weights.correctness": (0.5, 5.0)}),
     "searches reward.weights.correctness over interval(0.5, 4.0), this sweep over interval(0.5, 5.0)"),
    # a parameter dropped
    (_space(**{"reward.weights.xml_count": None}), "searches reward.weights.xml_count over interval(0.0, 1.0), this "
                                                   "sweep over not searched"),
    # one added: unchecked, optuna's ValueError mid-sweep, its trial left RUNNING
    ({**_space(), "reward.weights.extra": optuna.distributions.CategoricalDistribution([0.0, 1.0])},
     "searches reward.weights.extra over not searched, this sweep over choice(0.0, 1.0)"),
])
def test_a_study_resumed_over_another_search_space_is_refused_before_it_is_touched(tmp_path, space, named):
    storage = stored_study(tmp_path)
    escaped = named.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(ConfigError, match=f"^{tmp_path}: study '{STUDY}' " + escaped):
        _sweeper(storage).open_study(tmp_path, space)
    study = optuna.load_study(study_name=STUDY, storage=storage)
    assert len(study.trials) == 1 and study.user_attrs == {}, "the study is as it was"


def test_the_same_search_space_resumes_and_is_recorded_in_the_study(tmp_path):
    storage = stored_study(tmp_path)
    study = _sweeper(storage).open_study(tmp_path, _space())
    assert set(study.user_attrs["search_space"]) == set(SPACE)
    with pytest.raises(ConfigError, match="this sweep over interval"):  # now the recorded space is compared
        _sweeper(storage).open_study(tmp_path, _space(**{"reward.weights.integer": (0.0, 2.0)}))


@pytest.mark.parametrize("n_trials", [0, -1, True, 1.5])  # 0: optuna's "Record does not exist"
def test_n_trials_below_one_is_refused(n_trials):
    with pytest.raises(ConfigError, match=r"^hydra.sweeper.n_trials: .* is not a number of trials >= 1"):
        check_trial_count(n_trials)


@pytest.mark.run
def test_python_m_train_refuses_a_changed_search_space_in_one_line(tmp_path):
    storage = stored_study(tmp_path)
    done = run_cli(*SEARCH, f"hydra.sweep.dir={tmp_path}", "reward.weights.correctness=interval(0.5,5.0)", timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"config error: {tmp_path}: study '{STUDY}' searches reward.weights.correctness over interval(0.5, 4.0), this "
        "sweep over interval(0.5, 5.0): resume it with the search space it started with (hydra.sweeper.params), or "
        "start the sweep in a new folder (hydra.sweep.dir)")
    assert [t.state.name for t in optuna.load_study(study_name=STUDY, storage=storage).trials] == ["COMPLETE"]


@pytest.mark.run
def test_python_m_train_marks_a_trial_left_running_without_a_job_failed_and_goes_on(tmp_path):
    storage = stored_study(tmp_path, running=True)
    done = run_cli(*SEARCH, f"hydra.sweep.dir={tmp_path}", "hydra.sweeper.n_trials=2", timeout=300, merged=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "trial 1 was left running by a sweep that stopped before its job started" in done.stdout
    assert [t.state.name for t in optuna.load_study(study_name=STUDY, storage=storage).trials] == ["COMPLETE", "FAIL"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["0"], "no job ran: 2 trials in all"


@pytest.mark.run
def test_python_m_train_refuses_n_trials_0_in_one_line(tmp_path):
    done = run_cli(*SEARCH, f"hydra.sweep.dir={tmp_path}", "hydra.sweeper.n_trials=0", timeout=300)
    assert done.stderr.strip().splitlines()[-1] == ("config error: hydra.sweeper.n_trials: 0 is not a number of trials "
                                                    ">= 1 (the trials the study holds in all, those finished counted)")


@pytest.mark.run
def test_a_sweeper_key_without_its_search_names_the_search_to_give(tmp_path):
    # a resume without +hparams_search= runs Hydra's basic sweeper, which has no n_trials
    done = run_cli("train", "-m", "+curriculum=gsm8k_grpo", "experiment=smoke", f"hydra.sweep.dir={tmp_path}",
                   "hydra.sweeper.n_trials=3", timeout=300)
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("config error: hydra.sweeper.n_trials: not a config key"), line
    assert "+hparams_search=<search> selects: gsm8k_reward_optuna, reward_optuna" in line
