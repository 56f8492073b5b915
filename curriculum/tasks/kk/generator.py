"""Generate distinct unique-solution puzzles as records in the published K&K field format.

Two ways to pick puzzles, both drawing like the published sampler (see :mod:`curriculum.tasks.kk.space`):

- a space small enough to list (2 people: 900 combinations, 399 with one solution) is listed in
  full and ordered by weighted sampling without replacement (Efraimidis-Spirakis keys). That is
  the distribution of "draw, drop repeats and puzzles without exactly one solution", but it always
  terminates, and asking for more puzzles than exist warns and returns all of them;
- a larger space is sampled by rejection with a bounded number of attempts; running out of
  attempts (only when asking for a large share of a space) warns and returns what was found.

Puzzles are drawn from one seeded stream and worded from another, so ``generate(p, 100, s)`` is
the first 100 records of ``generate(p, 1000, s)``.
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from functools import lru_cache

from curriculum.tasks.kk.cot import COT_HEAD, told_search
from curriculum.tasks.kk.english import (
    COMMON_NAMES,
    KNIGHT_KNAVE,
    ROLE_PAIRS,
    SPEECH_TEMPLATES,
    claim_text,
    quiz_text,
    role_words,
    solution_text,
    solution_text_format,
)
from curriculum.tasks.kk.grammar import Statements
from curriculum.tasks.kk.solver import assignments_in
from curriculum.tasks.kk.space import PuzzleSpace, puzzle_space

#: The fields of a published K&K record, in the published order (every record `generate` makes has them).
RECORD_FIELDS = (
    "quiz",
    "names",
    "knight_knave",
    "solution",
    "solution_text",
    "solution_text_format",
    "cot_head",
    "cot_repeat_steps",
    "cot_foot",
    "statements",
    "index",
)
#: Spaces with at most this many statement combinations are listed instead of sampled.
ENUMERATION_LIMIT = 100_000
#: Rejection sampling gives up after this many draws per requested puzzle (plus a fixed reserve);
#: about one draw in three has exactly one solution, so this only runs out on an exhausted space.
ATTEMPTS_PER_PUZZLE = 100
ATTEMPTS_RESERVE = 10_000

RolePair = str | tuple[str, str] | None
Picks = tuple[int, ...]


def _has_one_solution(mask: int) -> bool:
    return mask != 0 and mask & (mask - 1) == 0


@lru_cache(maxsize=16)
def _listed_unique_puzzles(ppl: int, depth: int, width: int) -> tuple[Picks, ...]:
    space = puzzle_space(ppl, depth, width)
    every_puzzle = itertools.product(*(range(len(menu.statements)) for menu in space.menus))
    return tuple(picks for picks in every_puzzle if _has_one_solution(space.consistent(picks)))


def count_unique_puzzles(ppl: int, *, depth: int = 2, width: int = 2) -> int | None:
    """How many distinct puzzles with exactly one solution exist, or None if too many to list.

    >>> count_unique_puzzles(2)
    399
    """
    space = puzzle_space(ppl, depth, width)
    return len(_listed_unique_puzzles(ppl, depth, width)) if space.size <= ENUMERATION_LIMIT else None


def _pick_from_list(space: PuzzleSpace, n: int, rng: random.Random) -> list[Picks]:
    listed = _listed_unique_puzzles(space.n_people, space.depth, space.width)
    if n > len(listed):
        warnings.warn(
            f"only {len(listed)} distinct {space.n_people}-person puzzles with exactly one solution exist "
            f"(depth {space.depth}, width {space.width}); returning all {len(listed)}, not {n}",
            stacklevel=3,
        )
    # Keys log(u)/p, largest first: successive draws proportional to p among the puzzles left.
    keys = {picks: math.log(1.0 - rng.random()) / space.probability(picks) for picks in listed}
    return sorted(listed, key=keys.__getitem__, reverse=True)[:n]


def _pick_by_rejection(space: PuzzleSpace, n: int, rng: random.Random) -> list[Picks]:
    accepted: list[Picks] = []
    seen: set[Picks] = set()
    budget = ATTEMPTS_PER_PUZZLE * n + ATTEMPTS_RESERVE
    for _ in range(budget):
        if len(accepted) == n:
            return accepted
        picks = space.draw(rng)
        if picks not in seen and _has_one_solution(space.consistent(picks)):
            seen.add(picks)
            accepted.append(picks)
    if len(accepted) < n:
        warnings.warn(
            f"found only {len(accepted)} of {n} distinct {space.n_people}-person puzzles with one solution "
            f"in {budget} draws (depth {space.depth}, width {space.width}); returning those",
            stacklevel=3,
        )
    return accepted


def render_record(
    statements: Statements,
    solution: tuple[bool, ...],
    index: int,
    rng: random.Random,
    role_pair: RolePair = None,
) -> dict:
    """Word one puzzle and its solution as a published K&K record (names and templates from ``rng``)."""
    n_people = len(statements)
    names = rng.sample(COMMON_NAMES, n_people)
    pair = rng.choice(ROLE_PAIRS) if role_pair == "random" else (role_pair or KNIGHT_KNAVE)
    words = role_words(pair)
    templates = [rng.choice(SPEECH_TEMPLATES) for _ in range(n_people)]
    claims = [claim_text(stmt, names, words) for stmt in statements]
    steps, foot = told_search(statements, names, claims, words)
    return {
        "quiz": quiz_text(names, claims, templates, words),
        "names": names,
        "knight_knave": words,
        "solution": list(solution),
        "solution_text": solution_text(names, solution, words),
        "solution_text_format": solution_text_format(names, solution, words),
        "cot_head": COT_HEAD,
        "cot_repeat_steps": steps,
        "cot_foot": foot,
        "statements": str(statements),
        "index": index,
    }


def generate(
    ppl: int, n: int, seed: int, *, depth: int = 2, width: int = 2, role_pair: RolePair = None
) -> list[dict]:
    """``n`` distinct puzzles of ``ppl`` people, each with exactly one solution, as published records.

    ``depth`` 2 (published) lets a statement be one operator over bare claims; ``depth`` 1 allows
    bare claims only, which never pin down a unique solution (flipping everyone keeps it
    consistent), so it yields nothing. ``width`` is the most operands of ``and``/``or``.
    ``role_pair`` is None (knight/knave), a pair like ``("a saint", "a sinner")``, or "random" (one
    of :data:`~curriculum.tasks.kk.english.ROLE_PAIRS` per puzzle). ``index`` counts from 0. The same
    arguments give the same records; more puzzles than exist warn and return all that exist.

    >>> from curriculum.tasks.kk import solve
    >>> records = generate(3, 2, seed=0)
    >>> [len(solve(r["statements"])) for r in records], records[0]["quiz"].endswith("who is a knave?")
    ([1, 1], True)
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if role_pair not in (None, "random") and (isinstance(role_pair, str) or len(role_pair) != 2):
        raise ValueError(f'role_pair must be None, "random" or like ("a saint", "a sinner"): {role_pair!r}')
    space = puzzle_space(ppl, depth, width)
    # Separate streams: picking puzzles never depends on how earlier ones were worded.
    picks_rng = random.Random(f"kk-puzzles:{seed}")
    words_rng = random.Random(f"kk-words:{seed}")
    if space.size <= ENUMERATION_LIMIT:
        chosen = _pick_from_list(space, n, picks_rng)
    else:
        chosen = _pick_by_rejection(space, n, picks_rng)
    records = []
    for index, picks in enumerate(chosen):
        (solution,) = assignments_in(space.consistent(picks), ppl)
        records.append(render_record(space.statements(picks), solution, index, words_rng, role_pair))
    return records
