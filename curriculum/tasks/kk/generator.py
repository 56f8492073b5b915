"""Distinct unique-solution puzzles, drawn as the published sampler draws them, as published records.

The published ``_sample_statement`` rolls a die: 0 a bare leaf, 1 ``not``, 2/3 ``and``/``or`` with 2..width
operands, 4/5 ``->``/``<=>``, over leaves drawn without repeats (any but ``('lying', speaker)``). Each person's
statements are listed once with their probabilities (`puzzle_space`), so a puzzle is solved by ``&``-ing masks. A
space small enough to list is ordered by weighted sampling without replacement (Efraimidis-Spirakis keys: the
distribution of "draw, drop repeats and puzzles without one solution", but it terminates); a larger one is sampled
by rejection. Puzzles and words come from two seeded streams: ``generate(p, 100, s)`` starts ``generate(p, 1000, s)``.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import warnings
from dataclasses import dataclass
from functools import lru_cache

from curriculum.tasks.kk.english import RolePair, render_record
from curriculum.tasks.kk.statements import MAX_PEOPLE, Statement, assignments_in, knight_masks, statement_mask

#: The fields of a published K&K record, in the published order (every record `generate` makes has them).
RECORD_FIELDS = ("quiz", "names", "knight_knave", "solution", "solution_text", "solution_text_format", "cot_head",
                 "cot_repeat_steps", "cot_foot", "statements", "index")
ENUMERATION_LIMIT = 100_000  # Spaces with at most this many statement combinations are listed instead of sampled.
#: Rejection sampling gives up after this many draws per requested puzzle (plus a fixed reserve);
#: about one draw in three has exactly one solution, so this only runs out on an exhausted space.
ATTEMPTS_PER_PUZZLE = 100
ATTEMPTS_RESERVE = 10_000
#: Listing more statements per person than this takes seconds and memory for no real use.
MAX_STATEMENTS_PER_PERSON = 100_000
_DIE_FACE = 1 / 6  # probability of one face of the published die

Picks = tuple[int, ...]


def statement_probabilities(speaker: int, n_people: int, depth: int, width: int) -> list[tuple[Statement, float]]:
    """Each statement ``speaker`` can make and its probability under the published dice.

    >>> options = statement_probabilities(0, 2, depth=2, width=2)
    >>> len(options), round(sum(p for _, p in options), 12)
    (30, 1.0)
    """
    # ('lying', speaker) is "I am a knave": no knight or knave can say it, so it is never drawn
    leaves: list[Statement] = [("telling-truth", i) for i in range(n_people)]
    leaves += [("lying", i) for i in range(n_people) if i != speaker]
    leaf_probability = 1 / len(leaves)
    if depth == 1:
        return [(leaf, leaf_probability) for leaf in leaves]
    options = [(leaf, _DIE_FACE * leaf_probability) for leaf in leaves]
    options += [(("not", leaf), _DIE_FACE * leaf_probability) for leaf in leaves]
    for operator in ("and", "or"):
        for n_operands in range(2, width + 1):
            # operand count uniform over 2..width, then every ordered tuple of distinct leaves
            probability = _DIE_FACE / (width - 1) / math.perm(len(leaves), n_operands)
            options += [((operator, *ops), probability) for ops in itertools.permutations(leaves, n_operands)]
    for operator in ("->", "<=>"):
        probability = _DIE_FACE / math.perm(len(leaves), 2)
        options += [((operator, *ops), probability) for ops in itertools.permutations(leaves, 2)]
    return options


@dataclass(frozen=True)
class SpeakerMenu:
    """One person's possible statements, their running probability total and consistency masks."""

    statements: tuple[Statement, ...]
    probabilities: tuple[float, ...]
    cumulative: tuple[float, ...]
    #: per statement, the assignments in which the speaker is a knight exactly when it is true
    consistent: tuple[int, ...]


@dataclass(frozen=True)
class PuzzleSpace:
    """All puzzles of a size; ``size``: statement combinations (puzzles before the unique-solution filter)."""

    n_people: int
    depth: int
    width: int
    menus: tuple[SpeakerMenu, ...]
    size: int

    def consistent(self, picks: Picks) -> int:
        """The mask of assignments that solve the puzzle ``picks`` (one statement index per person)."""
        mask = knight_masks(self.n_people)[1]
        for menu, pick in zip(self.menus, picks, strict=True):
            mask &= menu.consistent[pick]
        return mask


@lru_cache(maxsize=32)
def puzzle_space(n_people: int, depth: int = 2, width: int = 2) -> PuzzleSpace:
    """The (cached) space for a puzzle size; depth 1 means bare leaves, 2 one operator over leaves.

    >>> puzzle_space(2).size, len(_listed_unique_puzzles(2, 2, 2))  # 399 of them have exactly one solution
    (900, 399)
    """
    if not 2 <= n_people <= MAX_PEOPLE:
        raise ValueError(f"ppl must be between 2 and {MAX_PEOPLE}, got {n_people}")
    if depth not in (1, 2):
        raise ValueError(f"depth must be 1 or 2 (the published English covers no deeper trees), got {depth}")
    n_leaves = 2 * n_people - 1
    if not 2 <= width <= n_leaves:
        # more operands than distinct leaves would make the published sampler loop forever
        raise ValueError(f"width must be between 2 and {n_leaves} for {n_people} people, got {width}")
    n_and_or = sum(math.perm(n_leaves, k) for k in range(2, width + 1)) if depth == 2 else 0
    if 2 * n_and_or > MAX_STATEMENTS_PER_PERSON:
        raise ValueError(f"width {width} gives {2 * n_and_or} and/or statements per person at {n_people} people, "
                         f"over the {MAX_STATEMENTS_PER_PERSON} this generator lists; use a smaller width")
    knights, all_bits = knight_masks(n_people)
    menus = []
    for speaker in range(n_people):
        statements, probabilities = zip(*statement_probabilities(speaker, n_people, depth, width), strict=True)
        consistent = tuple(all_bits ^ (knights[speaker] ^ statement_mask(stmt, knights, all_bits))
                           for stmt in statements)
        cumulative = tuple(itertools.accumulate(probabilities))
        menus.append(SpeakerMenu(statements, probabilities, cumulative, consistent))
    return PuzzleSpace(n_people, depth, width, tuple(menus), math.prod(len(menu.statements) for menu in menus))


def _has_one_solution(mask: int) -> bool:
    return mask != 0 and mask & (mask - 1) == 0


@lru_cache(maxsize=16)
def _listed_unique_puzzles(ppl: int, depth: int, width: int) -> tuple[Picks, ...]:
    space = puzzle_space(ppl, depth, width)
    every_puzzle = itertools.product(*(range(len(menu.statements)) for menu in space.menus))
    return tuple(picks for picks in every_puzzle if _has_one_solution(space.consistent(picks)))


def _pick_from_list(space: PuzzleSpace, n: int, rng: random.Random) -> list[Picks]:
    listed = _listed_unique_puzzles(space.n_people, space.depth, space.width)
    if n > len(listed):
        warnings.warn(f"only {len(listed)} distinct {space.n_people}-person puzzles with exactly one solution exist "
                      f"(depth {space.depth}, width {space.width}); returning all {len(listed)}, not {n}", stacklevel=3)
    # Keys log(u)/p, largest first: successive draws proportional to p among the puzzles left.
    keys = {picks: math.log(1.0 - rng.random())
            / math.prod(menu.probabilities[pick] for menu, pick in zip(space.menus, picks, strict=True))
            for picks in listed}
    return sorted(listed, key=keys.__getitem__, reverse=True)[:n]


def _pick_by_rejection(space: PuzzleSpace, n: int, rng: random.Random) -> list[Picks]:
    accepted: list[Picks] = []
    seen: set[Picks] = set()
    budget = ATTEMPTS_PER_PUZZLE * n + ATTEMPTS_RESERVE
    for _ in range(budget):
        if len(accepted) == n:
            return accepted
        # a statement per person, drawn with the published probabilities (min: the float edge of the last bucket)
        picks = tuple(min(bisect.bisect_right(menu.cumulative, rng.random() * menu.cumulative[-1]),
                          len(menu.statements) - 1) for menu in space.menus)
        if picks not in seen and _has_one_solution(space.consistent(picks)):
            seen.add(picks)
            accepted.append(picks)
    if len(accepted) < n:
        warnings.warn(f"found only {len(accepted)} of {n} distinct {space.n_people}-person puzzles with one solution "
                      f"in {budget} draws (depth {space.depth}, width {space.width}); returning those", stacklevel=3)
    return accepted


def generate(ppl: int, n: int, seed: int, *, depth: int = 2, width: int = 2, role_pair: RolePair = None) -> list[dict]:
    """``n`` distinct puzzles of ``ppl`` people, each with exactly one solution, as published records.

    ``depth`` 1 (bare claims only) never pins down one solution (flipping everyone keeps it consistent), so it
    yields nothing; ``width`` is the most operands of ``and``/``or``; ``role_pair`` is None (knight/knave), a pair
    like ``("a saint", "a sinner")``, or "random" (one of `english.ROLE_PAIRS` per puzzle).

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
    # separate streams: picking puzzles never depends on how earlier ones were worded
    picks_rng = random.Random(f"kk-puzzles:{seed}")
    words_rng = random.Random(f"kk-words:{seed}")
    pick = _pick_from_list if space.size <= ENUMERATION_LIMIT else _pick_by_rejection
    records = []
    for index, picks in enumerate(pick(space, n, picks_rng)):
        (solution,) = assignments_in(space.consistent(picks), ppl)
        statements = tuple(menu.statements[p] for menu, p in zip(space.menus, picks, strict=True))
        records.append(render_record(statements, solution, index, words_rng, role_pair))
    return records
