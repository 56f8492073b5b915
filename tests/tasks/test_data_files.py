"""Local data files as users have them: bytes that are not UTF-8, and files far larger than a pool."""

from __future__ import annotations

import json

import pytest

import curriculum.tasks.kk.sources
from curriculum.plan import build_plan
from curriculum.tasks.kk import generate
from curriculum.tasks.kk.sources import RecordError, load_records
from tests.pools import held_out_pools, stage_pool


def _write(path, lines: list[bytes]):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.mark.parametrize("bad, column", [
    (b"\xff", 1),  # Latin-1 or binary garbage where a record should start
    (b'{"quiz": "caf\xe9', 14),  # a Latin-1 e-acute inside a string
])
def test_bytes_that_are_not_utf8_are_named_with_file_line_and_column(tmp_path, bad, column):
    good = [json.dumps(r).encode() for r in generate(3, 4, seed=0)]
    path = _write(tmp_path / "test" / "people3_num4.jsonl", [*good[:2], bad, good[3]])
    with pytest.raises(RecordError, match=rf"^{path}:3: not UTF-8 \(byte 0x{bad[column - 1]:02x} at column {column}\)"):
        load_records("local", 3, "test", path=tmp_path)


def test_a_pool_reads_a_large_file_only_as_far_as_it_needs(tmp_path, make_cfg, monkeypatch):
    """100 training and 4 held-out puzzles from files of 5,000 records each: ~100 records are read and checked,
    not 10,000 (a 100,000-record file took 25 s and 460 MB before, 0.3 s and 6 MB after)."""
    for split, seed in (("train", 1), ("test", 2)):
        _write(tmp_path / split / "people3_num5000.jsonl", [json.dumps(r).encode() for r in generate(3, 5000, seed)])
    checked = []
    real = curriculum.tasks.kk.sources.normalize_record
    monkeypatch.setattr(curriculum.tasks.kk.sources, "normalize_record",
                        lambda raw, *a, **k: checked.append(1) or real(raw, *a, **k))
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "data=local", f"data.path={tmp_path}",
                   "eval.subsets=[3]", "eval.n=4", "curriculum.stages=[{name: a, ppl: 3, steps: 1, pool: 100}]",
                   "limits.max_pool=100")
    stage = build_plan(cfg)[0]
    held_out = held_out_pools(cfg, 3)
    training, _ = stage_pool(cfg, stage, held_out)
    assert len(training) == 100 and len(held_out["3ppl"]) == 4
    assert len(checked) <= 4 + 100 + 4, f"{len(checked)} records read for a pool of 100 and 4 held out"
