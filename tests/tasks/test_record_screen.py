"""K&K records the grader cannot grade right are dropped by name when a file is read, with the count said; a
file of nothing else, and two records with one id, are refused; repeated quizzes are kept and counted.

Crafted records are published ones (the shared Logic-RL files) with one person renamed or the quiz emptied,
so every other field is data nobody on this project wrote."""

from __future__ import annotations

import json
import logging
import re

import pytest

from curriculum.tasks.kk import COMMON_NAMES, KKTask, generate
from curriculum.tasks.kk.grading.grader import grade
from curriculum.tasks.kk.screen import ROLE_WORD, ungradable
from curriculum.tasks.kk.sources import RecordError, load_records
from tests.tasks.test_sources import SHARED_DATA, needs_shared_data

LOGGER = "curriculum.tasks.kk.screen"


def published(ppl: int = 3, n: int = 3) -> list[dict]:
    needs_shared_data()
    return load_records("local", ppl, "test", path=SHARED_DATA, n=n)


def renamed(record: dict, old: str, new: str) -> dict:
    """`record` with person `old` called `new` wherever the record writes names (statements go by position)."""
    def swap(text: str) -> str:
        return re.sub(rf"\b{re.escape(old)}\b", new, text)
    return {**record, "names": [new if name == old else name for name in record["names"]],
            **{field: swap(record[field]) for field in ("quiz", "solution_text", "solution_text_format")},
            "cot_repeat_steps": [swap(step) for step in record["cot_repeat_steps"]]}


def write_local(root, records, split="test"):
    path = root / split / f"people{len(records[0]['names'])}_num{len(records)}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def own_solution_grades(record: dict) -> bool:
    """Whether both of the record's own solution texts, as the answer, grade right."""
    return all(grade(f"<think>.</think>\n<answer>{record[text]}</answer>", record["names"], record["solution"]).correct
               for text in ("solution_text", "solution_text_format"))


# (how the first published record is changed, the reason it is dropped or None: kept)
CASES = [
    # the control: a published record as it is must be kept
    (lambda r: r, None),
    # a bare role word as a name: the grader reads "Knight is a knave" as roles and loses the other people
    (lambda r: renamed(r, r["names"][2], "Knight"), "with a role word as a name"),
    # a role word inside a name, any case: "Sir Knave says Amelia is a knave" is ambiguous to the model reading it
    (lambda r: renamed(r, r["names"][2], "Sir Knave"), "with a role word as a name"),
    (lambda r: renamed(r, r["names"][0], "the KNIGHT"), "with a role word as a name"),
    # knight inside a longer word is a name, not a role: its own solution text grades right
    (lambda r: renamed(r, r["names"][2], "Knightley"), None),
    # one name twice: the grader cannot tell the two people apart
    (lambda r: renamed(r, r["names"][2], r["names"][0]), "with a name repeated"),
    # the same name in another case: the grader matches names without case
    (lambda r: renamed(r, r["names"][2], r["names"][0].lower()), "with a name repeated"),
    # an empty quiz: a prompt with no puzzle in it
    (lambda r: {**r, "quiz": "  \n"}, "with an empty quiz"),
]


@pytest.mark.parametrize(("edit", "reason"), CASES)
def test_a_record_the_grader_cannot_grade_right_is_dropped_by_name(tmp_path, caplog, edit, reason):
    records = published()
    changed = edit(records[0])
    assert ungradable(changed) == reason
    path = write_local(tmp_path, [changed, *records[1:]])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        kept = load_records("local", 3, "test", path=tmp_path)
    if reason is None:
        assert kept == [changed, *records[1:]] and not caplog.records
        assert own_solution_grades(changed), "the invariant the check protects: a kept record grades its own answer"
    else:
        assert kept == records[1:]
        assert [r.getMessage() for r in caplog.records] == [
            f"dropped 1 of 3 records of {path}: 1 {reason} (id 3ppl-{records[0]['index']})"]


@pytest.mark.parametrize("edit", [
    # a bare role word: the grader loses the people around it
    lambda r: renamed(r, r["names"][2], "Knight"),
    # a repeated name: one of the two people goes unanswered
    lambda r: renamed(r, r["names"][2], r["names"][0]),
])
def test_the_dropped_names_do_make_a_record_grade_its_own_solution_wrong(edit):
    """Why the check exists: without it, these records would score their own reference answer 0."""
    assert not own_solution_grades(edit(published(n=1)[0]))


def test_every_kept_published_record_grades_its_own_solution_text():
    needs_shared_data()
    for ppl in range(3, 8):
        records = load_records("local", ppl, "test", path=SHARED_DATA)
        assert len(records) == 100, f"{ppl}ppl: the published files hold no record the check drops"
        wrong = [r["index"] for r in records if not own_solution_grades(r)]
        assert not wrong, f"{ppl}ppl: records whose own solution text grades wrong: {wrong}"


def test_one_line_counts_the_drops_of_a_file_by_reason(tmp_path, caplog):
    records = published(n=5)
    first, second, third = (r["index"] for r in records[:3])
    crafted = [renamed(records[0], records[0]["names"][1], "Knight"),
               renamed(records[1], records[1]["names"][1], "Knave Jr"), {**records[2], "quiz": ""}, *records[3:]]
    path = write_local(tmp_path, crafted)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_records("local", 3, "test", path=tmp_path) == records[3:]
    assert [r.getMessage() for r in caplog.records] == [
        f"dropped 3 of 5 records of {path}: 2 with a role word as a name (ids 3ppl-{first}, 3ppl-{second}), "
        f"1 with an empty quiz (id 3ppl-{third})"]


def test_a_partial_read_says_what_the_part_it_read_held(tmp_path, caplog):
    """A pool reads a file only as far as it needs: the count is of the records read, and says so."""
    records = published(n=4)
    path = write_local(tmp_path, [{**records[0], "quiz": ""}, *records[1:]])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_records("local", 3, "test", path=tmp_path, n=1) == records[1:2]
    assert [r.getMessage() for r in caplog.records] == [
        f"dropped 1 of the first 2 records read of {path}: 1 with an empty quiz (id 3ppl-{records[0]['index']})"]


def test_a_file_of_only_ungradable_records_is_refused(tmp_path):
    records = published(n=2)
    path = write_local(tmp_path, [renamed(r, r["names"][0], "Knight") for r in records])
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}: every one of its 2 records is dropped "
                                          r"\(2 with a role word as a name \(ids 3ppl-\d+, 3ppl-\d+\)\)"):
        load_records("local", 3, "test", path=tmp_path)


def test_two_records_with_one_index_are_refused_naming_the_first_repeat(tmp_path):
    records = published(n=4)
    repeated = {**records[2], "index": records[0]["index"]}
    path = write_local(tmp_path, [records[0], records[1], repeated, {**records[3], "index": records[1]["index"]}])
    index = records[0]["index"]
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:3: id 3ppl-{index} \(index {index}\) repeats "
                                          rf"the record at {re.escape(str(path))}:1"):
        load_records("local", 3, "test", path=tmp_path)


def test_repeated_quizzes_are_kept_and_the_distinct_count_said_once(tmp_path, caplog):
    records = published(n=2)
    again = {**records[0], "index": 99_999}  # the same puzzle under a new id
    path = write_local(tmp_path, [records[0], records[1], again])
    write_local(tmp_path, [records[1], records[0]], split="train")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert len(load_records("local", 3, "test", path=tmp_path)) == 3  # kept: training may draw it twice
        assert len(load_records("local", 3, "test", path=tmp_path)) == 3  # read again: nothing new said
        held_out = KKTask(source="local", path=str(tmp_path)).validation_records("3ppl", 3, seed=0)
    assert [r.id for r in held_out] == [f"3ppl-{records[0]['index']}", f"3ppl-{records[1]['index']}"]
    assert [r.getMessage() for r in caplog.records] == [
        f"1 kept records of 3 records of {path} repeat an earlier record's quiz: 2 distinct quizzes "
        "(validation counts each once)"]


def test_the_generator_never_makes_a_record_the_check_drops():
    """Generated data is not screened: its names are the generator's own, none a role word, none repeated."""
    assert not [name for name in COMMON_NAMES if ROLE_WORD.search(name)]
    assert [ungradable(r) for r in generate(5, 300, seed=3) if ungradable(r)] == []


def test_the_hub_files_are_checked_the_same_way(monkeypatch, caplog):
    """The published files as the hub serves them (datasets' rows, stubbed: no network here)."""
    import datasets

    records = published(n=3)
    rows = [renamed(records[0], records[0]["names"][1], "Knight"), *records[1:]]
    monkeypatch.setattr(datasets, "load_dataset", lambda hub_id, data_files, split: rows)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_records("hub", 3, "test", hub_id="someone/kk") == records[1:]
    assert [r.getMessage() for r in caplog.records] == [
        f"dropped 1 of 3 records of someone/kk/test/people3_num100.jsonl: 1 with a role word as a name "
        f"(id 3ppl-{records[0]['index']})"]
