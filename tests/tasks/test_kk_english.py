"""curriculum.tasks.kk English and chain of thought reproduce the published records word for word."""

from __future__ import annotations

from pathlib import Path

import pytest

from curriculum.tasks.kk import SPEECH_TEMPLATES, chain_of_thought, claim_text, parse_statements, role_words
from curriculum.tasks.kk.english import COMMON_NAMES, ROLE_PAIRS, quiz_text, solution_text, solution_text_format

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared/data/kk-logic-rl"
COLUMNS = ["quiz", "names", "knight_knave", "solution", "solution_text", "solution_text_format", "cot_head",
           "cot_repeat_steps", "cot_foot", "statements"]


@pytest.fixture(scope="module")
def published_records() -> list[dict]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared K&K records not found at {SHARED_DATA}")
    import pyarrow.parquet as pq

    files = sorted(SHARED_DATA.glob("*ppl/*.parquet"))
    return [row for path in files for row in pq.read_table(path, columns=COLUMNS).to_pylist()]


def claims_and_templates(record: dict) -> tuple[list[str], list[str]]:
    """Our claims, and per person which speech template frames that claim in the published quiz."""
    names, words = record["names"], record["knight_knave"]
    claims = [claim_text(stmt, names, words) for stmt in parse_statements(record["statements"])]
    start = record["quiz"].index(" inhabitants: ")
    cursor = record["quiz"].index(". ", start) + 1  # end of "You meet ...: A, B, and C."
    used = []
    for name, claim in zip(names, claims, strict=True):
        sentences = {" " + t.format(name=name, content=claim): t for t in SPEECH_TEMPLATES}
        framed = [t for sentence, t in sentences.items() if record["quiz"].startswith(sentence, cursor)]
        assert len(framed) == 1, f"no unique template for {name} in {record['quiz']!r}"
        used.append(framed[0])
        cursor += 1 + len(framed[0].format(name=name, content=claim))
    return claims, used


def test_every_published_quiz_is_reproduced(published_records):
    for record in published_records:
        claims, templates = claims_and_templates(record)
        assert quiz_text(record["names"], claims, templates, record["knight_knave"]) == record["quiz"]
        assert record["knight_knave"] == role_words()


def test_every_published_solution_text_is_reproduced(published_records):
    for record in published_records:
        names, words, solution = record["names"], record["knight_knave"], record["solution"]
        assert solution_text(names, solution, words) == record["solution_text"]
        assert solution_text_format(names, solution, words) == record["solution_text_format"]


def test_every_published_chain_of_thought_is_reproduced(published_records):
    for record in published_records:
        head, steps, foot = chain_of_thought(record["statements"], record["names"], record["knight_knave"])
        assert (head, steps, foot) == (record["cot_head"], record["cot_repeat_steps"], record["cot_foot"])


def test_published_name_pool_and_templates():
    assert len(COMMON_NAMES) == len(set(COMMON_NAMES)) == 51
    assert len(SPEECH_TEMPLATES) == len(set(SPEECH_TEMPLATES)) == 18
    assert all("{name}" in t and "{content}" in t for t in SPEECH_TEMPLATES)


def test_role_pairs_reword_everything():
    words = role_words(ROLE_PAIRS[3])  # ("an angel", "a devil")
    names = ["Zoey", "Oliver"]
    statements = (("not", ("telling-truth", 1)), ("<=>", ("telling-truth", 1), ("lying", 0)))
    claims = [claim_text(stmt, names, words) for stmt in statements]
    quiz = quiz_text(names, claims, [SPEECH_TEMPLATES[0]] * 2, words)
    assert quiz.startswith("A very special island is inhabited only by angels and devils. Angels always tell")
    assert "Zoey said that Oliver is not an angel." in quiz
    assert quiz.endswith("So who is an angel and who is a devil?")
    assert "knight" not in quiz and "knave" not in quiz
    _, steps, _ = chain_of_thought(statements, names, words)
    assert steps[0] == (
        "Assume Zoey is an angel. No contradiction is found in their claim that Oliver is not an angel."
    )

