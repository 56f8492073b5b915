"""The report's Training rollouts section, on a hand-made rollouts.jsonl: per GRPO stage the group whose rewards
spread widest (its best and worst completion), a group without signal, each completion's components and advantage."""

from __future__ import annotations

import json
from pathlib import Path

from eval.report.cli import write_report
from tests.report.test_report import KK_REPORT, stage_entry, write_jsonl

WEIGHTS = {"format": 0.5, "answer": 2.0}


def group(stage: int, step: int, prompt: str, parts: list[tuple[float, float]]) -> list[dict]:
    """One group's rows as train/tracking.py writes them: (format, answer) per completion, GRPO's advantage."""
    rewards = [WEIGHTS["format"] * f + WEIGHTS["answer"] * a for f, a in parts]
    mean = sum(rewards) / len(rewards)
    return [{"stage": stage, "stage_name": f"{stage + 1}ppl", "stage_step": step, "global_step": step,
             "completion_index": k, "prompt": prompt, "completion": f"stage {stage} step {step} completion {k}",
             "rewards": {"format": f, "answer": a}, "reward": r, "advantage": r - mean}
            for k, ((f, a), r) in enumerate(zip(parts, rewards, strict=True))]


def test_each_grpo_stage_shows_its_widest_group_and_one_without_signal(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "done", "stages": [stage_entry(1, 2, "done", 0, 2)],
                                                    "task_report": KK_REPORT}))
    rows = [*group(1, 1, "P1 <script>", [(1, 0), (0, 0), (1, 0), (1, 0)]),  # spread 0.5
            *group(1, 1, "P2", [(1, 1), (0, 0), (1, 0), (0, 0)]),  # spread 2.5: the widest
            *group(1, 2, "P3", [(1, 0)] * 4),  # no signal
            *group(2, 1, "P4", [(0, 0)] * 4)]  # a stage whose one group had no signal
    write_jsonl(run / "rollouts.jsonl", rows, torn='{"stage": 2, "stage')
    out = write_report(run)
    section = (out / "report.md").read_text().split("## Training rollouts")[1].split("\n## ")[0]
    headings = [line for line in section.splitlines() if line.startswith("### ")]
    assert headings == ["### 2ppl, step 1: a group with signal: the widest spread of rewards",
                        "### 2ppl, step 2: a group without signal: every reward equal, every advantage 0",
                        "### 3ppl, step 1: a group without signal: every reward equal, every advantage 0"]
    table = [line for line in section.split("### 2ppl, step 2")[0].splitlines() if line.startswith("| ")]
    assert table[0] == "| completion | format | answer | reward (weighted) | advantage |"
    assert table[1] == "| 1 | 1.00 | 1.00 | 2.500 | +1.75 |"  # 2.5 less the group's mean 0.75
    assert "**best**: completion 1, reward 2.500, advantage +1.75" in section
    assert "**worst**: completion 2, reward 0.000, advantage -0.75" in section  # the first of the two at 0
    assert "stage 1 step 1 completion 1\n" in section and "all 4 completions scored 0.500" in section
    assert "skipped 1 unreadable line(s)" in section
    html = (out / "report.html").read_text()
    assert html.count("<details><summary>the prompt</summary><pre>") == 3 and "<script>" not in html
