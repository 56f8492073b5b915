"""Every statement the published sampler can give a person, with the probability it gives it.

The published ``_sample_statement`` rolls a six-sided die: 0 a bare leaf, 1 ``not``, 2/3 ``and``/
``or`` with 2..width operands, 4/5 ``->``/``<=>``; operands are leaves (depth 2), drawn without
repeats; a leaf is any ``('telling-truth', i)`` or ``('lying', i)`` except ``('lying', speaker)``.
Listing those outcomes with their probabilities once per (people, depth, width) lets the
generator draw a statement with one ``bisect`` and solve a puzzle by ``&``-ing precomputed masks,
and lets a small space (2 people: 30 statements each) be enumerated exactly.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass
from functools import lru_cache

from curriculum.tasks.kk.grammar import Statement, Statements
from curriculum.tasks.kk.solver import MAX_PEOPLE, all_assignments_mask, knight_masks, statement_mask

_DIE_FACE = 1 / 6  # probability of one face of the published die
#: Listing more statements per person than this takes seconds and memory for no real use.
MAX_STATEMENTS_PER_PERSON = 100_000


def _leaves(speaker: int, n_people: int) -> list[Statement]:
    # ('lying', speaker) is "I am a knave": no knight or knave can say it, so it is never drawn.
    return [("telling-truth", i) for i in range(n_people)] + [
        ("lying", i) for i in range(n_people) if i != speaker
    ]


def statement_probabilities(
    speaker: int, n_people: int, depth: int, width: int
) -> list[tuple[Statement, float]]:
    """Each statement ``speaker`` can make and its probability under the published dice.

    >>> options = statement_probabilities(0, 2, depth=2, width=2)
    >>> len(options), round(sum(p for _, p in options), 12)
    (30, 1.0)
    """
    leaves = _leaves(speaker, n_people)
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

    def draw(self, rng: random.Random) -> int:
        """Index of a statement drawn with the published probabilities."""
        index = bisect.bisect_right(self.cumulative, rng.random() * self.cumulative[-1])
        return min(index, len(self.statements) - 1)  # guards the float edge of the last bucket


@dataclass(frozen=True)
class PuzzleSpace:
    """All puzzles of ``n_people`` with statements of at most ``depth`` levels and ``width`` operands."""

    n_people: int
    depth: int
    width: int
    menus: tuple[SpeakerMenu, ...]

    @property
    def size(self) -> int:
        """Number of statement combinations (puzzles before the unique-solution filter)."""
        return math.prod(len(menu.statements) for menu in self.menus)

    def draw(self, rng: random.Random) -> tuple[int, ...]:
        """One statement index per person, as the published sampler would draw them."""
        return tuple(menu.draw(rng) for menu in self.menus)

    def consistent(self, picks: tuple[int, ...]) -> int:
        """The mask of assignments that solve the puzzle ``picks``."""
        mask = all_assignments_mask(self.n_people)
        for menu, pick in zip(self.menus, picks, strict=True):
            mask &= menu.consistent[pick]
        return mask

    def statements(self, picks: tuple[int, ...]) -> Statements:
        return tuple(menu.statements[pick] for menu, pick in zip(self.menus, picks, strict=True))

    def probability(self, picks: tuple[int, ...]) -> float:
        return math.prod(menu.probabilities[pick] for menu, pick in zip(self.menus, picks, strict=True))


def _speaker_menu(speaker: int, n_people: int, depth: int, width: int) -> SpeakerMenu:
    options = statement_probabilities(speaker, n_people, depth, width)
    knights, all_bits = knight_masks(n_people), all_assignments_mask(n_people)
    consistent = tuple(
        all_bits ^ (knights[speaker] ^ statement_mask(stmt, knights, all_bits)) for stmt, _ in options
    )
    probabilities = tuple(p for _, p in options)
    cumulative = tuple(itertools.accumulate(probabilities))
    return SpeakerMenu(tuple(stmt for stmt, _ in options), probabilities, cumulative, consistent)


@lru_cache(maxsize=32)
def puzzle_space(n_people: int, depth: int = 2, width: int = 2) -> PuzzleSpace:
    """The (cached) space for a puzzle size; depth 1 means bare leaves, 2 one operator over leaves.

    >>> puzzle_space(2).size
    900
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
        raise ValueError(
            f"width {width} gives {2 * n_and_or} and/or statements per person at {n_people} people, "
            f"over the {MAX_STATEMENTS_PER_PERSON} this generator lists; use a smaller width"
        )
    menus = tuple(_speaker_menu(speaker, n_people, depth, width) for speaker in range(n_people))
    return PuzzleSpace(n_people, depth, width, menus)
