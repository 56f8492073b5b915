"""SystemExit raised by the user's code (a reward, a task's grader) is a failure naming whose code raised it: run.json
and error.txt record it. It was rc 0 (or 3) with nothing printed, run.json left running (or failed with no error)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from core.checks import UserCodeExit, call_user_code
from eval.validation import grade_subset
from tests.conftest import run_cli
from tests.tasks.test_reward_checks import ONE_STEP, _with_reward
from train.run.runner import run_curriculum
from train.settings import read_settings


@pytest.mark.run
@pytest.mark.parametrize("target, code", [
    ("exits_quietly", 0),  # was rc 0, no message, the run left running
    ("exits_with_code", 3),  # was rc 3 and nothing said
])
def test_a_reward_raising_system_exit_fails_its_stage_naming_it(tmp_path, make_cfg, target, code):
    run_dir = tmp_path / "run"
    with pytest.raises(UserCodeExit, match=rf"^reward mine: raised SystemExit\({code}\)"):
        run_curriculum(read_settings(_with_reward(make_cfg, target)), run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed"
    stage = manifest["stages"][0]
    assert stage["status"] == "failed" and "reward mine: raised SystemExit" in stage["error"]


class ExitingGrader:
    """A task whose grader ends the process, as a judge's script does."""

    name = "judge"

    def grade(self, completion, columns):
        raise SystemExit(3)


def test_a_task_grader_raising_system_exit_names_the_task_and_its_member():
    record = SimpleNamespace(id="r0", question="q", columns={})
    out = SimpleNamespace(text="t", tokens=1, truncated=False)
    with pytest.raises(UserCodeExit, match=r"^task judge's grade: raised SystemExit\(3\)"):
        grade_subset([record], [[out]], ExitingGrader())


def test_keyboard_interrupt_passes_as_it_is():
    def interrupted():
        raise KeyboardInterrupt  # Ctrl-C inside a reward: the run's own interrupt handling says what was kept

    with pytest.raises(KeyboardInterrupt):
        call_user_code("reward mine", interrupted)


@pytest.mark.run
def test_python_m_train_records_a_rewards_system_exit_in_error_txt_and_run_json(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    done = run_cli("train", *ONE_STEP, f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}",
                   "+reward.custom.mine={_target_: tests.broken_rewards.exits_with_code, _partial_: true}")
    assert done.returncode not in (0, 3), done.stderr[-2000:]
    assert "reward mine: raised SystemExit(3)" in done.stderr
    assert "reward mine: raised SystemExit(3)" in (run_dir / "error.txt").read_text()
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed" and "reward mine: raised SystemExit(3)" in manifest["error"]
