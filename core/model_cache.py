"""A build-once cache of model checkpoints (the tiny model, the converted SmolLM2): each entry is named after a hash
of its spec and built in a private temporary directory renamed into place once its completion marker is written (a
killed build's leftover is removed once its process is gone; of two builds at once the first rename wins).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

# Written last into a finished build; an entry without it (or with another spec) is not reused.
COMPLETION_MARKER = "kk_build.json"
TEMP_PREFIX = ".tmp-"


class ModelUnavailableError(RuntimeError):
    """The requested model cannot be obtained here (no network to its source, missing tool)."""


def entry_name(kind: str, spec: dict) -> str:
    """The cache directory name for `spec`: `<kind>-<hash>`, stable across processes and runs."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return f"{kind}-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def is_complete(entry: Path, spec: dict) -> bool:
    """True when `entry` holds a finished build of exactly `spec`."""
    marker = entry / COMPLETION_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text())["spec"] == spec
    except (ValueError, KeyError):
        return False


def cached_build(cache_dir: str | Path, kind: str, spec: dict, build: Callable[[Path], dict]) -> Path:
    """The finished cache entry for `spec`, calling `build(tmp_dir)` (-> the marker's facts) only if none."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    name = entry_name(kind, spec)
    entry = cache_dir / name
    if is_complete(entry, spec):
        return entry
    # Checked again after exists(): another process may have published the entry in between.
    if entry.exists() and not is_complete(entry, spec):
        log.warning("model cache: %s has no completion marker for this spec; rebuilding it", entry)
        shutil.rmtree(entry, ignore_errors=True)
    _remove_orphaned_temp_dirs(cache_dir, name)
    tmp = cache_dir / f"{temp_dir_prefix(name)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        started = time.perf_counter()
        facts = build(tmp)
        record = {"spec": spec, "build_seconds": round(time.perf_counter() - started, 2), **facts}
        (tmp / COMPLETION_MARKER).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        _publish(tmp, entry, spec)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("model cache: built %s", entry)
    return entry


def _publish(tmp: Path, entry: Path, spec: dict) -> None:
    """Rename the finished build into place; if another process got there first, keep theirs."""
    try:
        os.replace(tmp, entry)
    except OSError:
        if not is_complete(entry, spec):
            raise


def temp_dir_prefix(name: str) -> str:
    """Temporary build dirs are `<prefix><pid>-<random>`, the host named (only it can tell its pids are alive)."""
    return f"{TEMP_PREFIX}{name}-{socket.gethostname()}-"


def _remove_orphaned_temp_dirs(cache_dir: Path, name: str) -> None:
    """Delete this host's temporary build dirs of this entry whose process has died (killed builds)."""
    prefix = temp_dir_prefix(name)
    for leftover in cache_dir.glob(f"{prefix}*"):
        pid_text = leftover.name[len(prefix):].split("-")[0]
        if not (pid_text.isdigit() and _process_alive(int(pid_text))):
            log.info("model cache: removing the leftover of an interrupted build: %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0 only checks)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True
