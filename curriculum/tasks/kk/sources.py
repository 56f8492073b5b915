"""Where K&K records come from: generated offline, the Hugging Face hub, or local files.

Every source gives plain-Python records with exactly the published fields (`generator.RECORD_FIELDS`), text in
composed Unicode (NFC: "Zoe" + combining diaeresis is the name typed composed). Bad data fails naming the file
and the line (jsonl) or the column (parquet): bytes not UTF-8, a `solution` its statements do not allow, two
records with one index, a file with no records. Records the grader cannot grade right are dropped (`screen`).
Local files are read a record at a time, as far as a pool needs them (`iter_records`): a pool of 900 from a
100,000-record file reads ~900 records, and a bad record further on is named when a larger pool reaches it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path

from core.checks import is_int
from curriculum.tasks.base import RecordError
from curriculum.tasks.kk.generator import RECORD_FIELDS, generate
from curriculum.tasks.kk.screen import screened
from curriculum.tasks.kk.statements import StatementError, canonical_key, parse_statements, solve

HUB_ID = "K-and-K/knights-and-knaves"
#: people per puzzle that the published data cover
KNOWN_PPL = range(2, 9)
SPLITS = ("train", "test")
SOURCES = ("generated", "hub", "local")

_TEXT_FIELDS = ("quiz", "solution_text", "solution_text_format", "cot_head", "cot_foot", "statements")


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
    """One raw record checked, as plain Python with exactly the published fields; ``where`` locates it
    ("data.jsonl:12"), ``kind`` ("field" or "column") is what messages call a field."""
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    missing = [field for field in RECORD_FIELDS if field not in raw]
    if missing:
        raise RecordError(f"{where}: missing {kind} {missing[0]!r} (a record needs {', '.join(RECORD_FIELDS)})")
    record = {field: raw[field] for field in RECORD_FIELDS}
    for field in _TEXT_FIELDS:
        if not isinstance(record[field], str):
            raise RecordError(f"{where}: {kind} {field!r} must be a string, got {type(record[field]).__name__}")
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
    n_names, n_roles = len(record["names"]), len(record["solution"])
    if n_roles != n_names:
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
    with path.open("rb") as lines:
        for line_number, raw_line in enumerate(lines, start=1):
            where = f"{path}:{line_number}"
            line = _utf8(raw_line, where)
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from exc
            found = True
            yield where, normalize_record(raw, where)
    if not found:
        raise RecordError(f"{path}: no records (the file is empty); a puzzle file holds one JSON record a line")


def _utf8(raw_line: bytes, where: str) -> str:
    try:
        return raw_line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{where}: not UTF-8 (byte 0x{raw_line[exc.start]:02x} at column {exc.start + 1}); a "
                          "puzzle file holds one UTF-8 JSON record a line") from None


def _parquet_records(path: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow as pa

    try:
        yield from _parquet_rows(path)
    except (pa.ArrowException, OSError) as exc:  # a truncated file: pyarrow's ArrowInvalid never names it
        said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RecordError(f"{path}: not a readable parquet file ({said}); copy it again, or remove it") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    columns = table.schema_arrow.names
    missing = [field for field in RECORD_FIELDS if field not in columns]
    if missing:
        raise RecordError(f"{path}: missing column {missing[0]!r} (has {', '.join(columns)})")
    if table.metadata.num_rows == 0:
        raise RecordError(f"{path}: no records (the table has no rows)")
    row_number = 0
    for batch in table.iter_batches(batch_size=1024, columns=list(RECORD_FIELDS)):
        for raw in batch.to_pylist():
            where = f"{path}, row {row_number}"
            yield where, normalize_record(raw, where, kind="column")
            row_number += 1


def located_records(path: str | Path, *, check_solutions: bool = True) -> Iterator[tuple[str, dict]]:
    """``(location, record)`` for each record of a ``.jsonl`` or ``.parquet`` file, validated;
    ``check_solutions=False`` leaves the solver check to the caller (an audit that reports every wrong one)."""
    path = Path(path)
    readers = {".jsonl": (_jsonl_records, "field"), ".parquet": (_parquet_records, "column")}
    if path.suffix not in readers:
        raise RecordError(f"{path}: expected a .jsonl or .parquet file")
    read, kind = readers[path.suffix]
    located = read(path)
    return ((where, check_solution(record, where, kind)) for where, record in located) if check_solutions else located


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


def _hub_file(hub_id: str, ppl: int, split: str) -> str:
    return f"{hub_id}/{split}/people{ppl}_num{published_count(ppl, split)}.jsonl"


def _hub_records(hub_id: str, ppl: int, split: str) -> Iterator[tuple[str, dict]]:
    data_file = _hub_file(hub_id, ppl, split).removeprefix(f"{hub_id}/")
    try:
        import datasets

        rows = datasets.load_dataset(hub_id, data_files=data_file, split="train")
    except Exception as exc:  # offline, unreachable, missing file: datasets raises many types
        raise ConnectionError(
            f"source='hub' needs the Hugging Face hub to load {hub_id} {data_file}, and that failed "
            f"({type(exc).__name__}: {exc}). Offline, use source='generated', or source='local' with "
            f"path= a folder of {{train,test}}/people<n>_num<N>.jsonl or <n>ppl/{{train,test}}.parquet files."
        ) from exc
    for i, row in enumerate(rows):
        where = f"{hub_id}/{data_file}, row {i}"
        yield where, check_solution(normalize_record(row, where), where)


def iter_records(source: str, ppl: int, split: str, *, seed: int = 0, path: str | Path | None = None,
                 hub_id: str = HUB_ID) -> Iterator[dict]:
    """The records of ``source`` for ``ppl`` people and ``split``, checked one at a time as they are read
    (so a caller that needs the first few reads only those); "generated" yields the published file's size."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if source == "generated":
        yield from generate(ppl, published_count(ppl, split), 2 * seed + SPLITS.index(split))
        return
    if source == "hub":
        file, located = _hub_file(hub_id, ppl, split), _hub_records(hub_id, ppl, split)
    elif source == "local":
        if path is None:
            raise ValueError("source='local' needs path= a folder of puzzle files")
        file = _local_file(Path(path), ppl, split)
        located = located_records(file)
    else:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    for where, record in screened(located, str(file)):
        if len(record["names"]) != ppl:
            raise RecordError(f"{where}: a {len(record['names'])}-person puzzle, but ppl={ppl} was asked for")
        yield record


def load_records(source: str, ppl: int, split: str, *, n: int | None = None, seed: int = 0,
                 path: str | Path | None = None, hub_id: str = HUB_ID) -> list[dict]:
    """Records for ``ppl`` people and ``split`` ("train"/"test"); the first ``n`` (None: all).

    "generated": offline, ``generate(ppl, n, seed)`` with seed ``2*seed`` for train and ``2*seed + 1`` for test
    (``n=None``: the published file size; small sizes can repeat puzzles across splits: `split_disjoint`);
    "hub": the published jsonl file from ``hub_id``; "local": ``path`` holds
    ``{train,test}/people<ppl>_num<N>.jsonl`` or ``<ppl>ppl/<split>.parquet``, read only as far as ``n``.

    >>> [len(load_records("generated", 3, split, n=5)) for split in ("train", "test")]
    [5, 5]
    """
    if n is not None and n < 0:
        raise ValueError(f"n must be None or non-negative, got {n}")
    if source == "generated" and n is not None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return generate(ppl, n, 2 * seed + SPLITS.index(split))
    return list(islice(iter_records(source, ppl, split, seed=seed, path=path, hub_id=hub_id), n))


def split_disjoint(train_records: Iterable[dict], val_records: Sequence[dict],
                   limit: int | None = None) -> tuple[list[dict], int]:
    """The training records, in order, whose puzzle (up to renaming/reordering people) is not in validation,
    and how many were removed; with `limit`, `train_records` is read no further than that many kept.

    >>> train = load_records("generated", 2, "train", n=50)
    >>> kept, removed = split_disjoint(train, train[:10])
    >>> len(kept), removed  # 2 more than the 10 shared: the same puzzles with the people swapped
    (38, 12)
    >>> kept, removed = split_disjoint(iter(train), train[:10], limit=5)  # reads 15: 10 held out, then 5 kept
    >>> len(kept), removed
    (5, 10)
    """
    held_out = {canonical_key(record) for record in val_records}
    kept: list[dict] = []
    removed = 0
    for record in train_records:
        if limit is not None and len(kept) >= limit:
            break
        if canonical_key(record) in held_out:
            removed += 1
        else:
            kept.append(record)
    return kept, removed

