"""Content hashes of the checkpoints a run saves: recorded when they are written, compared when read back.

A checkpoint is a folder of files (weights, optimizer state, tokenizer, config). When the run saves
one it records each file's size and sha256 (`checksums.json` in a trainer checkpoint, `files` in a
final's `stage.json`); read back, a file that is missing, of another size or with another hash is
damage (a flipped bit, a truncated copy, a full disk, an edit), and the checkpoint is not used.

Why per-file hashes of the bytes on disk, not the weights' fingerprint (`core.weights.fingerprint`,
which run.json keeps to say which weights a stage started from): they check a file without loading it
(a truncated safetensors file does not even load), they cover what a fingerprint cannot (optimizer and
scheduler state, RNG state, tokenizer, config: each changes what a resume trains), and they name the
file that is damaged. sha256 runs at ~1.7 GB/s here: ~1 s per GB saved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

DIGESTS = "checksums.json"  # a trainer checkpoint's record, written after everything else in it
_CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes, read in chunks (a checkpoint's weights may be larger than memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def folder_digests(folder: Path, *, exclude: tuple[str, ...] = (DIGESTS,)) -> dict[str, dict]:
    """{path relative to `folder`: {"bytes", "sha256"}} for every regular file under it, but `exclude`'s names.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp()); _ = (folder / "w.bin").write_bytes(b"abc")
    >>> folder_digests(folder)["w.bin"]["bytes"], folder_digests(folder)["w.bin"]["sha256"][:12]
    (3, 'ba7816bf8f01')
    """
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and relative not in exclude:
            found[relative] = {"bytes": path.stat().st_size, "sha256": file_digest(path)}
    return found


def damage(folder: Path, recorded) -> str | None:
    """What is wrong with `folder` against the digests `recorded` when it was saved, None when nothing is.

    Sizes first (a truncated file is named without hashing anything), then hashes; files added since are
    not the checkpoint's and are ignored.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp()); _ = (folder / "w.bin").write_bytes(b"abc")
    >>> saved = folder_digests(folder)
    >>> damage(folder, saved) is None
    True
    >>> _ = (folder / "w.bin").write_bytes(b"abd"); damage(folder, saved)
    'w.bin: its sha256 differs from the one recorded when it was saved'
    >>> _ = (folder / "w.bin").write_bytes(b"ab"); damage(folder, saved)
    'w.bin: 2 bytes, 3 when it was saved (truncated?)'
    >>> damage(folder, None)
    'no content hashes recorded (saved before they were kept, or edited)'
    """
    if not _well_formed(recorded):
        return "no content hashes recorded (saved before they were kept, or edited)"
    for name, entry in recorded.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():
            return f"{name}: missing (it was saved with the checkpoint)"
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"{name}: {size} bytes, {entry['bytes']} when it was saved (truncated?)"
    for name, entry in recorded.items():
        if file_digest(folder / name) != entry["sha256"]:
            return f"{name}: its sha256 differs from the one recorded when it was saved"
    return None


def _well_formed(recorded) -> bool:
    """A non-empty mapping of plain relative file names to {bytes: int, sha256: str} (it is read from disk)."""
    if not isinstance(recorded, Mapping) or not recorded:
        return False
    for name, entry in recorded.items():
        if not isinstance(name, str) or name.startswith("/") or ".." in Path(name).parts:
            return False
        if not (isinstance(entry, Mapping) and isinstance(entry.get("bytes"), int)
                and isinstance(entry.get("sha256"), str)):
            return False
    return True
