"""JSONL files a run writes and reads: appended so that a kill never leaves half a record (`JsonlWriter`),
and read by the run that owns them (`read_jsonl`: strict, repairing a torn tail) and by a report of a run
still writing (`scan_jsonl`: lenient, counting damage) through one parser, `parse_jsonl`. Every writer
opens its file without following a link (`core/rundir/confine.py`, which also writes JSON atomically).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from core.parse_limits import parse_json
from core.rundir.confine import open_regular, read_inside, refuse_link


@dataclass(frozen=True)
class JsonlScan:
    """The rows (JSON objects) of a jsonl text, the 1-based numbers of the lines that are not JSON
    objects, the number of the last non-blank line, and how many bytes precede the first damaged line."""

    rows: list[dict]
    damaged: list[int]
    last_line: int
    intact_bytes: int


def parse_jsonl(raw: bytes) -> JsonlScan:
    """Scan jsonl bytes; blank lines are skipped, anything that is not a JSON object (or nests deeper than
    `core.parse_limits.MAX_DEPTH`: a received file's line that would take json.loads down) is damage.

    >>> scan = parse_jsonl(b'{"a": 1}\\n\\n[2]\\n{"a": 3}\\n{"a":')
    >>> scan.rows, scan.damaged, scan.last_line, scan.intact_bytes
    ([{'a': 1}, {'a': 3}], [3, 5], 5, 10)
    """
    rows, damaged, last_line, offset, intact = [], [], 0, 0, None
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if line.strip():
            last_line = number
            try:
                row = parse_json(line.decode(errors="replace"), f"line {number}")
            except ValueError:  # not JSON, or nested beyond parse_json's limit: damage either way
                row = None
            if isinstance(row, dict):
                rows.append(row)
            else:
                damaged.append(number)
                intact = offset if intact is None else intact
        offset += len(line) + 1
    return JsonlScan(rows, damaged, last_line, len(raw) if intact is None else intact)


def scan_jsonl(path: Path, *, inside: Path | None = None) -> JsonlScan:
    """`parse_jsonl` of a file; a missing file is empty (a run that has not written it yet). `inside`: a folder
    received from elsewhere (a report's run), which `path` is read from without following a link out of it."""
    if inside is not None:
        return parse_jsonl(read_inside(inside, path) or b"")
    return parse_jsonl(path.read_bytes()) if path.exists() else JsonlScan([], [], 0, 0)


def read_jsonl(path: Path, *, repair: bool = False) -> list[dict]:
    """Rows of a jsonl file. A torn last line (a kill mid-write) is dropped, and cut off when `repair`;
    damage on any other line is real damage and raises, naming the line."""
    scan = scan_jsonl(path)
    if scan.damaged and scan.damaged[0] != scan.last_line:
        raise ValueError(f"{path}:{scan.damaged[0]}: not valid JSON")
    if repair and scan.damaged:
        with os.fdopen(open_regular(path, os.O_RDWR), "r+b") as fh:
            fh.truncate(scan.intact_bytes)
    return scan.rows


class JsonlWriter:
    """Append rows to a jsonl file, each flushed and fsynced, skipping rows already recorded.

    `key` names the fields that identify a row; a resumed run re-logs steps it redoes after the
    last checkpoint, and those rows must not appear twice.
    """

    def __init__(self, path: Path, key: tuple[str, ...]):
        self.path, self.key = path, key
        refuse_link(path)  # read and repaired below: never through a link
        self.seen = {self._key(row) for row in read_jsonl(path, repair=True)}

    def _key(self, row: dict):
        return tuple(row.get(k) for k in self.key)

    def write(self, rows: Iterable[dict]) -> None:
        fresh = [r for r in rows if self._key(r) not in self.seen]
        if not fresh:
            return
        text = "".join(json.dumps(r, default=_json_default) + "\n" for r in fresh)
        try:
            with os.fdopen(open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            # Appending never rewrites earlier rows; a torn last row is cut off when the file is reopened.
            raise RuntimeError(f"{self.path}: could not write ({err}); the rows already written are kept") from err
        self.seen.update(self._key(r) for r in fresh)


class NullWriter:
    """A JsonlWriter's stand-in where a process must not write the run directory (a rank other than the
    main one): the rows are dropped, and the file is neither read nor repaired."""

    def write(self, rows: Iterable[dict]) -> None:
        pass


def _json_default(value):
    return value.item() if hasattr(value, "item") else str(value)
