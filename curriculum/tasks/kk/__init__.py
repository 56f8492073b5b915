"""Knights and Knaves: the puzzles (`statements`, `generator`, `english`), where records come from (`sources`), their
grader (`grading/`) and the task, :class:`KKTask`; ``python -m curriculum.tasks.kk --help`` makes and checks files."""

from curriculum.tasks.kk.english import COMMON_NAMES, SPEECH_TEMPLATES, chain_of_thought, claim_text, role_words
from curriculum.tasks.kk.generator import RECORD_FIELDS, generate
from curriculum.tasks.kk.statements import StatementError, canonical_key, parse_statements, solve
from curriculum.tasks.kk.task import KKTask, kk_record

__all__ = ["COMMON_NAMES", "RECORD_FIELDS", "SPEECH_TEMPLATES", "KKTask", "StatementError", "canonical_key",
           "chain_of_thought", "claim_text", "generate", "kk_record", "parse_statements", "role_words", "solve"]
