"""`python -m eval.report [DIR ...] [--outputs ROOT] [--out OUT]`: plots, report.md and report.html.

DIR: a run, a Hydra multirun (sweep) or a `python -m eval` folder (default: the latest under ROOT, the config's
`paths.output_dir`); its report goes to `DIR/report/`. Several runs are laid side by side in one report, written to
OUT (default ROOT/compare/<time>/). Missing data (a run in progress, a key not logged) becomes a note."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from rich.console import Console
from rich.markup import escape

from conf import CONF_DIR
from core.rundir.files import ERROR, EVALUATION, LOCK_FILE, OWNER_FILE, RUN_JSON, write_text_atomic
from eval.report.blocks import Image, to_html, to_markdown
from eval.report.run import evaluation_report, is_evaluation, run_report
from eval.report.sweep import compare_report, sweep_report

REPORT_DIR = "report"


def is_sweep(path: Path) -> bool:
    """A multirun directory: Hydra's multirun.yaml, or numbered job folders and no run.json of its own."""
    if (path / "multirun.yaml").exists():
        return True
    return not (path / RUN_JSON).exists() and any(p.is_dir() and p.name.isdigit() for p in path.iterdir())


def _last_modified(path: Path) -> float:
    """Newest mtime of what a run or sweep holds, two levels deep, its report and lock files left out (reporting on
    an old run, or a refused resume, must not make it the latest)."""
    times = []
    for child in path.iterdir():
        if child.name not in (REPORT_DIR, LOCK_FILE, OWNER_FILE):
            times.append(child.stat().st_mtime)
            if child.is_dir():
                times += [grand.stat().st_mtime for grand in child.iterdir() if grand.name != REPORT_DIR]
    return max(times, default=path.stat().st_mtime)


def is_run(path: Path) -> bool:
    """A run folder: its run.json, or the error.txt of a run that failed before writing one."""
    return (path / RUN_JSON).is_file() or (path / ERROR).is_file()


def runs_under(path: Path, depth: int = 3, limit: int = 10) -> list[Path]:
    """Runs and sweeps inside `path` (at most `depth` levels down), newest first, at most `limit`."""
    found, level = [], [path]
    for _ in range(depth):
        level = [child for folder in level for child in sorted(folder.iterdir()) if child.is_dir()
                 and not child.is_symlink() and child.name != REPORT_DIR]
        found += [p for p in level if is_run(p) or (p / "multirun.yaml").is_file()]
        level = [p for p in level if p not in found]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[:limit]


def refuse_non_run(target: Path) -> None:
    """End with one message, naming the runs inside it, when `target` is no run, sweep or `python -m eval` folder."""
    if is_run(target) or is_sweep(target) or is_evaluation(target):
        return
    inside = runs_under(target)
    seen = "; runs and sweeps inside it, newest first: " + ", ".join(map(str, inside)) if inside else \
        "; no run or sweep inside it either"
    raise SystemExit(f"{target}: not a run, sweep or python -m eval folder (no {RUN_JSON}, no multirun.yaml, "
                     f"no {EVALUATION}){seen}")


def latest_output(outputs: Path) -> Path | None:
    """The most recently modified of `outputs`/runs/* with a run.json and `outputs`/multirun/*, or None."""
    candidates = [p for sub in ("runs", "multirun") if (outputs / sub).is_dir()
                  for p in (outputs / sub).iterdir() if p.is_dir() and (sub == "multirun" or (p / RUN_JSON).exists())]
    return max(candidates, key=_last_modified, default=None)


def write_document(out_dir: Path, report: Callable[..., tuple[str, list]], target) -> Path:
    """report.md and report.html of `report`'s blocks in `out_dir`, made a real folder (not a planted symlink) and
    emptied of PNGs (a figure skipped this time must not linger); the page embeds only the PNGs these blocks drew."""
    if out_dir.is_symlink():
        out_dir.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.png"):
        stale.unlink()
    title, blocks = report(target, out_dir)
    markdown = to_markdown(title, blocks)
    write_text_atomic(out_dir / "report.md", markdown)
    images = [block.path.name for block in blocks if isinstance(block, Image)]
    write_text_atomic(out_dir / "report.html", to_html(title, markdown, out_dir, images))
    return out_dir


def write_report(target: Path) -> Path:
    """Write `target`/report/ (report.md, report.html, PNGs) for a run, sweep or `python -m eval` folder; returns it."""
    report = evaluation_report if is_evaluation(target) else sweep_report if is_sweep(target) else run_report
    return write_document(target / REPORT_DIR, report, target)


def configured_output_dir() -> Path:
    """`paths.output_dir` of the composed config: where `python -m train` puts runs and sweeps."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return Path(compose("config").paths.output_dir)


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m eval.report", description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="*", type=Path, metavar="DIR",
                        help="a run or sweep directory (default: the latest); several runs: side by side")
    parser.add_argument("--outputs", type=Path, default=None,
                        help="output root searched for the latest run or sweep (default: paths.output_dir)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where a comparison of several runs goes (default: <outputs>/compare/<time>)")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise SystemExit(f"--out {args.out}: a file, not a folder; give a folder for the comparison (made if missing)")
    targets = list(dict.fromkeys(args.dirs))
    if not targets:
        outputs = args.outputs or configured_output_dir()
        latest = latest_output(outputs)
        if latest is None:
            raise SystemExit(f"no run or sweep under {outputs}/runs or {outputs}/multirun; pass a directory")
        targets = [latest]
    for target in targets:
        if not target.is_dir():
            raise SystemExit(f"{target}: not a directory")
        refuse_non_run(target)
    if len(targets) == 1:
        out_dir, what = write_report(targets[0]), f"report for {escape(str(targets[0]))}"
    else:
        if sweeps := [t for t in targets if is_sweep(t)]:
            raise SystemExit(f"{sweeps[0]}: a sweep; compare runs (a sweep's jobs are <sweep>/<n>), or report "
                             "the sweep alone")
        # by default inside none of the compared runs
        out = args.out or (args.outputs or configured_output_dir()) / "compare" / time.strftime("%Y-%m-%d_%H-%M-%S")
        out_dir, what = write_document(out, compare_report, targets), f"comparison of {len(targets)} runs"
    images = sorted(p.name for p in out_dir.glob("*.png"))
    console = Console()
    # soft_wrap: a path must stay on one line to be copied; escape: a path may hold "[...]" (rich markup)
    console.print(f"[bold green]{what}[/] written to:", soft_wrap=True)
    for name in ("report.md", "report.html"):
        console.print(f"  {escape(str(out_dir / name))}", soft_wrap=True)
    console.print(f"  {len(images)} image(s): {', '.join(images) or 'none'}", soft_wrap=True)
    return out_dir
