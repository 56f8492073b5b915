"""Who a run is to the outside: its tracker name, group and id, from Hydra's record of how it was started (a job
named by what its sweep varies, grouped by its sweep folder). Imported before the config is checked: nothing heavy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from core.rundir.files import tracker_group

# Overrides that say where or how a run is recorded, not what it trains: left out of its name.
UNNAMED = ("hydra.", "paths.", "logger.", "logger=", "resume=", "run_name=")


@dataclass(frozen=True)
class RunIdentity:
    name: str  # what the tracker shows
    group: str | None  # the sweep folder (None: a single run)
    job: str | None  # the job number in its sweep
    job_type: str = "curriculum"

    def new_id(self, config_hash: str, started: float | None = None) -> str:
        """A tracker id for a run starting now, unique across sweeps, jobs and configs; run.json keeps it.

        >>> RunIdentity("x", "multirun/a", "3").new_id("38b5bc2345f497e0", started=0.0)
        '19700101-000000-3-38b5bc23'
        """
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if started is None else started))
        return f"{stamp}-{self.job or 'run'}-{config_hash[:8]}"


def run_identity(hydra_cfg, run_dir: Path) -> RunIdentity:
    """The identity of the job Hydra is running (`hydra_cfg`: HydraConfig.get())."""
    overrides = [o for o in hydra_cfg.overrides.task if not o.startswith(UNNAMED)]
    if hydra_cfg.mode.name != "MULTIRUN":
        return RunIdentity(" ".join(overrides) or run_dir.name, tracker_group(run_dir, in_sweep=False), None)
    sweep_dir = Path(hydra_cfg.sweep.dir)
    swept = swept_keys(sweep_dir / "multirun.yaml")
    shown = [o for o in overrides if swept is None or _key(o) in swept]
    job = str(hydra_cfg.job.num)
    return RunIdentity(f"{job}: {' '.join(shown)}" if shown else job, f"{sweep_dir.parent.name}/{sweep_dir.name}", job)


def swept_keys(multirun_yaml: Path) -> set[str] | None:
    """The keys a sweep varies (sweep overrides, the sweeper's `params`); None when its record cannot be read."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        record = OmegaConf.load(multirun_yaml)
        parsed = OverridesParser.create().parse_overrides(list(record.hydra.overrides.task))
    except Exception:  # a folder from elsewhere: untrusted, and only a name depends on it
        return None
    keys = {o.key_or_group for o in parsed if o.is_sweep_override()}
    params = OmegaConf.select(record, "hydra.sweeper.params")
    return keys | {str(k) for k in (params or {})}


def _key(override: str) -> str:
    """
    >>> _key("+reward.weights.format=0.5"), _key("~eval.every")
    ('reward.weights.format', 'eval.every')
    """
    return override.split("=", 1)[0].lstrip("+~")
