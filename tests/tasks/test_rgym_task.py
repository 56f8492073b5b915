"""The reasoning-gym adapter (curriculum/tasks/rgym.py): levels from settings or the dataset's
curriculum, records deterministic by seed with train apart from test, its score_answer as the
answer reward, and bad configs named before anything runs."""

from __future__ import annotations

import json
import signal
import time

import pytest

reasoning_gym = pytest.importorskip("reasoning_gym",
                                    reason="reasoning-gym is an optional extra: pip install -e '.[rgym]'")

from core.checks import ConfigError  # noqa: E402
from curriculum.tasks import build_task, rgym  # noqa: E402
from curriculum.tasks.base import (  # noqa: E402
    RewardSettings,
    normalized_question,
    task_row,
)
from curriculum.tasks.rgym import ReasoningGymTask, format_ok  # noqa: E402
from tests.conftest import compose_cfg  # noqa: E402

SETTINGS = RewardSettings("answer_tag", 200)  # what the run hands every task's rewards (reasoning-gym's read neither)

KK_LEVELS = {"2ppl": {"n_people": 2}, "3ppl": {"n_people": 3}}


@pytest.fixture(scope="module")
def kk() -> ReasoningGymTask:
    return ReasoningGymTask("knights_knaves", levels=KK_LEVELS, settings={"depth_constraint": 2})


def test_levels_default_to_the_datasets_curriculum():
    task = build_task({"name": "reasoning_gym", "dataset": "knights_knaves"})
    assert task.levels == ("level0", "level1", "level2", "level3")
    assert [task.level_settings[level]["n_people"] for level in task.levels] == [2, 3, 4, 5]
    # a dataset without a reasoning-gym curriculum has one level
    assert build_task({"name": "reasoning_gym", "dataset": "gsm_symbolic"}).levels == ("default",)


def test_named_levels_take_the_shared_settings(kk):
    assert kk.level_settings == {"2ppl": {"depth_constraint": 2, "n_people": 2},
                                 "3ppl": {"depth_constraint": 2, "n_people": 3}}
    records = kk.records("3ppl", "test", n=5, seed=1)
    assert [len(json.loads(r.columns["entry"])["metadata"]["names"]) for r in records] == [3] * 5


def test_records_are_deterministic_and_train_never_meets_test(kk):
    first = kk.records("3ppl", "train", n=50, seed=7)
    assert [r.question for r in first] == [r.question for r in kk.records("3ppl", "train", n=50, seed=7)]
    assert [r.question for r in first] != [r.question for r in kk.records("3ppl", "train", n=50, seed=8)]
    test = kk.records("3ppl", "test", n=200, seed=7)
    train = kk.records("3ppl", "train", n=200, seed=7)
    assert not {normalized_question(r.question) for r in train} & {normalized_question(r.question) for r in test}
    assert len({r.id for r in train}) == len(train) and train[0].id == "3ppl-train-0"


def test_the_answer_reward_is_score_answer_on_the_final_block(kk):
    record = kk.records("2ppl", "test", n=1, seed=3)[0]
    right, entry = record.columns["answer"], json.loads(record.columns["entry"])
    names = entry["metadata"]["names"]
    terms = entry["metadata"]["knight_knave_terms"]
    wrong = f"{names[0]} is {terms['a_knight']}, and {names[1]} is {terms['a_knight']}."
    completions = [
        f"Let me think.\n<answer>{right}</answer>",  # reasoning-gym's own answer: 1
        f"<answer>{wrong}</answer>",  # both knights: right or half right, as score_answer says
        f"<answer>{right}</answer> I mean <answer>{wrong}</answer>",  # the final block decides
        right,  # no answer block: 0, whatever the text says
    ]
    scores = kk.reward_functions(SETTINGS)["answer"](completions, entry=[record.columns["entry"]] * 4)
    expected_wrong = reasoning_gym.get_score_answer_fn("knights_knaves")(wrong, entry)
    assert scores == [1.0, expected_wrong, expected_wrong, 0.0] and expected_wrong < 1.0
    graded = kk.grade(completions[0], record.columns)
    assert (graded.correct, graded.format_ok, graded.answered, graded.reasons) == (True, True, True, ())
    assert kk.grade(right, record.columns).reasons == ("format: want one <answer>...</answer> block, last",
                                                       "no <answer> block")


@pytest.mark.parametrize(("text", "ok"), [
    ("Reasoning.\n<answer>4</answer>", True),
    ("<answer>4</answer>\n  ", True),  # whitespace after the block is fine
    ("<answer>4</answer> done", False),  # text after it is not
    ("<answer>4</answer><answer>5</answer>", False),  # two blocks
    ("</answer>4<answer>", False),  # out of order
    ("4", False),
])
def test_format(kk, text, ok):
    assert format_ok(text) is ok
    assert kk.reward_functions(SETTINGS)["format"]([text]) == [float(ok)]


def test_rows_carry_the_entry_as_text(kk):
    row = task_row(kk.records("2ppl", "train", n=1)[0], "p")
    assert set(row) == {"prompt", "id", "level", "answer", "entry"}
    assert isinstance(row["entry"], str) and json.loads(row["entry"])["answer"] == row["answer"]


def test_gsm_symbolic_scores_numbers():
    task = build_task({"name": "reasoning_gym", "dataset": "gsm_symbolic"})
    record = task.records("default", "test", n=1)[0]
    score = task.reward_functions(SETTINGS)["answer"]
    assert score([f"<answer>{record.columns['answer']}</answer>", "<answer>-1</answer>"],
                 entry=[record.columns["entry"]] * 2) == [1.0, 0.01]  # 0.01: gsm_symbolic's score for any number


@pytest.mark.parametrize(("cfg", "error"), [
    ({"dataset": "knights_and_knaves"}, r"task.dataset: 'knights_and_knaves' is not a reasoning-gym dataset"),
    ({"dataset": "composite"}, r"task.dataset: 'composite' is not a reasoning-gym dataset"),
    ({"dataset": "knights_knaves", "levels": {"2ppl": {"n_peple": 2}}},
     r"task.levels.2ppl: reasoning-gym refused knights_knaves with \{'n_peple': 2\}"),
    ({"dataset": "knights_knaves", "levels": {"2ppl": {"n_people": 0}}}, r"task.levels.2ppl: reasoning-gym refused"),
    ({"dataset": "knights_knaves", "levels": {"2 people": {"n_people": 2}}}, r"task.levels: '2 people' is not a level"),
    ({"dataset": "knights_knaves", "levels": {}}, r"task.levels: must be a non-empty mapping"),
    ({"dataset": "rearc"}, r"task.dataset: rearc's score_answer grades its own answer differently on the JSON copy"),
    # each curriculum level sets its own n_people, so a shared one ran to the end unused, good value or not
    ({"dataset": "knights_knaves", "settings": {"n_people": -3}},
     r"task.settings.n_people: -3 is never used: every level sets its own \(level0: 2, level1: 3, level2: 4, "
     r"level3: 5\); set it in task.levels"),
    ({"dataset": "knights_knaves", "settings": {"n_people": "abc"}}, r"task.settings.n_people: 'abc' is never used"),
    # used by a level that does not set it: reasoning-gym's own check names it
    ({"dataset": "knights_knaves", "settings": {"n_people": -3}, "levels": {"a": {}}},
     r"task.levels.a: reasoning-gym refused knights_knaves with \{'n_people': -3\} \(AssertionError: Number of"),
    ({"dataset": "knights_knaves", "levels": {"easy": 3}}, r"task.levels.easy: 3 is not a mapping of knights_knaves's "
                                                           r"settings"),  # was a raw TypeError
])
def test_a_bad_config_is_named_when_the_task_is_built(cfg, error):
    with pytest.raises(ConfigError, match=error):
        build_task({"name": "reasoning_gym", **cfg})


def test_a_level_reasoning_gym_cannot_generate_is_refused_by_name_in_time(monkeypatch):
    # 60 people: its solver tries 2^60 assignments, and the run printed nothing for 900 s
    monkeypatch.setattr(rgym, "FIRST_RECORD_SECONDS", 1)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"task.levels.hard: reasoning-gym made no knights_knaves record in 1 s "
                                          r"with \{'n_people': 60\} \(a level it cannot generate"):
        build_task({"name": "reasoning_gym", "dataset": "knights_knaves", "levels": {"hard": {"n_people": 60}}})
    assert time.monotonic() - started < 10
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), "no alarm left behind"


def test_the_task_group_composes_and_builds():
    cfg = compose_cfg(None, "+curriculum=kk_ladder", "task=reasoning_gym", "task.dataset=knights_knaves",
                      "task.levels={2ppl: {n_people: 2}}")
    assert build_task(cfg.task).levels == ("2ppl",)
