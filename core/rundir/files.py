"""The run directory on disk: file names, files kept inside it, the run lock, JSONL appended so a kill leaves no
half record, and lenient readers of a run that may be writing (plain Python: neither torch nor the trainer).

A run folder may be someone else's (sent, crafted): a resume following a link would write outside it. So the lock's
holder refuses a symbolic link out of it or a file with more than one name (`check_links`), the run opens its files
without following a link (`open_regular`), and a report reads a received folder through `read_inside`.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from filelock import FileLock, Timeout

from core.parse_limits import ParseLimitError, parse_json, parse_yaml

log = logging.getLogger(__name__)

RUN_JSON = "run.json"
METRICS = "metrics.jsonl"
VALIDATION = "validation.jsonl"
VALIDATION_STEPS = "validation_steps.jsonl"
CONFIG = "config.yaml"
ERROR = "error.txt"  # a failed job's traceback (removed when a resume finishes it)
SAMPLES = "samples"
EVALUATION = "evaluation.json"  # what `python -m eval` validated, in its folder (outputs/eval/<time>/)
ROLLOUTS = "rollouts.jsonl"  # training rollouts sampled every `rollouts.every` steps (train/tracking.py)
STAGES = "stages"
REFUSED_FINAL = "final.refused"  # a done stage's final a resume refused, set aside beside `final/`
BASELINE = "baseline"  # validation before any stage: stage 0, samples/0-baseline
TRACKER_DIR = "wandb"  # wandb.init(dir=<run>) keeps its files here
# Taking the lock truncates LOCK_FILE, so its mtime says when a process last tried the run, not when it changed.
LOCK_FILE, OWNER_FILE = "run.lock", "run.owner"


def stage_dirname(index: int, name: str) -> str:
    """`<k>-<name>`: a stage's folder under `stages/` and `samples/`.

    >>> stage_dirname(5, "6ppl")
    '5-6ppl'
    """
    return f"{index}-{name}"


def stage_path(run_dir: Path, dirname: str) -> Path:
    """`<run>/stages/<k>-<name>`: the stage's trainer checkpoints (`trainer/`) and its `final/`."""
    return run_dir / STAGES / dirname


def final_checkpoint(dirname: str) -> Path:
    """`stages/<k>-<name>/final`, relative to the run directory (run.json records it so: a run may be moved).

    >>> final_checkpoint("1-2ppl").as_posix()
    'stages/1-2ppl/final'
    """
    return Path(STAGES) / dirname / "final"


def run_of_final(checkpoint: Path) -> Path | None:
    """The run directory a stage's final belongs to (`<run>/stages/<k>-<name>/final`), else None.

    >>> run_of_final(Path("/o/runs/x/stages/1-2ppl/final")).as_posix(), run_of_final(Path("/models/qwen"))
    ('/o/runs/x', None)
    """
    parts = checkpoint.parts
    if len(parts) >= 3 and parts[-1] == "final" and parts[-3] == STAGES:
        return checkpoint.parents[2]
    return None


def samples_dir(run_dir: Path, dirname: str) -> Path:
    """`<run>/samples/<k>-<name>` (`0-baseline` for the baseline): one `<level>.jsonl` per subset."""
    return run_dir / SAMPLES / dirname


def samples_file(samples: Path, level: str) -> Path:
    return samples / f"{level}.jsonl"


def tracker_group(run_dir: Path, *, in_sweep: bool) -> str:
    """The tracker group a run and every `python -m eval` of its finals share: its sweep's folder, else its own.

    >>> tracker_group(Path("outputs/multirun/2026-12-01_10-00-00/3"), in_sweep=True)
    'multirun/2026-12-01_10-00-00'
    >>> tracker_group(Path("outputs/runs/2026-12-01_11-00-00"), in_sweep=False)
    'runs/2026-12-01_11-00-00'
    """
    folder = run_dir.parent if in_sweep else run_dir
    return f"{folder.parent.name}/{folder.name}"


def report_command(folder: Path | str) -> str:
    """The shell command for `folder`'s report.

    >>> report_command(Path("outputs/runs/x")), report_command("my runs/x")
    ('python -m eval.report outputs/runs/x', "python -m eval.report 'my runs/x'")
    """
    return f"python -m eval.report {shlex.quote(str(folder))}"


class OutsideRunError(RuntimeError):
    """A write or a path that would leave the run directory (a symbolic or hard link, a path in run.json)."""


def refuse_link(path: Path) -> None:
    """An error naming `path` if it is a symbolic link or a regular file with another name (a hard link)."""
    if Path(path).is_symlink():
        raise OutsideRunError(f"{path}: a symbolic link (to {os.readlink(path)}); the run writes only regular "
                              "files inside its directory: replace the link with the file")
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    _refuse_other_names(path, found)


def _refuse_other_names(path: Path, found: os.stat_result) -> None:
    if stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
        raise OutsideRunError(f"{path}: a hard link ({found.st_nlink} names for one file, maybe one outside the run); "
                              f"the run writes only files it created: replace it with a copy of its own "
                              f"(cp {path} {path}.copy && mv {path}.copy {path})")


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` that follows no symbolic link and refuses a hard link; O_TRUNC only once the file is the run's."""
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW, mode)
    except OSError:
        refuse_link(path)
        raise
    try:
        _refuse_other_names(path, os.fstat(fd))
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_text_regular(path: Path, text: str) -> None:
    """`path.write_text(text)` through `open_regular`."""
    with os.fdopen(open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fh:
        fh.write(text)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file no reader sees partial: a temporary beside it (through `open_regular`), renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, payload) -> None:
    """`write_text_atomic` of `payload` as indented JSON."""
    write_text_atomic(path, json.dumps(payload, indent=2, default=str))


def inside_run(run_dir: Path, path: Path | str) -> bool:
    """Whether `path` (relative to `run_dir`, or absolute), links resolved, lies inside `run_dir`.

    >>> run = Path("/o/run")
    >>> inside_run(run, "stages/1-a/final"), inside_run(run, "../x"), inside_run(run, "/etc")
    (True, False, False)
    """
    root = Path(run_dir).resolve()
    return (root / path).resolve().is_relative_to(root)


def read_inside(folder: Path, path: Path) -> bytes | None:
    """The bytes of the regular file `path` inside `folder`; None when missing, not a file, or linked out."""
    if not inside_run(folder, path):
        return None
    try:
        fd = os.open(Path(path).resolve(), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def check_links(run_dir: Path) -> None:
    """Refuse a run directory holding a symbolic link out of it, or a file with another name. Links under `wandb/`
    are left alone (wandb links its debug logs to its cache; the run writes nothing there), not `wandb/` itself."""
    run_dir = Path(run_dir)
    tracker = run_dir / TRACKER_DIR
    for folder, dirs, files in os.walk(run_dir):  # never into a linked folder: each link is checked as an entry
        wandbs = Path(folder) == tracker or tracker in Path(folder).parents
        for path in (Path(folder) / name for name in (*dirs, *files)):
            if path.is_symlink() and not wandbs and not inside_run(run_dir, path):
                raise OutsideRunError(f"{path}: a symbolic link out of the run directory (to {os.readlink(path)}); "
                                      "the run writes only inside its directory: replace the link with what it "
                                      "points to, or remove it")
            _refuse_other_names(path, os.lstat(path))


class RunLockedError(RuntimeError):
    """Another live process is running in this run directory."""


class RunLock:
    """Context manager: hold `<run_dir>/run.lock` (a kernel flock, gone with its holder) for the run's life, refusing
    at once a second writer; the holding process may take it again. `run.owner` names the holder for the refusal."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.owner = Path(run_dir) / OWNER_FILE
        self._lock = FileLock(self.path, timeout=0, is_singleton=True)

    def hold(self) -> RunLock:
        """Take the lock: a context manager's `__enter__`, or for the life of the process."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        refuse_link(self.path)  # the lock file is opened (and truncated) by filelock, which follows links
        try:
            self._lock.acquire()
        except Timeout:
            raise RunLockedError(f"{self.path.parent}: already running ({self._holder()} holds {self.path}); "
                                 "wait for it to finish, or stop it, before resuming") from None
        try:
            check_links(self.path.parent)
            write_text_regular(self.owner, str(os.getpid()))
        except BaseException:
            self._lock.release()
            raise
        return self

    __enter__ = hold

    def _holder(self) -> str:
        try:
            return f"pid {int(self.owner.read_text())}"
        except (OSError, ValueError):  # the holder has not written its pid yet
            return "another process"

    def __exit__(self, *exc) -> None:
        if self._lock.lock_counter == 1:  # the process lets go of the directory (not a nested hold)
            self.owner.unlink(missing_ok=True)
        self._lock.release()


@dataclass(frozen=True)
class JsonlScan:
    """A jsonl text's rows, damaged (1-based) line numbers, last non-blank line, and bytes before the first damage."""

    rows: list[dict]
    damaged: list[int]
    last_line: int
    intact_bytes: int


def parse_jsonl(raw: bytes) -> JsonlScan:
    """Scan jsonl bytes; blank lines are skipped, anything not a JSON object (or nested too deep) is damage.

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
    """`parse_jsonl` of a file, a missing one empty; `inside`: a received folder, read through `read_inside`."""
    if inside is not None:
        return parse_jsonl(read_inside(inside, path) or b"")
    return parse_jsonl(path.read_bytes()) if path.exists() else JsonlScan([], [], 0, 0)


def read_jsonl(path: Path, *, repair: bool = False) -> list[dict]:
    """Rows of a jsonl file: a torn last line dropped (cut off when `repair`); damage on another line raises."""
    scan = scan_jsonl(path)
    if scan.damaged and scan.damaged[0] != scan.last_line:
        raise ValueError(f"{path}:{scan.damaged[0]}: not valid JSON")
    if repair and scan.damaged:
        with os.fdopen(open_regular(path, os.O_RDWR), "r+b") as fh:
            fh.truncate(scan.intact_bytes)
    return scan.rows


class JsonlWriter:
    """Append rows to a jsonl file, fsynced, skipping rows whose `key` is recorded (a resume redoes steps)."""

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
    """A JsonlWriter's stand-in on a rank other than the main one: rows dropped, the file never read."""

    def write(self, rows: Iterable[dict]) -> None:
        pass


def _json_default(value):
    return value.item() if hasattr(value, "item") else str(value)


def load_file(path: Path, *, inside: Path | None = None):
    """A JSON or YAML file's data; None when missing, unreadable or beyond limits (logged); `inside`: received."""
    try:
        raw = path.read_bytes() if inside is None else read_inside(inside, path)
        if raw is None:
            return None
        text = raw.decode()
        return parse_json(text, str(path)) if path.suffix == ".json" else parse_yaml(text, str(path))
    except ParseLimitError as err:
        log.warning("%s", err)
        return None
    except (OSError, ValueError, yaml.YAMLError):
        return None


def read_mapping(path: Path, *, inside: Path | None = None) -> dict:
    """`load_file` for a file that holds a mapping (run.json, config.yaml): {} when it does not."""
    data = load_file(path, inside=inside)
    return data if isinstance(data, dict) else {}
