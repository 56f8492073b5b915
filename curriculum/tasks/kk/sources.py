"""Where K&K records come from: generated offline, the Hugging Face hub, or local files, as plain-Python records
with the published fields (`generator.RECORD_FIELDS`) in composed Unicode (NFC). Bad data fails naming the file and
the line or column; records the grader cannot grade right are dropped (`screen`). A local file is read a record at
a time, as far as a pool needs (`iter_records`)."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from core.checks import is_int
from curriculum.tasks import jsonl_rows
from curriculum.tasks.base import SPLITS, RecordError, check_split
from curriculum.tasks.kk.generator import RECORD_FIELDS, generate
from curriculum.tasks.kk.screen import screened
from curriculum.tasks.kk.statements import StatementError, parse_statements, solve

HUB_ID = "K-and-K/knights-and-knaves"
KNOWN_PPL = range(2, 9)  # people per puzzle that the published data cover
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
    """One raw record checked, as plain Python with the published fields; messages name `where` and a `kind`."""
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
    for field, item_type in (("names", str), ("solution", bool), ("cot_repeat_steps", str)):
        items = _typed_list(record[field], item_type, field, where, kind)
        record[field] = [_nfc(item) for item in items] if item_type is str else items
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
        many = f"{len(allowed)} assignments" if allowed else "no assignment"  # none: the statements contradict
        found = _roles(allowed[0]) if len(allowed) == 1 else many
        raise RecordError(f"{where}: {kind} 'solution' is {_roles(record['solution'])}, but the statements "
                          f"allow {found} (a puzzle has exactly one)")
    return record


def _roles(assignment) -> str:
    """(True, False) -> "[knight, knave]"."""
    return "[" + ", ".join("knight" if role else "knave" for role in assignment) + "]"


def _jsonl_records(path: Path) -> Iterator[tuple[str, dict]]:
    found = False
    for where, raw in jsonl_rows(path, "a puzzle file"):
        found = True
        yield where, normalize_record(raw, where)
    if not found:
        raise RecordError(f"{path}: no records (the file is empty); a puzzle file holds one JSON record a line")


def _parquet_records(path: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
        columns = table.schema_arrow.names
        missing = [field for field in RECORD_FIELDS if field not in columns]
        if missing:
            raise RecordError(f"{path}: missing column {missing[0]!r} (has {', '.join(columns)})")
        if table.metadata.num_rows == 0:
            raise RecordError(f"{path}: no records (the table has no rows)")
        batches = table.iter_batches(batch_size=1024, columns=list(RECORD_FIELDS))
        for row_number, raw in enumerate(itertools.chain.from_iterable(batch.to_pylist() for batch in batches)):
            where = f"{path}, row {row_number}"
            yield where, normalize_record(raw, where, kind="column")
    except (pa.ArrowException, OSError) as exc:  # a truncated file: pyarrow's ArrowInvalid never names it
        said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RecordError(f"{path}: not a readable parquet file ({said}); copy it again, or remove it") from None


def located_records(path: str | Path, *, check_solutions: bool = True) -> Iterator[tuple[str, dict]]:
    """``(location, record)`` for each record of a .jsonl or .parquet file, validated (by the solver if asked)."""
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
        raise FileNotFoundError(f"no {split} records for {ppl} people under {root}: expected "
                                f"{split_dir}/people{ppl}_num<N>.jsonl (K&K layout) or {parquet} (Logic-RL layout)")
    raise RecordError(f"several {split} files for {ppl} people under {root}: {', '.join(map(str, found))}")


def _hub_file(hub_id: str, ppl: int, split: str) -> str:
    return f"{hub_id}/{split}/people{ppl}_num{published_count(ppl, split)}.jsonl"


def _hub_records(hub_id: str, ppl: int, split: str) -> Iterator[tuple[str, dict]]:
    data_file = _hub_file(hub_id, ppl, split).removeprefix(f"{hub_id}/")
    try:
        import datasets

        rows = datasets.load_dataset(hub_id, data_files=data_file, split="train")
    except Exception as exc:  # offline, unreachable, missing file: datasets raises many types
        raise ConnectionError(f"source='hub' needs the Hugging Face hub to load {hub_id} {data_file}, and that failed "
                              f"({type(exc).__name__}: {exc}). Offline, use source='generated', or source='local' "
                              "with path= a folder of {train,test}/people<n>_num<N>.jsonl or <n>ppl/{train,test}"
                              ".parquet files.") from exc
    for i, row in enumerate(rows):
        where = f"{hub_id}/{data_file}, row {i}"
        yield where, check_solution(normalize_record(row, where), where)


def iter_records(source: str, ppl: int, split: str, *, seed: int = 0, path: str | Path | None = None,
                 hub_id: str = HUB_ID) -> Iterator[dict]:
    """The records of `source` for `ppl` people and `split`, checked one at a time as they are read."""
    check_split(split)
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

    "generated": offline, seed ``2*seed`` for train and ``2*seed + 1`` for test (None: the published size); "hub":
    the published file of `hub_id`; "local": ``path`` holds ``{train,test}/people<ppl>_num<N>.jsonl`` or
    ``<ppl>ppl/<split>.parquet``.

    >>> [len(load_records("generated", 3, split, n=5)) for split in ("train", "test")]
    [5, 5]
    """
    if n is not None and n < 0:
        raise ValueError(f"n must be None or non-negative, got {n}")
    if source == "generated" and n is not None:
        return generate(ppl, n, 2 * seed + SPLITS.index(check_split(split)))
    return list(itertools.islice(iter_records(source, ppl, split, seed=seed, path=path, hub_id=hub_id), n))
