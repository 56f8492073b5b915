"""Knights-and-Knaves puzzles: the published grammar, a bitmask solver, a fast generator.

- :func:`solve` lists every consistent assignment of a puzzle (True = knight).
- :func:`generate` makes distinct unique-solution puzzles as records in the published field format.
- :func:`canonical_key` identifies a puzzle up to renaming and reordering its people.
- :func:`chain_of_thought` tells the published backtracking search step by step.

``python -m curriculum.kk --help`` generates puzzle files and checks stored solutions.
"""

from curriculum.kk.canonical import canonical_key
from curriculum.kk.cot import chain_of_thought
from curriculum.kk.english import COMMON_NAMES, ROLE_PAIRS, SPEECH_TEMPLATES, claim_text, role_words
from curriculum.kk.generator import count_unique_puzzles, generate
from curriculum.kk.grammar import StatementError, parse_statements, top_label
from curriculum.kk.solver import solve

#: The fields of a published K&K record, in the published order.
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

__all__ = [
    "COMMON_NAMES",
    "RECORD_FIELDS",
    "ROLE_PAIRS",
    "SPEECH_TEMPLATES",
    "StatementError",
    "canonical_key",
    "chain_of_thought",
    "claim_text",
    "count_unique_puzzles",
    "generate",
    "parse_statements",
    "role_words",
    "solve",
    "top_label",
]
