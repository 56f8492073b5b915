"""Read who is a knight and who is a knave out of the text of one <answer> block.

Three steps, each one linear pass:

1. **Tables** with a telling header become "name: role" lines (`curriculum.tasks.kk.grading.answer_tables`).
2. **Claims** are read by `curriculum.tasks.kk.grading.claims.read_claims`, the parser validation also runs on reasoning
   blocks, so both read "X is a knight / knave" phrasings the same way (its docstring lists them).
3. **Refuse rather than guess.** A person given both roles anywhere in the block, or named in a
   hedged sentence, is undecided. Everyone is undecided when a sentence that names nobody hedges
   ("Or the reverse.", "Either way works.") or says the roles cannot be determined. People who are
   not in the puzzle but are given a role are listed in `invented` (the grader marks that wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from curriculum.tasks.kk.grading.answer_tables import rewrite_tables
from curriculum.tasks.kk.grading.claims import read_claims


@dataclass(frozen=True)
class ParsedAnswer:
    """What one answer block says: name -> True (knight) / False (knave) / None, and why not.

    invented: people not in the puzzle whom the block gives a role (lower-case).
    """

    assignment: dict[str, bool | None]
    reasons: tuple[str, ...]
    invented: tuple[str, ...] = ()


def parse_answer(text: str, names: Sequence[str]) -> ParsedAnswer:
    """Parse one answer block for the people in `names`.

    >>> people = ["Ava", "Avery", "Mia"]
    >>> parse_answer("Both Ava and Avery are knights; Mia isn't a knight.", people).assignment
    {'Ava': True, 'Avery': True, 'Mia': False}
    >>> parse_answer("Zoey is a knight or a knave. Oliver is a knave.", ["Zoey", "Oliver"]).reasons
    ('Zoey hedged',)
    >>> parse_answer("Zoey is a knave. Oliver is a knight. (Or the reverse.)", ["Zoey", "Oliver"]).reasons
    ('answer voided by a hedge that names nobody',)
    """
    claims = read_claims(rewrite_tables(text), names)
    invented = claims.invented_with_roles() if claims.invented else ()
    invented_reasons = tuple(f"{word.capitalize()} is not in the puzzle" for word in invented)
    if claims.void:
        return ParsedAnswer(dict.fromkeys(names), tuple(f"answer voided by {why}" for why in claims.void)
                            + invented_reasons, invented)
    role_of: dict[int, bool] = {}
    both: set[int] = set()
    for person, role, _ in claims.events:
        if role_of.setdefault(person, role) is not role:
            both.add(person)
    assignment: dict[str, bool | None] = {}
    reasons: list[str] = list(claims.notes)
    for person, name in enumerate(names):
        if person in claims.hedged:
            reasons.append(f"{name} hedged")
        elif person in both:
            reasons.append(f"{name} given both roles")
        elif person not in role_of:
            reasons.append(f"{name} missing")
        decided = person not in claims.hedged and person not in both
        assignment[name] = role_of.get(person) if decided else None
    return ParsedAnswer(assignment, tuple(reasons) + invented_reasons, invented)
