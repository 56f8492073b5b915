"""Where K&K records come from: generated offline, the Hugging Face hub, or local files.

Every source returns plain-Python records with the published fields (see
:data:`curriculum.kk.RECORD_FIELDS`): ``names`` list[str], ``solution`` list[bool], ``statements``
str, ``knight_knave`` dict, ``cot_repeat_steps`` list[str], ``index`` int; extra columns (such as
Logic-RL's ``prompt``) are dropped. Bad data fails with an error naming the file and the line
(jsonl) or the column (parquet): a record whose `solution` is not the one its statements allow,
and a file with no records, are refused. Text is normalised to composed Unicode (NFC), so a name
written decomposed ("Zoe" + combining diaeresis) matches the same name typed composed.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from core.checks import is_int
from curriculum.kk import RECORD_FIELDS, StatementError, canonical_key, generate, parse_statements, solve

HUB_ID = "K-and-K/knights-and-knaves"
SPLITS = ("train", "test")
SOURCES = ("generated", "hub", "local")

_TEXT_FIELDS = ("quiz", "solution_text", "solution_text_format", "cot_head", "cot_foot", "statements")


class RecordError(ValueError):
    """Malformed record data; the message starts with the file and line, row or column."""


def published_count(ppl: int, split: str) -> int:
    """Records per published file: 100 per test file, 200 for 2-person train, else 1000.

    >>> published_count(2, "train"), published_count(6, "train"), published_count(6, "test")
    (200, 1000, 100)
    """
    if split == "test":
        return 100
    return 200 if ppl == 2 else 1000


def _typed_list(value, item_type: type, field: str, where: str, kind: str) -> list:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise RecordError(f"{where}: {kind} {field!r} must be a list, got {type(value).__name__}")
    items = list(value)
    for item in items:
        if not isinstance(item, item_type):  # str or bool: neither takes the other (nor an int as a role)
            raise RecordError(f"{where}: {kind} {field!r} must hold {item_type.__name__}, got {item!r}")
    return items


def normalize_record(raw, where: str, kind: str = "field") -> dict:
    """Check one raw record and return it as plain Python with exactly the published fields.

    ``where`` locates the record ("data.jsonl:12"); ``kind`` is "field" or "column" for messages.
    """
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    missing = [field for field in RECORD_FIELDS if field not in raw]
    if missing:
        needed = ", ".join(RECORD_FIELDS)
        raise RecordError(f"{where}: missing {kind} {missing[0]!r} (a record needs {needed})")
    record = {field: raw[field] for field in RECORD_FIELDS}
    for field in _TEXT_FIELDS:
        if not isinstance(record[field], str):
            got = type(record[field]).__name__
            raise RecordError(f"{where}: {kind} {field!r} must be a string, got {got}")
        record[field] = _nfc(record[field])
    record["names"] = [_nfc(name) for name in _typed_list(record["names"], str, "names", where, kind)]
    record["solution"] = _typed_list(record["solution"], bool, "solution", where, kind)
    record["cot_repeat_steps"] = [_nfc(step) for step in
                                  _typed_list(record["cot_repeat_steps"], str, "cot_repeat_steps", where, kind)]
    if not isinstance(record["knight_knave"], Mapping):
        raise RecordError(f"{where}: {kind} 'knight_knave' must be a mapping of role words")
    record["knight_knave"] = {str(key): str(value) for key, value in record["knight_knave"].items()}
    if not is_int(record["index"]):
        raise RecordError(f"{where}: {kind} 'index' must be an int, got {record['index']!r}")
    n_names = len(record["names"])
    if len(record["solution"]) != n_names:
        n_roles = len(record["solution"])
        raise RecordError(f"{where}: {kind} 'solution' has {n_roles} roles but {kind} 'names' has {n_names}")
    try:
        n_statements = len(parse_statements(record["statements"]))
    except StatementError as exc:
        raise RecordError(f"{where}: {kind} 'statements': {exc}") from exc
    if n_statements != n_names:
        raise RecordError(f"{where}: {kind} 'statements' has {n_statements} but 'names' has {n_names} people")
    return record


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def check_solution(record: dict, where: str, kind: str = "field") -> dict:
    """`record`, if its statements allow exactly its `solution`: a wrong label would be trained on and graded by."""
    allowed = solve(record["statements"])
    if allowed != [tuple(record["solution"])]:
        found = {0: "no assignment", 1: _roles(allowed[0])}.get(len(allowed), f"{len(allowed)} assignments")
        raise RecordError(f"{where}: {kind} 'solution' is {_roles(record['solution'])}, but the statements "
                          f"allow {found} (a puzzle has exactly one)")
    return record


def _roles(assignment) -> str:
    """(True, False) -> "[knight, knave]"."""
    return "[" + ", ".join("knight" if role else "knave" for role in assignment) + "]"


def _jsonl_records(path: Path) -> Iterator[tuple[str, dict]]:
    found = False
    with path.open(encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from exc
            found = True
            yield where, normalize_record(raw, where)
    if not found:
        raise RecordError(f"{path}: no records (the file is empty); a puzzle file holds one JSON record a line")


def _parquet_records(path: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow.parquet as pq

    columns = pq.read_schema(path).names
    missing = [field for field in RECORD_FIELDS if field not in columns]
    if missing:
        raise RecordError(f"{path}: missing column {missing[0]!r} (has {', '.join(columns)})")
    rows = pq.read_table(path, columns=list(RECORD_FIELDS)).to_pylist()
    if not rows:
        raise RecordError(f"{path}: no records (the table has no rows)")
    for row_number, raw in enumerate(rows):
        where = f"{path}, row {row_number}"
        yield where, normalize_record(raw, where, kind="column")


def located_records(path: str | Path, *, check_solutions: bool = True) -> Iterator[tuple[str, dict]]:
    """``(location, record)`` for each record of a ``.jsonl`` or ``.parquet`` file, validated.

    ``check_solutions=False`` leaves the solver check to the caller (an audit that reports every
    wrong record instead of stopping at the first).
    """
    path = Path(path)
    readers = {".jsonl": (_jsonl_records, "field"), ".parquet": (_parquet_records, "column")}
    if path.suffix not in readers:
        raise RecordError(f"{path}: expected a .jsonl or .parquet file")
    read, kind = readers[path.suffix]
    located = read(path)
    return ((where, check_solution(record, where, kind)) for where, record in located) if check_solutions else located


def read_records(path: str | Path) -> list[dict]:
    """All records of a ``.jsonl`` or ``.parquet`` file, validated and normalized."""
    return [record for _, record in located_records(path)]


def _local_file(root: Path, ppl: int, split: str) -> Path:
    """The file for (ppl, split) in the jsonl layout or the Logic-RL parquet layout under ``root``."""
    pattern = re.compile(rf"people{ppl}_num\d+\.jsonl")
    split_dir = root / split
    jsonl = sorted(p for p in split_dir.glob(f"people{ppl}_num*.jsonl") if pattern.fullmatch(p.name))
    parquet = root / f"{ppl}ppl" / f"{split}.parquet"
    found = jsonl + ([parquet] if parquet.is_file() else [])
    if len(found) == 1:
        return found[0]
    if not found:
        raise FileNotFoundError(
            f"no {split} records for {ppl} people under {root}: expected "
            f"{split_dir}/people{ppl}_num<N>.jsonl (K&K layout) or {parquet} (Logic-RL layout)"
        )
    raise RecordError(f"several {split} files for {ppl} people under {root}: {', '.join(map(str, found))}")


def _hub_records(hub_id: str, ppl: int, split: str) -> list[tuple[str, dict]]:
    data_file = f"{split}/people{ppl}_num{published_count(ppl, split)}.jsonl"
    try:
        import datasets

        rows = datasets.load_dataset(hub_id, data_files=data_file, split="train")
    except Exception as exc:  # offline, unreachable, missing file: datasets raises many types
        raise ConnectionError(
            f"source='hub' needs the Hugging Face hub to load {hub_id} {data_file}, and that failed "
            f"({type(exc).__name__}: {exc}). Offline, use source='generated', or source='local' with "
            f"path= a folder of {{train,test}}/people<n>_num<N>.jsonl or <n>ppl/{{train,test}}.parquet files."
        ) from exc
    located = [(f"{hub_id}/{data_file}, row {i}", row) for i, row in enumerate(rows)]
    return [(where, check_solution(normalize_record(row, where), where)) for where, row in located]


def load_records(
    source: str,
    ppl: int,
    split: str,
    *,
    n: int | None = None,
    seed: int = 0,
    path: str | Path | None = None,
    hub_id: str = HUB_ID,
) -> list[dict]:
    """Records for ``ppl`` people and ``split`` ("train"/"test"); the first ``n`` (None: all).

    - "generated": offline; ``generate(ppl, n, seed)`` with seed ``2*seed`` for train and
      ``2*seed + 1`` for test, so the splits differ; ``n=None`` means the published file size.
      Small sizes can repeat puzzles across splits (2 people have only 399): see :func:`split_disjoint`.
    - "hub": the published jsonl file from ``hub_id`` (needs the network).
    - "local": ``path`` holds ``{train,test}/people<ppl>_num<N>.jsonl`` or ``<ppl>ppl/<split>.parquet``.

    >>> [len(load_records("generated", 3, split, n=5)) for split in ("train", "test")]
    [5, 5]
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if n is not None and n < 0:
        raise ValueError(f"n must be None or non-negative, got {n}")
    if source == "generated":
        count = published_count(ppl, split) if n is None else n
        return generate(ppl, count, 2 * seed + SPLITS.index(split))
    if source == "hub":
        located = _hub_records(hub_id, ppl, split)
    elif source == "local":
        if path is None:
            raise ValueError("source='local' needs path= a folder of puzzle files")
        located = list(located_records(_local_file(Path(path), ppl, split)))
    else:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    for where, record in located:
        if len(record["names"]) != ppl:
            raise RecordError(f"{where}: a {len(record['names'])}-person puzzle, but ppl={ppl} was asked for")
    records = [record for _, record in located]
    return records if n is None else records[:n]


def split_disjoint(train_records: Sequence[dict], val_records: Sequence[dict]) -> tuple[list[dict], int]:
    """Drop training records whose puzzle (up to renaming/reordering people) is in validation.

    Returns the kept training records, in order, and how many were removed.

    >>> train = load_records("generated", 2, "train", n=50)
    >>> kept, removed = split_disjoint(train, train[:10])
    >>> len(kept), removed  # 2 more than the 10 shared: the same puzzles with the people swapped
    (38, 12)
    """
    held_out = {canonical_key(record) for record in val_records}
    kept = [record for record in train_records if canonical_key(record) not in held_out]
    return kept, len(train_records) - len(kept)


def distinct_puzzles(records: Sequence[dict]) -> list[dict]:
    """The records whose puzzle (up to renaming/reordering people) no earlier record holds, in order.

    A validation pool of repeats counts some puzzles twice: the default 2ppl pool (`eval.n` 100,
    `eval.seed` 1234) holds 63 distinct puzzles, since only 95 exist up to renaming.

    >>> len(distinct_puzzles(load_records("generated", 2, "test", n=100, seed=1234)))
    63
    """
    seen: set[str] = set()
    kept = []
    for record in records:
        key = canonical_key(record)
        if key not in seen:
            seen.add(key)
            kept.append(record)
    return kept
