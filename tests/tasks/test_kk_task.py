"""K&K behind the task interface gives what today's path gives: the same records, rows, prompts,
grades, rewards and held-out split (so moving the runner onto tasks changes no result)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from core.models import resolve_model
from curriculum.data import to_rows
from curriculum.prompts import prompt_text, render_prompt
from curriculum.tasks import build_task
from curriculum.tasks.base import RewardSettings, disjoint, task_row
from curriculum.tasks.kk import KKTask
from curriculum.tasks.kk.grading.grader import grade
from curriculum.tasks.kk.rewards import answer_reward, format_reward
from curriculum.tasks.kk.sources import load_records
from curriculum.tasks.kk.statements import canonical_key

THINK = "<think>Zoey lies.</think><answer>{}</answer>"


def test_records_are_load_records_for_the_level():
    task = KKTask()
    for level, ppl in (("2ppl", 2), ("5ppl", 5)):
        for split, seed in (("train", 42), ("test", 1234)):
            ours = task.records(level, split, n=20, seed=seed)
            today = load_records("generated", ppl, split, n=20, seed=seed)
            assert [r.source for r in ours] == today
            assert [r.question for r in ours] == [t["quiz"] for t in today]
            assert {r.level for r in ours} == {level}


def test_rows_and_prompts_are_those_of_to_rows(make_cfg):
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model, cfg.paths.cache_dir))
    task = KKTask()
    records = task.records("3ppl", "train", n=6, seed=3)
    # the rows K&K trained on before the task layer: prompt, names, solution, ppl, id
    before = [{"prompt": prompt_text(render_prompt(r.source["quiz"], cfg.prompt, chat=bool(cfg.model.chat)), tokenizer),
               "names": list(r.source["names"]), "solution": [bool(x) for x in r.source["solution"]],
               "ppl": len(r.source["names"]), "id": f"{len(r.source['names'])}ppl-{r.source['index']}"}
              for r in records]
    ours = [task_row(r, prompt_text(task.render(r, cfg.prompt, chat=bool(cfg.model.chat)), tokenizer))
            for r in records]
    rows = to_rows(task, records, cfg.prompt, tokenizer, chat=bool(cfg.model.chat)).to_list()
    assert rows == ours
    assert [{k: v for k, v in row.items() if k != "level"} for row in ours] == before  # a level column is added
    assert all(row["level"] == "3ppl" for row in ours)
    assert task.render(records[0], cfg.prompt, chat=False) == render_prompt(records[0].question, cfg.prompt,
                                                                             chat=False)


@pytest.mark.parametrize(("answer", "fmt"), [
    ("Zoey is a knave, and Oliver is a knight.", "think_answer"),  # right
    ("Zoey is a knight, and Oliver is a knight.", "think_answer"),  # one role wrong
    ("Zoey might be a knave.", "think_answer"),  # hedged
    ("Zoey is a knave, and Oliver is a knight.", "answer_only"),  # right words, another format's tags
])
def test_grades_and_rewards_are_the_graders(answer, fmt):
    completion, names, solution = THINK.format(answer), ["Zoey", "Oliver"], [False, True]
    task = build_task({"name": "kk"}, fmt=fmt)  # the prompt's format, handed in as a run builds the task
    assert task.grade(completion, {"names": names, "solution": solution}) == grade(completion, names, solution,
                                                                                  fmt=fmt)
    batch = {"completions": [completion], "names": [names], "solution": [solution]}
    funcs = task.reward_functions(RewardSettings(fmt, 256))
    assert funcs["answer"](**batch) == answer_reward(**batch, fmt=fmt)
    assert funcs["format"](**batch) == format_reward(**batch, fmt=fmt)


def test_a_task_built_without_a_format_grades_the_default_one():
    completion, columns = THINK.format("Zoey is a knight."), {"names": ["Zoey"], "solution": [True]}
    assert KKTask().grade(completion, columns) == grade(completion, ["Zoey"], [True], fmt="think_answer")


def test_held_out_split_drops_renamed_twins_too():
    task = KKTask()
    train, held = task.records("2ppl", "train", n=50), task.records("2ppl", "train", n=10)
    kept, removed = disjoint(train, held, task.content_key)
    keys = {canonical_key(r.source) for r in held}
    assert kept == [r for r in train if canonical_key(r.source) not in keys] and removed == 12  # renamed twins too


def test_levels_are_the_people_counts_the_data_covers():
    assert KKTask().levels == ("2ppl", "3ppl", "4ppl", "5ppl", "6ppl", "7ppl", "8ppl")
