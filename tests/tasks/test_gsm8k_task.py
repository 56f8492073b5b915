"""GSM8K as a task: levels from solution steps, the local and sample sources, decontaminated pools,
records deterministic by seed, bad files named by line, and the shipped sample reproducible."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from core.checks import ConfigError
from curriculum.tasks.base import ALL, RecordError, normalized_question, task_row
from curriculum.tasks.gsm8k import LEVELS, GSM8KTask
from curriculum.tasks.gsm8k.task import SAMPLE_DIR, solution_level


def _write(folder: Path, split: str, rows: list) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _solution(steps: int, answer: str = "5") -> str:
    return "\n".join(f"step {i} = {i}" for i in range(steps)) + f"\n#### {answer}"


@pytest.mark.parametrize(("solution", "level"), [
    ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nIn all 48+24 = <<48+24=72>>72.\n#### 72", "2steps"),
    (_solution(3), "3steps"),
    (_solution(5), "5steps"),
    (_solution(6), "6+steps"),  # six and more share the top level
    (_solution(11), "6+steps"),
    ("a\n\n  \nb\n#### 1", "2steps"),  # blank lines are not steps
    ("It is 5.\n#### 5", None),  # one step: below the lowest level
    ("#### 5", None),
])
def test_levels_count_the_lines_before_the_answer(solution, level):
    assert solution_level(solution) == level


def test_the_sample_has_every_level_in_both_splits():
    task = GSM8KTask(source="sample")
    assert task.levels == LEVELS == ("2steps", "3steps", "4steps", "5steps", "6+steps")
    counts = {split: [len(task.records(level, split)) for level in LEVELS] for split in ("train", "test")}
    assert counts == {"train": [40] * 5, "test": [12] * 5}
    record = task.records("6+steps", "test", n=1)[0]
    assert solution_level(record.source["answer"]) == "6+steps"
    assert record.columns["answer"].lstrip("-").replace(".", "")


def test_records_are_deterministic_by_seed_and_a_prefix_of_larger_asks():
    task = GSM8KTask(source="sample")
    ids = [r.id for r in task.records("3steps", "train", n=10, seed=7)]
    assert ids == [r.id for r in GSM8KTask(source="sample").records("3steps", "train", n=10, seed=7)]
    assert ids[:4] == [r.id for r in task.records("3steps", "train", n=4, seed=7)]
    assert ids != [r.id for r in task.records("3steps", "train", n=10, seed=8)]  # another seed, another order
    assert len(set(ids)) == 10


def test_the_training_pool_holds_no_test_question(tmp_path, caplog):
    question = "Tom has 3 apples and buys 2. How many apples does Tom have?"
    _write(tmp_path, "test", [{"question": question, "answer": _solution(2)}])
    _write(tmp_path, "train", [
        {"question": question.upper().replace("  ", " "), "answer": _solution(2)},  # the test question, shouted
        {"question": question.replace("?", " now?"), "answer": _solution(2)},  # a different question
        {"question": "  " + question + "\n", "answer": _solution(3)},  # the test question, padded, another level
    ])
    task = GSM8KTask(source="local", path=str(tmp_path))
    with caplog.at_level(logging.INFO, logger="curriculum.tasks.gsm8k.task"):
        train = task.split("train")
    assert [r.question for r in train.records] == [question.replace("?", " now?")] and train.decontaminated == 2
    assert "gsm8k train split (local): 1 records in levels; 2 decontaminated (their question is a test question)" \
        in caplog.text, "the count is said, not only kept"
    test_keys = {normalized_question(r.question) for r in task.split("test").records}
    sample = GSM8KTask(source="sample")
    shipped = [r for level in LEVELS for r in sample.records(level, "train")]
    assert not test_keys & {normalized_question(r.question) for r in shipped}


def test_one_step_solutions_are_left_out_and_counted(tmp_path):
    _write(tmp_path, "test", [{"question": "q1", "answer": _solution(1)}, {"question": "q2", "answer": _solution(2)}])
    _write(tmp_path, "train", [{"question": "q3", "answer": _solution(4)}])
    task = GSM8KTask(source="local", path=str(tmp_path))
    assert task.split("test").unleveled == 1 and [r.question for r in task.split("test").records] == ["q2"]


def test_a_level_short_because_records_were_below_the_first_level_says_so(tmp_path):
    # every test record a one-step solution: "has only 0 there" said nothing of the 3 left out
    _write(tmp_path, "test", [{"question": f"q{i}", "answer": _solution(1)} for i in range(3)])
    with pytest.raises(ConfigError, match=r"eval.n: 2 validation problems asked at 2steps, but task gsm8k has only 0 "
                                          r"there; 3 of the test split left out below the first level, 2steps \(a "
                                          r"one-step solution\); lower eval.n"):
        GSM8KTask(source="local", path=str(tmp_path)).validation_records("2steps", 2, seed=0)


def test_a_byte_that_is_not_utf8_is_named_by_file_and_line(tmp_path):
    _write(tmp_path, "test", [{"question": question, "answer": _solution(2)} for question in ("fine", "cafe")])
    path = tmp_path / "test.jsonl"
    path.write_bytes(path.read_bytes().replace(b"cafe", b"caf\xe9"))  # Latin-1's e-acute, as an editor may save it
    with pytest.raises(RecordError, match=rf"^{path}:2: not UTF-8 \(byte 0xe9 at column 18\)"):
        GSM8KTask(source="local", path=str(tmp_path)).records("2steps", "test")


NO_MARKER = r"test.jsonl:2: field 'answer' must end with '#### <number>'"


@pytest.mark.parametrize(("line", "error"), [
    ("{not json", r"test.jsonl:2: malformed JSON"),
    ('["a", "b"]', r"test.jsonl:2: expected a JSON object, got list"),
    ('{"question": "q"}', r"test.jsonl:2: field 'answer' must be a non-empty string"),
    ('{"question": "", "answer": "a\\nb\\n#### 5"}', r"test.jsonl:2: field 'question' must be a non-empty string"),
    ('{"question": "q", "answer": "a\\nb\\nThe answer is 5"}', NO_MARKER),  # no #### line
    ('{"question": "q", "answer": "a\\nb\\n#### five"}', NO_MARKER),  # #### but not a number
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path, line, error):
    _write(tmp_path, "test", [{"question": "fine", "answer": _solution(2)}, line])
    with pytest.raises(RecordError, match=error):
        GSM8KTask(source="local", path=str(tmp_path)).records("2steps", "test")


def test_a_missing_file_and_an_empty_file_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train.jsonl: no such file; source=local needs path="):
        GSM8KTask(source="local", path=str(tmp_path)).records("2steps", "train")
    _write(tmp_path, "test", [])
    with pytest.raises(RecordError, match="local test split: no records"):
        GSM8KTask(source="local", path=str(tmp_path)).records("2steps", "test")


def test_the_hub_source_offline_says_what_to_use_instead(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ConnectionError, match=r"task.source=hub needs the Hugging Face hub to load "
                                              r"openai/gsm8k-not-cached \(main, test\).*task.source=sample"):
        GSM8KTask(source="hub", hub_id="openai/gsm8k-not-cached").records("2steps", "test")


def test_a_level_outside_the_task_is_named():
    with pytest.raises(ValueError, match=r"level: '7steps' is not a level of task gsm8k; levels: 2steps, "):
        GSM8KTask(source="sample").records("7steps", "train")


def test_a_row_carries_the_reference_for_the_rewards():
    record = GSM8KTask(source="sample").records("2steps", "test", n=1)[0]
    row = task_row(record, "prompt text")
    # the number, and the #### text as written (what the recipe's own rewards compare: reward=gsm8k_stack_verbatim)
    assert set(row) == {"prompt", "id", "level", "answer", "answer_text"} and row["level"] == "2steps"
    assert row["id"].startswith("gsm8k-test-")


def test_the_shipped_sample_is_what_its_generator_writes(tmp_path):
    pytest.importorskip("reasoning_gym", reason="the sample is generated by reasoning-gym (pip install -e '.[rgym]')")
    from curriculum.tasks.gsm8k.sample import write_sample

    assert write_sample(tmp_path) == {"train": 200, "test": 60}
    for split in ("train", "test"):
        assert (tmp_path / f"{split}.jsonl").read_bytes() == (SAMPLE_DIR / f"{split}.jsonl").read_bytes(), split


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_supervised_target_of_the_sample_is_right_and_in_the_strict_format(split):
    """What `kind: sft` trains on must be what the rewards pay for: right, strictly formatted, no calculator."""
    task = GSM8KTask(source="sample")
    for record in task.records(ALL, split):
        target = task.sft_target(record, "reasoning_answer")
        g = task.grade(target, record.columns)
        assert (g.correct, g.format_ok, "<<" in target) == (True, True, False), (record.id, target)


def test_a_supervised_target_is_only_in_the_recipes_format():
    task = GSM8KTask(source="sample")
    record = task.records("2steps", "train", n=1)[0]
    with pytest.raises(ConfigError, match=r"prompt.fmt: think_answer: GSM8K's worked solutions are written in"):
        task.sft_target(record, "think_answer")
