"""``python -m curriculum.tasks.gsm8k.sample``: the offline GSM8K-format sample, from reasoning-gym.

reasoning-gym's ``gsm_symbolic`` (GSM8K problems as templates with fresh names and numbers) in GSM8K's format, so
``source=sample`` runs the ``source=local`` loader; the same arguments write the same files (train and test drawn
a million seeds apart, a train question that is a test question skipped). Needs the rgym extra.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Iterator
from pathlib import Path

from curriculum.tasks.base import normalized_question
from curriculum.tasks.gsm8k.grader import reference_answer
from curriculum.tasks.gsm8k.task import LEVELS, SAMPLE_DIR, solution_level

SUFFIX = " Give the result as your final answer. Do not include units."
TEST_SEED_OFFSET = 1_000_000
MAX_DRAWS = 20_000  # Draws per split before giving up on filling every level (6+ steps is about one draw in ten).


def gsm_symbolic_rows(seed: int) -> Iterator[dict[str, str]]:
    """gsm_symbolic's problems in GSM8K's format, in draw order; a question ending in SUFFIX loses it."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset("gsm_symbolic", seed=seed, size=MAX_DRAWS)
    for entry in dataset:
        steps, _, final = entry["metadata"]["answer_cot"].rpartition("####")
        answer = reference_answer(f"#### {entry['answer']}")
        if answer is None or reference_answer(f"#### {final}") is None \
                or answer.text != reference_answer(f"#### {final}").text:
            raise ValueError(f"gsm_symbolic seed {seed}: a solution whose #### differs from its answer: {entry}")
        # the answer as reasoning-gym formats it: "#### 4914", where the chain of thought may say "4914.0"
        yield {"question": entry["question"].removesuffix(SUFFIX), "answer": f"{steps}#### {entry['answer']}"}


def sample_split(seed: int, per_level: int, exclude: Collection[str] = ()) -> list[dict[str, str]]:
    """`per_level` distinct problems of each level, in draw order, none whose question is in `exclude`."""
    taken = dict.fromkeys(LEVELS, 0)
    seen, rows = set(exclude), []
    for row in gsm_symbolic_rows(seed):
        level, key = solution_level(row["answer"]), normalized_question(row["question"])
        if level is None or taken[level] >= per_level or key in seen:
            continue
        seen.add(key)
        taken[level] += 1
        rows.append(row)
        if all(count >= per_level for count in taken.values()):
            return rows
    raise RuntimeError(f"gsm_symbolic seed {seed}: {MAX_DRAWS} draws did not give {per_level} of every level: {taken}")


def write_sample(out: Path, *, seed: int = 0, train_per_level: int = 40, test_per_level: int = 12) -> dict[str, int]:
    """Write ``train.jsonl`` and ``test.jsonl`` under `out`; returns the rows written per split."""
    test = sample_split(seed + TEST_SEED_OFFSET, test_per_level)
    train = sample_split(seed, train_per_level, {normalized_question(r["question"]) for r in test})
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return {"train": len(train), "test": len(test)}


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(prog="python -m curriculum.tasks.gsm8k.sample",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SAMPLE_DIR, help="folder for train.jsonl and test.jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-per-level", type=int, default=40)
    parser.add_argument("--test-per-level", type=int, default=12)
    args = parser.parse_args(argv)
    written = write_sample(args.out, seed=args.seed, train_per_level=args.train_per_level,
                           test_per_level=args.test_per_level)
    print(f"wrote {written['train']} train and {written['test']} test problems to {args.out}")
    return written


if __name__ == "__main__":
    main()
