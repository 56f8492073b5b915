"""reward=logic_rl_strict reads answers exactly as Logic-RL's parser does, and +curriculum=kk_logicrl is its recipe.

The oracle is the published parser itself, kept verbatim in tests/reference/logic_rl_kk.py: the port
(curriculum/tasks/kk/grading/logic_rl.py) must give its score on a table of cases, on random responses, and on the
published records; the table also shows where this project's lenient grader (reward=tiered, scheme logic_rl) and
Logic-RL part.
"""

from __future__ import annotations

import contextlib
import io
import json

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from core.models import resolve_model
from core.rundir.files import METRICS, read_jsonl
from curriculum.prompts import prompt_text, render_prompt
from curriculum.tasks.kk import KKTask
from curriculum.tasks.kk.english import solution_text_format
from curriculum.tasks.kk.grading.logic_rl import logic_rl_scores
from curriculum.tasks.kk.rewards import tiered_reward
from tests.conftest import SHARED_DATA, compose_cfg
from tests.reference import logic_rl_kk as published
from train.rewards.reward_group import task_reward_funcs

# The end of a Logic-RL qwen-instruct prompt: the assistant turn, <think> pre-filled.
PROMPT = "<|im_start|>system\nS\n<|im_end|>\n<|im_start|>user\nQ\n<|im_end|>\n<|im_start|>assistant\n<think>"
NAMES, SOLUTION = ["Zoey", "Ava"], [True, True]
RIGHT = "(1) Zoey is a knight\n(2) Ava is a knight"


def published_score(prompt: str, completion: str, names, solution) -> float:
    """Logic-RL's compute_score on the decoded prompt + response, its prints swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return float(published.compute_score(prompt + completion,
                                              {"solution_text_format": solution_text_format(names, solution)}))


# (completion, this project's grader under the logic_rl table, Logic-RL's score). Zoey and Ava are knights.
CASES = [
    # the format Logic-RL's prompt asks for: both read it right
    (f"Both tell the truth.</think><answer>{RIGHT}</answer>", 3.0, 3.0),
    # "Knights" says the role once for two people, so Logic-RL's count check fails (-2 + 1)
    ("Both tell the truth.</think><answer>Knights: Zoey, Ava</answer>", 3.0, -1.0),
    # a collective: no "<name> is a <role>" sentence for either person
    ("Both tell the truth.</think><answer>Zoey and Ava are both knights.</answer>", 3.0, -1.0),
    # "name: role" lists: the grader reads them, Logic-RL needs "is a"
    ("x</think><answer>(1) Zoey: knight\n(2) Ava: knight</answer>", 3.0, -1.0),
    # order and case do not matter to either
    ("x</think><answer>(1) Ava is a knight\n(2) Zoey is a knight</answer>", 3.0, 3.0),
    ("x</think><answer>(1) zoey IS A KNIGHT\n(2) ava is a knight</answer>", 3.0, 3.0),
    # one role wrong: wrong for both (+1 - 1.5)
    ("x</think><answer>(1) Zoey is a knight\n(2) Ava is a knave</answer>", -0.5, -0.5),
    # a third role word ("not a knave") breaks Logic-RL's count; the grader reads the negation
    ("x</think><answer>(1) Zoey is a knight, not a knave\n(2) Ava is a knight</answer>", 3.0, -1.0),
    # a role for someone not in the puzzle: the grader calls it wrong, Logic-RL's count check unparseable
    (f"x</think><answer>{RIGHT}\n(3) Bob is a knave</answer>", -0.5, -1.0),
    # "knightly" counts as a role word for Logic-RL and is no role for the grader: unparseable in both
    ("x</think><answer>(1) Zoey is a knightly one\n(2) Ava is a knight</answer>", -1.0, -1.0),
    # text around the answer: the grader's strict format refuses text after </answer>, Logic-RL does not look
    (f"x</think> So: <answer>{RIGHT}</answer> Done.", -3.0, 3.0),
    # "is a" then a line break: Logic-RL's \s+ crosses lines, the grader does not read it
    ("x</think><answer>(1) Zoey is a knight\n(2) Ava is a\nknight</answer>", -1.0, 3.0),
    # a second <think> (the prompt pre-fills one): a format failure for both
    (f"<think>x</think><answer>{RIGHT}</answer>", -3.0, -3.0),
    # two answer blocks: each tag must appear once
    (f"x</think><answer>{RIGHT}</answer><answer>(1) Zoey is a knave\n(2) Ava is a knave</answer>", -3.0, -3.0),
    # the answer inside the think block, or never closed
    (f"x<answer>{RIGHT}</answer></think>", -3.0, -3.0),
    (f"x</think><answer>{RIGHT}", -3.0, -3.0),
    # an empty answer: format right (+1), answer unparseable (-2)
    ("x</think><answer></answer>", -1.0, -1.0),
    # "Assistant:" in the response: Logic-RL cuts the sequence at its first "Assistant:", dropping the tags before
    (f"x</think><answer>{RIGHT}</answer> Assistant: <answer>(1) Zoey is a knave</answer>", -3.0, -3.0),
]


@pytest.mark.parametrize(("completion", "grader", "logic_rl"), CASES)
def test_a_table_of_answers_scored_by_the_grader_and_by_logic_rl(completion, grader, logic_rl):
    assert tiered_reward([completion], [NAMES], [SOLUTION], fmt="logic_rl") == [grader]
    assert logic_rl_scores([PROMPT], [completion], [NAMES], [SOLUTION]) == [logic_rl]
    assert published_score(PROMPT, completion, NAMES, SOLUTION) == logic_rl


# Pieces a response is built from: every tag, both role words (cased, inside other words), names (one a prefix
# of another), the "is a" of Logic-RL's regex, the headers its split looks for, and separators.
FRAGMENTS = ["<think>", "</think>", "<answer>", "</answer>", "knight", "Knights", "knave", "KNAVE", "knightly",
             "Zoey", "Ava", "Avalon", " is a ", " is  a ", " IS A ", "(1) ", "(2) ", "\n", " ", ", ", ": ",
             "Assistant:", "<|im_start|>assistant", "not ", "and ", "."]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=24).map("".join),
       st.sampled_from([PROMPT, "Assistant: <think>", "no header <think>"]),
       st.lists(st.booleans(), min_size=2, max_size=2))
def test_the_port_scores_every_response_as_the_published_parser(completion, prompt, roles):
    assert logic_rl_scores([prompt], [completion], [NAMES], [roles]) == [
        published_score(prompt, completion, NAMES, roles)]


def test_the_preset_is_logic_rls_score_alone_with_accuracy_logged(make_cfg):
    funcs, weights = task_reward_funcs(make_cfg("reward=logic_rl_strict").reward, KKTask(), fmt="logic_rl",
                                       max_completion_length=64)
    assert [f.__name__ for f in funcs] == ["answer", "logic_rl_strict"] and weights == [0.0, 1.0]
    completion = "x</think><answer>Knights: Zoey, Ava</answer>"
    batch = {"completions": [completion], "names": [NAMES], "solution": [SOLUTION], "prompts": [PROMPT]}
    assert [f(**batch) for f in funcs] == [[1.0], [-1.0]]  # right for the grader's accuracy, -1 as reward


def test_kk_logicrl_is_the_published_recipe(make_cfg):
    cfg = make_cfg("+curriculum=kk_logicrl")
    assert (cfg.data.source, cfg.prompt.name) == ("hub", "logic_rl")
    assert cfg.reward.weights.logic_rl_strict == 1.0 and cfg.reward.weights.tiered == 0.0
    # curriculum.sh: lr 5e-7, 8 prompts x 8, 4096 tokens, KL 0.001; Logic-RL issue #50: temperature 0.7;
    # verl: entropy 0.001
    grpo = cfg.grpo
    assert (grpo.learning_rate, grpo.num_generations, grpo.max_completion_length, grpo.beta) == (5e-7, 8, 4096, 0.001)
    assert (grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps, grpo.temperature) == (64, 0.7)
    assert (grpo.entropy_coef, grpo.scale_rewards) == (0.001, "batch")
    assert list(cfg.eval.subsets) == [3, 4, 5, 6, 7]


def needs_shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared K&K records not found at {SHARED_DATA}")


def published_rows() -> list[dict]:
    return [row for ppl in range(3, 8) for split in ("train", "test")
            for row in pq.read_table(SHARED_DATA / f"{ppl}ppl" / f"{split}.parquet").to_pylist()]


def test_on_the_published_records_prompt_truth_and_score_are_logic_rls(cache_dir, make_cfg):
    """Logic-RL's 5,000 processed records: our logic_rl prompt through a ChatML template (Qwen2.5's) is their
    prompt, character for character; their ground truth is our names and roles; their own answer scores 3."""
    needs_shared_data()
    cfg = make_cfg("+curriculum=kk_logicrl", "model=tiny")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model, cache_dir))
    rows = published_rows()
    assert len(rows) == 5000
    for row in rows:
        assert prompt_text(render_prompt(row["quiz"], cfg.prompt, chat=True), tokenizer) == row["prompt"][0]["content"]
        truth = row["reward_model"]["ground_truth"]["solution_text_format"]
        assert solution_text_format(row["names"], row["solution"]) == truth
        answer = f"Reasoning.</think><answer>{truth}</answer>"
        assert logic_rl_scores([row["prompt"][0]["content"]], [answer], [row["names"]], [row["solution"]]) == [3.0]


@pytest.mark.run
def test_kk_logicrl_trains_on_the_published_records_with_logic_rls_reward(cache_dir, tmp_path):
    """A smoke stage of kk_logicrl on Logic-RL's own files (data=local): the pool is their 3ppl train split,
    and the reward TRL logs is Logic-RL's score (-3..3) of the tiny model's completions."""
    needs_shared_data()
    from curriculum.plan import build_plan
    from tests.pools import held_out_pools, stage_pool
    from train.run.runner import run_curriculum
    from train.settings import read_settings

    cfg = compose_cfg(cache_dir, "+curriculum=kk_logicrl", "experiment=smoke", "data=local",
                      f"data.path={SHARED_DATA}", "eval.subsets=[3]", output_dir=tmp_path)
    cfg.curriculum.stages = cfg.curriculum.stages[:1]
    published_train = {r["index"] for r in pq.read_table(SHARED_DATA / "3ppl/train.parquet").to_pylist()}
    pool, _ = stage_pool(cfg, build_plan(cfg)[0], held_out_pools(cfg, 3))
    assert len(pool) == 16 and {r.source["index"] for r in pool} <= published_train  # smoke's max_pool, all published
    run_dir = tmp_path / "run"
    run_curriculum(read_settings(cfg), run_dir)
    steps = [r for r in read_jsonl(run_dir / METRICS) if r.get("kind") == "step"]
    assert steps and all(-3.0 <= r["rewards/logic_rl_strict/mean"] <= 3.0 for r in steps)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["stages"][0]["status"] == "done"
    samples = read_jsonl(run_dir / "samples" / "1-3ppl" / "3ppl.jsonl")
    held_out = {int(s["id"].split("-")[1]) for s in samples}
    assert held_out and not held_out & published_train, "validation reads Logic-RL's test split, never its train"
