"""python -m curriculum.tasks.kk: generate files, check stored solutions, fail loudly on bad ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from curriculum.tasks.kk.__main__ import main

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared/data/kk-logic-rl"
REPO = Path(__file__).resolve().parents[2]


def test_generate_then_solve_agrees(tmp_path, capsys):
    out = tmp_path / "sub" / "six.jsonl"
    assert main(["generate", "--ppl", "6", "-n", "50", "--seed", "0", "-o", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 50 and len({r["statements"] for r in records}) == 50
    assert main(["solve", str(out)]) == 0
    assert "checked 50 records: 0 disagree" in capsys.readouterr().out


def test_solve_reports_each_wrong_record_and_exits_nonzero(tmp_path, capsys):
    out = tmp_path / "three.jsonl"
    main(["generate", "--ppl", "3", "-n", "5", "--seed", "1", "-o", str(out)])
    lines = out.read_text().splitlines()
    wrong = json.loads(lines[2])
    wrong["solution"] = [not role for role in wrong["solution"]]
    lines[2] = json.dumps(wrong)
    out.write_text("\n".join(lines) + "\n")
    assert main(["solve", str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"{out}:3: index 2: stored {wrong['solution']}" in printed
    assert "checked 5 records: 1 disagree" in printed


def test_solve_reads_published_parquet():
    path = SHARED_DATA / "4ppl/test.parquet"
    if not path.is_file():
        pytest.skip(f"shared K&K records not found at {path}")
    assert main(["solve", str(path)]) == 0


def test_bad_file_is_an_error_naming_the_line(tmp_path, capsys):
    out = tmp_path / "bad.jsonl"
    out.write_text('{"quiz": "x"}\nnot json\n')
    assert main(["solve", str(out)]) == 2
    assert f"{out}:1: missing field 'names'" in capsys.readouterr().err


def test_module_runs_as_a_program_and_writes_jsonl_to_stdout():
    command = ["generate", "--ppl", "3", "-n", "4", "--role-pair", "a sage,a fool"]
    program = [sys.executable, "-m", "curriculum.tasks.kk", *command]
    done = subprocess.run(program, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(records) == 4 and records[0]["knight_knave"]["knave"] == "fool"
