"""Knights and Knaves, the project's first task, in one package: the puzzles, their grader, the task.

- the puzzles: the published grammar (`grammar`), a bitmask solver (`solve`), a fast generator
  (`generate`: distinct unique-solution puzzles in the published field format), `canonical_key` (a
  puzzle up to renaming and reordering its people), `chain_of_thought` (the published backtracking
  search, step by step) and their English (`english`, `cot`); ``python -m curriculum.tasks.kk --help``
  generates puzzle files and checks stored solutions;
- `sources`: where records come from (generated, the hub, local files), checked as they are read;
- `grading/`: the one grader of rewards and validation, its parsers, lenient reading, reasoning
  agreement, Logic-RL's own score;
- `task`: :class:`KKTask`, the task behind `curriculum.tasks.base.Task` (levels "2ppl".."8ppl").
"""

from curriculum.tasks.kk.canonical import canonical_key
from curriculum.tasks.kk.cot import chain_of_thought
from curriculum.tasks.kk.english import COMMON_NAMES, ROLE_PAIRS, SPEECH_TEMPLATES, claim_text, role_words
from curriculum.tasks.kk.generator import RECORD_FIELDS, count_unique_puzzles, generate
from curriculum.tasks.kk.grammar import StatementError, parse_statements, top_label
from curriculum.tasks.kk.solver import solve
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
    "top_label",
]
