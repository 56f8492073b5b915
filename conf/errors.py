"""How a bad config is refused: one `config error:` line that names the key, before a run directory exists.

`check_schema` refuses what Hydra's schema lets through (`+key=value`); `run_app` ends every config error as one line,
any other with its traceback. A multirun under torchrun/accelerate runs the sweeper and launcher on every rank: only
Hydra's basic ones run in step, so `LaunchCheck` refuses others with the way that works (`launch=`).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from conf import CONF_DIR, run_dir
from conf.ranges import check_field_ranges, check_interpolations, check_output_dir
from conf.schema import typed_blocks
from core.checks import ConfigError
from core.distributed import launched_world_size
from core.stage_kinds import STAGE_KIND_FACTS

# Hydra's loader; an error raised while it runs comes from the command line or a YAML file
_COMPOSING = os.path.join("hydra", "_internal", "config_loader_impl.py")

# What Hydra's own basic sweeper and launcher are (`_target_`), the ones every rank can run in step
BASIC = {"sweeper": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
         "launcher": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}


def check_schema(cfg: DictConfig) -> None:
    """Raise ConfigError for the first key the schema refuses (even `+key`); merged untyped (typed, extras ride)."""
    config = OmegaConf.to_container(cfg, resolve=False)
    config.pop("hydra", None)
    for key, data, record in typed_blocks(config):
        if not isinstance(data, dict):
            fields = ", ".join(field.name for field in dataclasses.fields(record))
            raise ConfigError(f"{key}: {data!r} is not a block of {fields}")
        try:
            OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(record), data), throw_on_missing=True)
        except OmegaConfBaseException as err:
            raise ConfigError(_omegaconf_line(err, prefix=key)) from None


class SchemaCheck(Callback):
    """`check_schema` and `resume=` (a `hydra.run.dir=` replaces its resolver) before Hydra enters the run directory;
    a refusal ends the process here, as Hydra turns a callback's exception into a warning."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config)
        try:
            run_dir(config.resume, fresh="")
            check_output_dir(Path(str(config.hydra.run.dir)))
        except ConfigError as err:
            exit_on_config_error(err)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:  # a sweep job: its swept values are not in the sweep's config
            self._check(config)

    @staticmethod
    def _check(config: DictConfig) -> None:
        try:
            check_schema(config)
            check_interpolations(config)
        except ConfigError as err:
            exit_on_config_error(err)


def accelerate_file(launch: Mapping) -> Path:
    """The accelerate launch file `launch.accelerate_config` names."""
    return CONF_DIR / "accelerate" / f"{launch['accelerate_config']}.yaml"


def check_launch(launch: Mapping) -> None:
    """`launch.*` values a job can start processes with: the schema's ranges, then rules across keys.

    >>> check_launch({"launcher": "torchrun", "processes": 0, "accelerate_config": "ddp", "gpus": None})
    Traceback (most recent call last):
    core.checks.ConfigError: launch.processes: 0 is not a whole number > 0 (processes a job starts)
    """
    check_field_ranges({"launch": dict(launch)})
    processes, gpus = launch["processes"], launch.get("gpus")
    if launch["launcher"] == "python" and processes != 1:
        raise ConfigError(f"launch.processes: launch.launcher=python starts one process (got {processes}); "
                          "for more per job: launch.launcher=torchrun or accelerate")
    if launch["launcher"] == "accelerate" and not accelerate_file(launch).is_file():
        known = sorted(p.stem for p in (CONF_DIR / "accelerate").glob("*.yaml"))
        raise ConfigError(f"launch.accelerate_config: {launch['accelerate_config']!r} is not a launch file under "
                          f"conf/accelerate/ ({', '.join(known)})")
    if gpus is None:
        return
    if launch["launcher"] is None:
        raise ConfigError("launch.gpus: GPUs are shared out to jobs that start their own run (launch=per_gpu); "
                          "this process trains on what CUDA_VISIBLE_DEVICES shows it: drop launch.gpus, or set it")
    if not gpus:
        raise ConfigError("launch.gpus: no GPU to share out here (CUDA_VISIBLE_DEVICES hides them all, or is "
                          "unset and nvidia-smi lists none); name them (launch.gpus=[0,1]), or drop launch=per_gpu")
    if len(set(gpus)) != len(gpus) or len(gpus) < processes:
        raise ConfigError(f"launch.gpus: {list(gpus)} must name distinct GPUs, at least launch.processes "
                          f"({processes}) of them: a job claims that many")


def launched_sweep_problem(targets: Mapping[str, str], choices: Mapping[str, str | None],
                           world_size: int) -> str | None:
    """Why a multirun cannot run on each of `world_size` launched processes (`targets`: the sweeper's and
    launcher's `_target_`), or None.

    >>> optuna = {"sweeper": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
    ...           "launcher": BASIC["launcher"]}
    >>> launched_sweep_problem(optuna, {"hydra/sweeper": "optuna"}, 1) is None  # one process: any sweep
    True
    >>> print(launched_sweep_problem(optuna, {"hydra/sweeper": "optuna"}, 2))  # doctest: +NORMALIZE_WHITESPACE
    hydra/sweeper=optuna: under torchrun or accelerate launch (2 processes) every rank runs this sweep and its
    sweeper, which would ask the study for trials on every rank, and each rank would train its own alone; start
    the sweep as one process (python -m train -m ...) and let each job start its ranks: launch=torchrun or
    launch=accelerate, launch.processes=2
    >>> launched_sweep_problem(BASIC, {"hydra/sweeper": "basic", "hydra/launcher": "basic"}, 2) is None
    True
    """
    if world_size <= 1:
        return None
    for part in ("sweeper", "launcher"):
        if targets[part] != BASIC[part]:
            choice = f"hydra/{part}={choices.get(f'hydra/{part}') or targets[part]}"
            what = ("would ask the study for trials on every rank, and each rank would train its own alone"
                    if part == "sweeper" else "would start every job once per rank")
            return (f"{choice}: under torchrun or accelerate launch ({world_size} processes) every rank runs this "
                    f"sweep and its {part}, which {what}; start the sweep as one process (python -m train -m ...) "
                    f"and let each job start its ranks: launch=torchrun or launch=accelerate, "
                    f"launch.processes={world_size}")
    return None


class LaunchCheck(Callback):
    """`check_launch` before a run or a sweep starts, and `launched_sweep_problem` before the sweeper is made."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        try:
            check_launch(OmegaConf.to_container(config.launch, resolve=True))
        except ConfigError as err:
            exit_on_config_error(err)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        targets = {part: str(config.hydra[part]._target_) for part in BASIC}
        problem = launched_sweep_problem(targets, dict(config.hydra.runtime.choices), launched_world_size())
        if problem is not None:
            raise SystemExit(f"config error: {problem}")
        self.on_run_start(config)


def config_error_line(err: BaseException) -> str | None:
    """The one line for a config error (ours, a resolver's, anything raised while Hydra composes), else None."""
    if isinstance(err, ConfigError):
        return str(err)
    if isinstance(err, InterpolationResolutionError):  # a resolver refused a value (resume=): its message says it
        first = str(err).splitlines()[0]
        return first.partition("while resolving interpolation: ")[2] or f"{err.full_key}: {first}"
    if not _composing(err):
        return None
    cause = err if isinstance(err, OmegaConfBaseException) else err.__cause__ or err.__context__
    override = _override_being_applied(err)
    if isinstance(cause, OmegaConfBaseException):
        line, source = _omegaconf_line(cause), re.match(r"In '([^']+)':", str(err))
        if source:  # a YAML file of conf/ holds the bad value
            return f"{line} (in conf/{source[1]}.yaml)"
        if override and line.split(".")[0].split(":")[0] != override.key_or_group.split(".")[0]:
            return f"{line} (in {override.input_line})"  # OmegaConf named it from inside a list of records
        return line
    if isinstance(err, MissingConfigException) and err.options:
        return f"{str(err).splitlines()[0]}; options: {', '.join(err.options)}"
    if isinstance(err, AssertionError) and "root: NoneType" in str(err) and override:
        # OmegaConf 2.3 cannot set a key inside a typed block that is null; curriculum is the one such block
        return f"{override.input_line}: sets a key of a block that is null here; choose a curriculum first " \
               "(+curriculum=kk_ladder)"
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip())


def exit_on_config_error(err: BaseException) -> None:
    """End the process with one `config error:` line if `err` is a config error; else return."""
    line = config_error_line(err)
    if line is not None:
        raise SystemExit(f"config error: {line}") from None  # Hydra adds nothing to a SystemExit


def run_app(main: Callable[[], object]) -> None:
    """Run a `@hydra.main` function, a config error ending it as one line."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except Exception as err:
        exit_on_config_error(err)
        raise


def _composing(err: BaseException) -> bool:
    if isinstance(err, (ConfigCompositionException, OverrideParseException)):
        return True
    return any(frame.f_code.co_filename.endswith(_COMPOSING) for frame, _ in traceback.walk_tb(err.__traceback__))


def _override_being_applied(err: BaseException):
    """The command-line override (Hydra's Override) that its loader was applying when `err` was raised."""
    for frame, _ in traceback.walk_tb(err.__traceback__):
        override = frame.f_locals.get("override") if frame.f_code.co_filename.endswith(_COMPOSING) else None
        if getattr(override, "input_line", None) and getattr(override, "key_or_group", None):
            return override
    return None


def _omegaconf_line(err: OmegaConfBaseException, prefix: str = "") -> str:
    """`<key>: <what is wrong>` (the key under `prefix`), with the closest real key for an unknown one."""
    key = ".".join(part for part in (prefix, err.full_key or str(err.key or "")) if part)
    if isinstance(err, MissingMandatoryValue):
        return f"{key}: missing; give it a value ({key}=...)"
    if isinstance(err, (ConfigKeyError, ConfigAttributeError)) and err.key is not None:
        if isinstance(err.object_type, type) and dataclasses.is_dataclass(err.object_type):
            return f"{key}: not a config key; {_closest(str(err.key), key, err.object_type)}{_sweeper_hint(key)}"
        return (f"{key}: not a config key; {_closest_in_open_group(str(err.key), key, err.parent_node)}"
                f"{_sweeper_hint(key)}")
    return f"{key}: {err.msg.splitlines()[0]}" if key else err.msg.splitlines()[0]


def _sweeper_hint(key: str) -> str:
    """A hint for a sweeper's key on Hydra's basic sweeper: the search selecting Optuna is not on the command line."""
    if not key.startswith("hydra.sweeper."):
        return ""
    searches = ", ".join(sorted(p.stem for p in (CONF_DIR / "hparams_search").glob("*.yaml")))
    return (f" (the basic sweeper's keys: {key.rsplit('.', 1)[-1]} is a search's, which +hparams_search=<search> "
            f"selects: {searches}; a resume takes the command the search started with)")


def _closest_in_open_group(name: str, key: str, node) -> str:
    """'did you mean <key>?' from the open group's keys (and a trainer group's TRL fields), and how to add one."""
    known = list(node.keys()) if isinstance(node, DictConfig) else []
    group = STAGE_KIND_FACTS.get(key.split(".")[0])
    if group is not None and key.count(".") == 1:
        # TRL imported only once a key is refused (seconds); bitsandbytes kept unloaded, as the apps keep it
        from core.models import defer_bitsandbytes

        defer_bitsandbytes(set())
        import trl

        known += [field.name for field in dataclasses.fields(getattr(trl, group.trainer_config))]
    close = difflib.get_close_matches(name, [str(k) for k in known], n=1)
    add = f"to add a key to an open group, write +{key}=..."
    return f"did you mean {key[: len(key) - len(name)]}{close[0]}? ({add})" if close else add


def _closest(name: str, key: str, record: type) -> str:
    """'did you mean <key>?' from the record's fields (difflib), else the fields it has."""
    fields = [field.name for field in dataclasses.fields(record)]
    close = difflib.get_close_matches(name, fields, n=1)
    if close:
        return f"did you mean {key[: len(key) - len(name)]}{close[0]}?"
    return f"known: {', '.join(fields)}"
