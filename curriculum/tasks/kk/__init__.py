"""Knights and Knaves, the project's first task: the puzzles (`statements`: grammar, solver, canonical key;
`generator`; `english`: the published wording and chain of thought), where records come from (`sources`),
their grader (`grading/`) and the task, :class:`KKTask` (levels "2ppl".."8ppl"). ``python -m
curriculum.tasks.kk --help`` generates puzzle files and checks stored solutions.
"""

from curriculum.tasks.kk.english import (
    COMMON_NAMES,
    ROLE_PAIRS,
    SPEECH_TEMPLATES,
    chain_of_thought,
    claim_text,
    role_words,
)
from curriculum.tasks.kk.generator import RECORD_FIELDS, count_unique_puzzles, generate
from curriculum.tasks.kk.statements import StatementError, canonical_key, parse_statements, solve
from curriculum.tasks.kk.task import KKTask, kk_record

__all__ = [
    "COMMON_NAMES",
    "RECORD_FIELDS",
    "ROLE_PAIRS",
    "SPEECH_TEMPLATES",
    "KKTask",
    "StatementError",
    "canonical_key",
    "chain_of_thought",
    "claim_text",
    "count_unique_puzzles",
    "generate",
    "kk_record",
    "parse_statements",
    "role_words",
    "solve",
]
