"""The run's history: how many attempts it took, which stages were interrupted and resumed from a trainer
checkpoint, which checkpoints a resume passed over and why, which stages failed, which were trained again after
their final was refused, and the warnings a stage recorded.

From run.json (each stage's `resumed_from`, `skipped_checkpoints`, `status`/`error`, `warnings`), the record each
resume leaves (`.hydra/resume-<time>/`) and the folder a refused final is set aside as (`final.refused`, beside a
stage's `final/`). Folders are listed, never followed out of the run.
"""

from __future__ import annotations

from pathlib import Path

from core.rundir.files import REFUSED_FINAL, STAGES, stage_dirname
from core.rundir.records import Status, stage_records
from eval.report.blocks import Heading, Table, Text, code, fmt, md_escape

RESUME_RECORD = "resume-"  # `.hydra/resume-<time>/`: one per resume that went on (conf/claim.py)


def resumes(run_dir: Path) -> list[str]:
    """The times of the resumes recorded in `.hydra/` (each `resume-<time>/`), in order."""
    hydra = run_dir / ".hydra"
    if not hydra.is_dir() or hydra.is_symlink():
        return []
    return sorted(p.name.removeprefix(RESUME_RECORD) for p in hydra.iterdir()
                  if p.name.startswith(RESUME_RECORD) and p.is_dir() and not p.is_symlink())


def retrained(run_dir: Path, index, name) -> bool:
    """Whether the stage's final was refused once (set aside as `final.refused`) and the stage trained again."""
    if not isinstance(index, int) or not isinstance(name, str) or "/" in name or name in (".", ".."):
        return False
    folder = run_dir / STAGES / stage_dirname(index, name)
    return not folder.is_symlink() and (folder / REFUSED_FINAL).is_dir() and not (folder / REFUSED_FINAL).is_symlink()


def _warning_text(warning) -> str:
    if not isinstance(warning, dict):
        return str(warning)
    return " ".join(str(warning[k]) for k in ("reward", "warning") if warning.get(k) is not None) or str(warning)


def history_rows(run_dir: Path, manifest: dict) -> list[list[str]]:
    """One row per event of a stage's history: (stage, what happened, detail)."""
    rows = []
    for stage in stage_records(manifest):
        name = fmt(stage.name)
        if retrained(run_dir, stage.index, stage.name):
            rows.append([name, "retrained", f"its final was refused and set aside as {REFUSED_FINAL}; trained again "
                                            "from the previous stage's final"])
        if stage.resumed_from:
            rows.append([name, "interrupted, resumed", f"continued from {stage.resumed_from}"])
        for skipped in stage.skipped_checkpoints:
            detail = f"{skipped.get('checkpoint')}: {skipped.get('problem')}" if isinstance(skipped, dict) else skipped
            rows.append([name, "checkpoint skipped", str(detail)])
        if stage.status == Status.FAILED or stage.error:
            rows.append([name, "failed", fmt(stage.error)])
        rows += [[name, "warning", _warning_text(w)] for w in stage.warnings]
    return rows


def history_blocks(run_dir: Path, manifest: dict) -> list:
    """The History section: the attempts, then a row per event, or a line saying the run went straight through."""
    times = resumes(run_dir)
    created = manifest.get("created")
    attempts = (f"{len(times) + 1} attempts: started {md_escape(fmt(created))}, resumed "
                f"{', '.join(md_escape(t) for t in times)} (each resume's record: {code('.hydra/resume-<time>/')})"
                if times else f"one attempt, started {md_escape(fmt(created))}: never resumed")
    error = [Text(md_escape(f"the last attempt failed: {manifest['error']}"))] if manifest.get("error") else []
    rows = history_rows(run_dir, manifest)
    events = [Table(["stage", "what happened", "detail"], rows, left=3)] if rows else [
        Text("no stage was interrupted, retrained, failed or warned; no checkpoint was skipped")]
    return [Heading("History"), Text(attempts), *error, *events]
