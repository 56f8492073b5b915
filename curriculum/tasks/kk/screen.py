"""Which K&K records of a file can be graded right, checked as the file is read: a record whose names are role words
("Sir Knave") or repeat ("amelia" beside "Amelia") would grade its own solution wrong, silently, so such records
and those with an empty quiz are dropped (a file of nothing else is refused); two records with one `index` (one id,
two puzzles) are refused. Repeated quizzes are kept and counted; validation counts each puzzle once."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator

from curriculum.tasks.base import RecordError

log = logging.getLogger(__name__)

#: knight or knave as a whole word, any case: the words the grader reads as roles
ROLE_WORD = re.compile(r"\b(?:knight|knave)\b", re.IGNORECASE)
ROLE_WORD_NAME, REPEATED_NAME, EMPTY_QUIZ = "with a role word as a name", "with a name repeated", "with an empty quiz"
SHOWN_IDS = 5  # how many dropped ids a log line lists for each reason before it says "..."
# (file, what a line says) -> the records read when it was said: a file read again as far (another pool, the
# contract check) says nothing new, so a line is said again only for a read that went further
_said: dict[tuple[str, str], int] = {}


def ungradable(record: dict) -> str | None:
    """Why the grader cannot grade `record` right (one of the reasons above), or None when it can.

    >>> base = {"names": ["Zoey", "Oliver"], "quiz": "You meet 2 inhabitants: Zoey and Oliver."}
    >>> ungradable(base), ungradable({**base, "names": ["Sir Knave", "Oliver"]})
    (None, 'with a role word as a name')
    >>> ungradable({**base, "names": ["Zoey", "zoey"]}), ungradable({**base, "quiz": " "})
    ('with a name repeated', 'with an empty quiz')
    """
    names = record["names"]
    if any(ROLE_WORD.search(name) for name in names):
        return ROLE_WORD_NAME
    if len({name.casefold() for name in names}) < len(names):
        return REPEATED_NAME
    if not record["quiz"].strip():
        return EMPTY_QUIZ
    return None


def screened(located: Iterable[tuple[str, dict]], file: str) -> Iterator[tuple[str, dict]]:
    """The gradable `(location, record)` pairs of `file`; what was dropped is logged when the reading ends."""
    first_at: dict[int, str] = {}
    dropped: dict[str, list[str]] = {}
    quizzes: Counter[str] = Counter()
    try:
        for where, record in located:
            index = record["index"]
            if index in first_at:
                raise RecordError(f"{where}: id {_record_id(record)} (index {index}) repeats the record at "
                                  f"{first_at[index]}; an index is unique in its file ({file})")
            first_at[index] = where
            reason = ungradable(record)
            if reason is not None:
                dropped.setdefault(reason, []).append(_record_id(record))
                continue
            quizzes[record["quiz"]] += 1
            yield where, record
    except GeneratorExit:  # the reader took what it needed: say what this much of the file held
        _say(file, len(first_at), dropped, quizzes, whole=False)
        raise
    if first_at and not quizzes:
        raise RecordError(f"{file}: every one of its {len(first_at)} records is dropped ({_reasons(dropped)}); "
                          "the grader cannot grade any of them right")
    _say(file, len(first_at), dropped, quizzes, whole=True)


def _record_id(record: dict) -> str:
    return f"{len(record['names'])}ppl-{record['index']}"


def _reasons(dropped: dict[str, list[str]]) -> str:
    """ "2 with a role word as a name (ids 3ppl-5, 3ppl-9), 1 with an empty quiz (id 3ppl-7)" """
    parts = []
    for reason, ids in dropped.items():
        shown = ", ".join(ids[:SHOWN_IDS]) + (", ..." if len(ids) > SHOWN_IDS else "")
        parts.append(f"{len(ids)} {reason} ({'ids' if len(ids) > 1 else 'id'} {shown})")
    return ", ".join(parts)


def _say(file: str, read: int, dropped: dict[str, list[str]], quizzes: Counter[str], *, whole: bool) -> None:
    of = f"{read} records of {file}" if whole else f"the first {read} records read of {file}"
    lines = {}
    if dropped:
        lines["dropped"] = f"dropped {sum(map(len, dropped.values()))} of {of}: {_reasons(dropped)}"
    repeats = sum(quizzes.values()) - len(quizzes)
    if repeats:
        lines["repeats"] = (f"{repeats} kept records of {of} repeat an earlier record's quiz: {len(quizzes)} "
                            "distinct quizzes (validation counts each once)")
    for what, line in lines.items():
        if read > _said.get((file, what), 0):
            _said[file, what] = read
            log.warning(line)
