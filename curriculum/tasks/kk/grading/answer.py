"""Who is a knight and who a knave, read out of the text of one <answer> block, in three linear passes.

1. **Tables** with a telling header become "name: role" lines (`rewrite_tables`; as prose, cells run together):
   role columns (`| Knights | Knaves |`) give each name its column's role; name and role columns (`| Person |
   Knight/Knave | Reason |`) each row's name and role, a one-role column ("Knight?") reading yes / no cells; any
   other headed table is read row by row without the columns that quote claims. Without a |---| line under the
   header, or in a row that lacks the cells, a table stays prose.
2. **Claims** are read by `claims.read_claims`, which validation also runs on reasoning blocks.
3. **Refuse rather than guess.** A person given both roles anywhere in the block, or named in a hedged
   sentence, is undecided. Everyone is undecided when a sentence that names nobody hedges ("Or the reverse.",
   "Either way works.") or says the roles cannot be determined. People not in the puzzle but given a role are
   listed in `invented` (the grader marks that wrong).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from curriculum.tasks.kk.grading.claim_words import REPORTING, ROLE_WORDS, tokenize
from curriculum.tasks.kk.grading.claims import read_claims

NAME_HEADERS = frozenset({"name", "names", "person", "people", "inhabitant", "inhabitants", "character",
                          "characters", "who", "individual", "islander", "speaker"})
ROLE_HEADERS = frozenset({"role", "roles", "identity", "identities", "status", "type", "answer", "verdict",
                          "conclusion", "result", "is"})
YES = frozenset({"yes", "y", "true", "✓", "✔", "✅"})
NO = frozenset({"no", "n", "false", "✗", "✘", "❌"})
_ROLE_NAME = {True: "knight", False: "knave"}


def rewrite_tables(text: str) -> str:
    """`text` with every table that has a telling header rewritten as "name: role" lines.

    >>> print(rewrite_tables("| Knights | Knaves |\\n|---|---|\\n| Zoey | Jacob |\\n| Liam | |"))
    knight: Zoey
    knave: Jacob
    knight: Liam
    >>> print(rewrite_tables("| Person | Role | Why |\\n|:-|:-|:-|\\n| Zoey | Knave | lied about Liam |"))
    Zoey: Knave
    """
    if "|" not in text:
        return text
    out: list[str] = []
    for in_table, group in itertools.groupby(text.split("\n"), key=lambda line: "|" in line):
        lines = list(group)
        out.extend(_table(lines) if in_table else lines)
    return "\n".join(out)


def _cells(line: str) -> list[str]:
    cells = [c.strip() for c in line.strip().split("|")]
    if cells and not cells[0]:
        cells = cells[1:]
    if cells and not cells[-1]:
        cells = cells[:-1]
    return cells


def _is_rule(cells: list[str]) -> bool:
    """The |---|:---:| line under a header."""
    return bool(cells) and all(c and set(c) <= set("-: ") for c in cells)


def _column(cell: str) -> tuple[str, bool | None]:
    """What a header cell announces: ("name", None), ("role", polarity) for one role ("Knight?"),
    ("role", None) for both ("Knight/Knave", "Identity"), ("report", None) ("Statement"), or ("", None)."""
    words = tokenize(cell)
    polarity = {ROLE_WORDS[w] for w in words if w in ROLE_WORDS}
    if NAME_HEADERS.intersection(words):
        return "name", None
    if len(polarity) == 1:
        return "role", polarity.pop()
    if polarity or ROLE_HEADERS.intersection(words):
        return "role", None
    if REPORTING.intersection(words):
        return "report", None
    return "", None


def _table(lines: list[str]) -> list[str]:
    rows = [_cells(line) for line in lines]
    if len(rows) < 2 or not _is_rule(rows[1]):
        return lines  # no header without the |---| line under it: rows are read as prose
    header = [_column(cell) for cell in rows[0]]
    body = [row for row in rows[1:] if not _is_rule(row)]
    names = [i for i, (kind, _) in enumerate(header) if kind == "name"]
    both = [i for i, (kind, pol) in enumerate(header) if kind == "role" and pol is None]
    single = [i for i, (kind, pol) in enumerate(header) if kind == "role" and pol is not None]
    if names and (both or single):
        role_col = (both or single)[0]
        return [_name_role_line(row, names[0], role_col, header) or line
                for line, row in zip(lines[1:], rows[1:], strict=True) if not _is_rule(row)]
    only_roles = all(kind == "role" or not any(ch.isalpha() for ch in cell)
                     for cell, (kind, _) in zip(rows[0], header, strict=True))
    if single and not both and only_roles:
        return [f"{_ROLE_NAME[header[c][1]]}: {row[c]}" for row in body for c in single if c < len(row) and row[c]]
    kept = [c for c, (kind, _) in enumerate(header) if kind != "report"]  # claims in a column are no answer
    return [" | ".join(row[c] for c in kept if c < len(row)) for row in [rows[0], *body]]


def _name_role_line(row: list[str], name_col: int, role_col: int, header: list[tuple[str, bool | None]]) -> str:
    """"name: role" for one row, or "" when the row lacks either cell."""
    if max(name_col, role_col) >= len(row) or not row[name_col]:
        return ""
    role = row[role_col]
    polarity = header[role_col][1]
    if polarity is not None and role.lower().strip(" *_.") in YES | NO:
        role = _ROLE_NAME[polarity if role.lower().strip(" *_.") in YES else not polarity]
    return f"{row[name_col]}: {role}"


@dataclass(frozen=True)
class ParsedAnswer:
    """What one answer block says, and why not."""

    assignment: dict[str, bool | None]  # name -> knight (True), knave (False), None
    reasons: tuple[str, ...]
    invented: tuple[str, ...] = ()  # people not in the puzzle whom the block gives a role (lower-case)


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
