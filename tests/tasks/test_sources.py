"""curriculum.tasks.kk.sources: generated, hub and local records, validation errors, disjoint splits."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curriculum.tasks.base import disjoint
from curriculum.tasks.kk import RECORD_FIELDS, KKTask, generate, kk_record, parse_statements
from curriculum.tasks.kk.grading.grader import grade
from curriculum.tasks.kk.sources import RecordError, load_records, published_count

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared/data/kk-logic-rl"


def needs_shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared K&K records not found at {SHARED_DATA}")


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_generated_splits_differ_and_default_to_published_sizes():
    train = load_records("generated", 3, "train")
    test = load_records("generated", 3, "test")
    assert (len(train), len(test)) == (published_count(3, "train"), published_count(3, "test")) == (1000, 100)
    assert [r["statements"] for r in train[:100]] != [r["statements"] for r in test]
    assert load_records("generated", 3, "test", n=10) == test[:10]
    assert load_records("generated", 3, "test", n=10, seed=1) != test[:10]


def test_local_jsonl_layout_round_trips_generated_records(tmp_path):
    records = generate(4, 30, seed=5)
    write_jsonl(tmp_path / "train" / "people4_num30.jsonl", records)
    write_jsonl(tmp_path / "train" / "people4_num30_random_pair.jsonl", records[:1])  # another variant
    assert load_records("local", 4, "train", path=tmp_path) == records
    assert load_records("local", 4, "train", path=tmp_path, n=3) == records[:3]


def test_local_parquet_layout_reads_the_published_files_as_plain_python():
    needs_shared_data()
    records = load_records("local", 5, "test", path=SHARED_DATA)
    assert len(records) == 100 and records[0]["index"] == 1000
    for record in records:
        assert tuple(record) == RECORD_FIELDS
        assert type(record["names"]) is list and all(type(x) is str for x in record["names"])
        assert type(record["solution"]) is list and all(type(x) is bool for x in record["solution"])
        assert type(record["knight_knave"]) is dict and type(record["index"]) is int
        assert type(record["cot_repeat_steps"]) is list and type(record["statements"]) is str


def test_missing_local_files_name_both_layouts(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"people3_num<N>\.jsonl .*/3ppl/test\.parquet"):
        load_records("local", 3, "test", path=tmp_path)
    with pytest.raises(ValueError, match="needs path="):
        load_records("local", 3, "test")


def test_two_files_for_one_split_are_ambiguous(tmp_path):
    records = generate(3, 2, seed=0)
    write_jsonl(tmp_path / "test" / "people3_num2.jsonl", records)
    write_jsonl(tmp_path / "test" / "people3_num1.jsonl", records[:1])
    with pytest.raises(RecordError, match="several test files for 3 people"):
        load_records("local", 3, "test", path=tmp_path)


def corrupt_line(tmp_path: Path, line: int, change) -> Path:
    records = generate(3, 4, seed=0)
    lines = [json.dumps(r) for r in records]
    lines[line - 1] = change(records[line - 1])
    path = tmp_path / "test" / "people3_num4.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


# each of three people says "I am a knight": every assignment is consistent
SELF_PRAISE = "(('telling-truth', 0), ('telling-truth', 1), ('telling-truth', 2))"


def _without(field):
    return lambda r: json.dumps({k: v for k, v in r.items() if k != field})


@pytest.mark.parametrize(
    ("line", "change", "message"),
    [
        (2, lambda r: json.dumps(r)[:-5], "malformed JSON"),
        (3, _without("solution"), "missing field 'solution'"),
        (4, lambda r: json.dumps({**r, "solution": r["solution"][:-1]}), "'solution' has 2 roles but field"),
        (1, lambda r: json.dumps({**r, "solution": [1, 0, 1]}), "'solution' must hold bool"),
        (2, lambda r: json.dumps({**r, "statements": "(('lying', 7),)"}), "person 7 out of range"),
        (3, lambda r: json.dumps({**r, "index": "3"}), "'index' must be an int"),
        (1, lambda r: json.dumps([r]), "expected a JSON object"),
        # a label its statements contradict would be trained on and graded by
        (2, lambda r: json.dumps({**r, "solution": [not x for x in r["solution"]]}), "but the statements allow ["),
        # statements every assignment satisfies: no single right answer to train on
        (3, lambda r: json.dumps({**r, "statements": SELF_PRAISE}), "the statements allow 8 assignments"),
    ],
)
def test_bad_jsonl_names_the_file_and_line(tmp_path, line, change, message):
    path = corrupt_line(tmp_path, line, change)
    with pytest.raises(RecordError, match=re.escape(f"{path}:{line}: ") + ".*" + re.escape(message)):
        load_records("local", 3, "test", path=tmp_path)


def test_wrong_number_of_people_names_the_line(tmp_path):
    write_jsonl(tmp_path / "train" / "people3_num2.jsonl", generate(4, 2, seed=0))
    with pytest.raises(RecordError, match=r"people3_num2\.jsonl:1: a 4-person puzzle, but ppl=3"):
        load_records("local", 3, "train", path=tmp_path)


def test_bad_parquet_names_the_file_and_column(tmp_path):
    needs_shared_data()
    table = pq.read_table(SHARED_DATA / "3ppl/test.parquet")
    path = tmp_path / "3ppl" / "test.parquet"
    path.parent.mkdir()
    pq.write_table(table.drop_columns(["cot_foot"]), path)
    with pytest.raises(RecordError, match=re.escape(f"{path}: missing column 'cot_foot'")):
        load_records("local", 3, "test", path=tmp_path)
    short = pa.array([r[:2] for r in table.column("solution").to_pylist()])
    pq.write_table(table.set_column(table.schema.get_field_index("solution"), "solution", short), path)
    with pytest.raises(RecordError, match=re.escape(f"{path}, row 0: column 'solution' has 2 roles")):
        load_records("local", 3, "test", path=tmp_path)


def test_hub_offline_says_what_to_use_instead(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConnectionError, match="source='hub' needs the Hugging Face hub") as error:
        load_records("hub", 3, "test")
    assert "source='generated'" in str(error.value) and "source='local'" in str(error.value)


def test_hub_source_reads_the_published_file_name(tmp_path):
    # A local folder stands in for the hub repository: datasets resolves data_files the same way.
    records = generate(2, 100, seed=4)
    write_jsonl(tmp_path / "test" / "people2_num100.jsonl", records)
    assert load_records("hub", 2, "test", hub_id=str(tmp_path), n=7) == records[:7]


def test_disjoint_removes_renamed_and_reordered_copies():
    val = generate(5, 20, seed=0)
    train = generate(5, 50, seed=9)
    copy = dict(val[3])
    statements = parse_statements(copy["statements"])
    # Reverse the people (person i becomes 4 - i) and swap commutative operands: the same puzzle.
    flip = {i: 4 - i for i in range(5)}

    def moved(stmt):
        if stmt[0] in ("telling-truth", "lying"):
            return (stmt[0], flip[stmt[1]])
        operands = [moved(arg) for arg in stmt[1:]]
        return (stmt[0], *(operands[::-1] if stmt[0] in ("and", "or", "<=>") else operands))

    copy["statements"] = str(tuple(moved(stmt) for stmt in statements[::-1]))
    copy["names"] = copy["names"][::-1]
    mixed = train[:10] + [copy] + train[10:]
    kept, removed = disjoint(map(kk_record, mixed), [kk_record(r) for r in val], KKTask().content_key)
    assert removed == 1 and [r.source for r in kept] == train


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("somewhere", 3, "test"), "source must be one of"),
        (("generated", 3, "validation"), "split must be one of"),
    ],
)
def test_bad_source_or_split(args, message):
    with pytest.raises(ValueError, match=message):
        load_records(*args)


def test_names_written_decomposed_load_composed_and_grade_alike(tmp_path):
    zoe_nfc, zoe_nfd = unicodedata.normalize("NFC", "Zoë"), unicodedata.normalize("NFD", "Zoë")
    records = generate(2, 3, seed=0)
    for record in records:
        old = record["names"][0]
        record["names"][0] = zoe_nfd
        record["quiz"] = record["quiz"].replace(old, zoe_nfd)
    write_jsonl(tmp_path / "test" / "people2_num3.jsonl", records)
    loaded = load_records("local", 2, "test", path=tmp_path)
    assert all(r["names"][0] == zoe_nfc and zoe_nfd not in r["quiz"] for r in loaded)
    roles = ["knight" if x else "knave" for x in loaded[0]["solution"]]
    other = loaded[0]["names"][1]
    answer = f"<think>.</think><answer>{zoe_nfd} is a {roles[0]}. {other} is a {roles[1]}.</answer>"
    assert grade(answer, loaded[0]["names"], loaded[0]["solution"]).correct, "a decomposed answer names the same Zoë"
