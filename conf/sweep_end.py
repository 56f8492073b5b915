"""A multirun's last lines: how many of its jobs failed (then exit status 1) and the command for the sweep's report.
Under a launcher only the main process reads the folders (it alone writes run.json) and every rank takes its answer.
"""

from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from core.distributed import on_main, start_processes
from core.rundir.files import ERROR, RUN_JSON, read_mapping, report_command
from core.rundir.records import Status


def job_folders(sweep: Path) -> list[Path]:
    """The sweep's job folders (`<sweep>/<n>/`, Hydra's `hydra.sweep.subdir`), in job order; [] for none.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = [(Path(d) / name).mkdir() for name in ("0", "1", "7", ".hydra")]
    ...     [p.name for p in job_folders(Path(d))], job_folders(Path(d) / "none")
    (['0', '1', '7'], [])
    """
    jobs = [p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()] if sweep.is_dir() else []
    return sorted(jobs, key=lambda p: int(p.name))


def job_failed(job: Path) -> bool:
    """Whether a job's run did not end done: its error.txt (a failure, or a refusal), or a run.json not done."""
    if (job / ERROR).is_file():
        return True
    return read_mapping(job / RUN_JSON).get("status") != Status.DONE  # {}: no run.json, no error.txt: it never ran


class SweepReportCommand(Callback):
    """Prints, once the sweep's jobs are done, the command for their report; exit status 1 naming any failed."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep = Path(config.hydra.sweep.dir)
        jobs, failed = on_main(lambda: _say_sweep_end(sweep), start_processes())
        if failed:
            raise SystemExit(f"{len(failed)} of {len(jobs)} jobs failed: {', '.join(map(str, failed))} "
                             f"(each holds its {ERROR})")


def _say_sweep_end(sweep: Path) -> tuple[list[Path], list[Path]]:
    """The sweep's job folders and those that failed, printed with the report's command (the main process)."""
    jobs = job_folders(sweep)
    failed = [job for job in jobs if job_failed(job)]
    print(f"sweep done: {sweep} ({len(jobs)} jobs, {len(failed)} failed)\n"
          f"report of every job compared: {report_command(sweep)}", flush=True)
    return jobs, failed
