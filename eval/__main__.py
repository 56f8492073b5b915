"""`python -m eval model=<checkpoint dir or hub id> [overrides]`: validate any model like a run does (docs/eval.md),
on a run's pools, prompt and grader; a stage's final takes its run's settings from its `config.yaml`. Everything is
checked before any model loads; a path that does not exist is named as such, never looked up on the hub.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import hydra
import torch
import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf import CONF_DIR
from conf.errors import run_app
from conf.ranges import check_ranges
from conf.schema import DataConfig, EvalConfig, ModelConfig, PromptConfig
from core.checks import ConfigError
from core.models import (
    ModelUnavailableError,
    configure_cpu_threads,
    defer_bitsandbytes,
    defer_deepspeed,
    quiet_libraries,
    resolve_model,
)
from core.parse_limits import ParseLimitError, parse_yaml
from core.rundir.files import (
    CONFIG,
    EVALUATION,
    SAMPLES,
    VALIDATION,
    JsonlWriter,
    read_inside,
    read_jsonl,
    run_of_final,
    tracker_group,
    write_json_atomic,
)
from core.rundir.records import row_level
from core.stats import rate_text
from core.tracker import TrackerStartError, open_tracker
from core.weight_check import check_weights_match
from curriculum.tasks import build_task
from curriculum.tasks.base import RecordError, Task
from eval.checkpoint import check_final, check_task, check_tokenizer_files, checkpoint_source, run_cpu_threads
from eval.generation import CPU_TOKENS_PER_SECOND, CPU_WARN_HOURS
from eval.metrics import trials
from eval.settings import (
    check_context_length,
    check_cpu_head_size,
    check_eval_config,
    validation_pools,
    validation_settings,
)


def split_checkpoint_arg(argv: list[str]) -> list[str]:
    """Turn `model=<path or hub id>` into `checkpoint=<it>`; `model=<config name>` stays a group choice.

    >>> split_checkpoint_arg(["model=tiny", "eval.n=4"])
    ['model=tiny', 'eval.n=4']
    >>> split_checkpoint_arg(["model=outputs/runs/x/stages/1-2ppl/final"])
    ['checkpoint=outputs/runs/x/stages/1-2ppl/final']
    """
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if eq and name == "model" and not (CONF_DIR / "model" / f"{value}.yaml").exists():
            arg = f"checkpoint={value}"
        out.append(arg)
    return out


# The groups a run's final is validated with, as the run had them (the task's keys are its own: build_task checks).
RUN_GROUPS = {"model": ModelConfig, "eval": EvalConfig, "prompt": PromptConfig, "data": DataConfig, "task": None}


def run_settings(checkpoint: Path, composed: Mapping[str, DictConfig | None],
                 overrides: list[str]) -> dict[str, DictConfig]:
    """The groups of a final's run, typed (untrusted), with what `overrides` set taken from `composed`; else {}."""
    run_dir = run_of_final(checkpoint.resolve())
    if run_dir is None:
        return {}
    saved = run_config(run_dir)
    chosen = overrides_keys(overrides)
    groups = {}
    for name, record in RUN_GROUPS.items():
        if name in chosen and name != "model" or saved.get(name) is None:
            continue
        try:
            group = OmegaConf.merge(OmegaConf.structured(record) if record else {}, saved[name])
        except OmegaConfBaseException as err:
            raise ConfigError(f"{run_dir / CONFIG}: {name}: {str(err).splitlines()[0]}") from None
        for key in (k.split(".", 1)[1] for k in chosen if k.startswith(f"{name}.")):
            OmegaConf.update(group, key, OmegaConf.select(composed[name], key), merge=False)
        groups[name] = group
    return groups


def overrides_keys(overrides: list[str]) -> set[str]:
    """The keys (or groups) the command line's overrides set.

    >>> sorted(overrides_keys(["eval.n=4", "+prompt=answer_only", "cpu_threads=2"]))
    ['cpu_threads', 'eval.n', 'prompt']
    """
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


# The groups every run's config.yaml holds (without them this command's GPU-sized defaults would apply)
RUN_REQUIRED = ("model", "eval", "prompt")


def run_config(run_dir: Path) -> DictConfig:
    """A run's config.yaml, read without following a link out of the run; ConfigError where it cannot serve."""
    path = run_dir / CONFIG
    raw = read_inside(run_dir, path)
    if raw is None:
        raise ConfigError(f"{path}: missing, not a file, or a link out of the run folder; a run's final is validated "
                          "with its run's settings: restore it, or copy the final out of the run folder to validate it "
                          "with this command's settings")
    try:
        data = parse_yaml(raw.decode("utf-8"), str(path))
    except ParseLimitError as err:  # its line names the file and the limit
        raise ConfigError(str(err)) from None
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: not a readable config ({str(err).splitlines()[0]})") from None
    missing = [g for g in RUN_REQUIRED if not isinstance(data, dict) or not isinstance(data.get(g), dict)]
    if missing:
        raise ConfigError(f"{path}: no {missing[0]} group, which a run's config.yaml holds (an edit, or not a run's); "
                          "restore it, or copy the final out of the run folder to validate it with this command's "
                          "settings")
    return OmegaConf.create(data)


def size_line(pools: dict[str, list], ev: DictConfig, model: str, task: Task, out_dir: Path) -> str:
    """What the validation will generate (the `eval` group `ev`), as which task, and where it writes."""
    records = sum(len(p) for p in pools.values())
    completions = records * int(ev.samples)
    sampling = "greedy" if float(ev.temperature) == 0 else f"temperature {ev.temperature}, {ev.samples} samples"
    subsets = ", ".join(f"{p} {len(r)}" for p, r in pools.items())
    return (f"validating {model} as task {task.name}: {len(pools)} subsets ({subsets} {task.report.record}s), "
            f"{completions} completions of <= {ev.max_new_tokens} tokens ({sampling}; at most "
            f"{completions * int(ev.max_new_tokens):,} tokens); writing to {out_dir}")


def cpu_size_warning(pools: dict[str, list], ev: DictConfig, model: str) -> str | None:
    """Without CUDA, a warning for a validation longer than CPU_WARN_HOURS at the CPU rate, else None."""
    tokens = sum(len(p) for p in pools.values()) * int(ev.samples) * int(ev.max_new_tokens)
    seconds = tokens / CPU_TOKENS_PER_SECOND
    if torch.cuda.is_available() or seconds < CPU_WARN_HOURS * 3600:
        return None
    return (f"no CUDA GPU: this validation is GPU-sized (model {model}, up to {tokens:,} generated tokens); at "
            f"~{CPU_TOKENS_PER_SECOND:.0f} tokens/s that is up to ~{seconds / 3600:.1f} h. For a CPU-sized one: fewer "
            "puzzles or tokens (eval.n, eval.max_new_tokens), or experiment=smoke")


def interrupted_line(out_dir: Path) -> str:
    """The one line a Ctrl-C ends with: the subsets whose rows were written, and where."""
    path = out_dir / VALIDATION
    rows = [r for r in read_jsonl(path) if isinstance(r, dict)] if path.exists() else []
    if not rows:
        return f"interrupted: no subset finished; nothing kept in {out_dir}"
    done = ", ".join(str(row_level(r)) for r in rows)
    return f"interrupted: kept {done} in {out_dir / VALIDATION} (graded completions in {out_dir / SAMPLES})"


def checked_checkpoint(cfg: DictConfig, overrides: list[str]) -> str | None:
    """The checkpoint `model=` names (None: a model config), checked, a run's final taking its run's groups."""
    if not cfg.checkpoint:
        return None
    checkpoint = checkpoint_source(str(cfg.checkpoint))
    composed = {name: cfg.get(name) for name in RUN_GROUPS}
    for name, group in run_settings(Path(checkpoint), composed, overrides).items():
        cfg[name] = group
    check_tokenizer_files(checkpoint, chat=bool(cfg.model.chat))
    check_final(checkpoint)
    if Path(checkpoint).is_dir():  # either backend would fill weights its files lack at random
        check_weights_match(checkpoint)
    return checkpoint


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    quiet_libraries()
    defer_deepspeed()  # one process validating: DeepSpeed's import only adds its start-up warning
    defer_bitsandbytes(set())  # before eval.validation imports transformers' TrainerCallback (-> peft -> it)
    overrides = list(HydraConfig.get().overrides.task)
    try:
        check_ranges(cfg)
        checkpoint = checked_checkpoint(cfg, overrides)
        task = build_task(cfg.task, fmt=str(cfg.prompt.fmt))
        if checkpoint:
            check_task(checkpoint, task.name)
        task.check_format(str(cfg.prompt.fmt))
        check_eval_config(cfg.eval, task)
        check_cpu_head_size(cfg.eval, {}, cfg.model, checkpoint)
        check_context_length(cfg.model, checkpoint)
        settings = validation_settings(cfg.eval, cfg.prompt, cfg.model, task)
        pools = validation_pools(settings, int(cfg.seed))
        # a run's final: the run's own thread count, unless the command line sets one
        recorded = run_cpu_threads(checkpoint) if checkpoint and "cpu_threads" not in overrides_keys(overrides) \
            else None
        configure_cpu_threads(recorded or cfg.cpu_threads)
    except ConfigError as err:  # the message names the key; a traceback would bury it
        raise SystemExit(f"config error: {err}") from None
    except RecordError as err:  # the message names the file and line
        raise SystemExit(f"data error: {err}") from None
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    model = checkpoint or str(cfg.model.name)
    print(size_line(pools, cfg.eval, model, task, out_dir), flush=True)
    warning = cpu_size_warning(pools, cfg.eval, model)
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    (out_dir / CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    # what was validated, as task data: the report of this folder reads it (eval.report), never the task's code
    write_json_atomic(out_dir / EVALUATION, {"model": model, "task": task.name, "task_report": task.report.as_json(),
                                             "created": time.strftime("%Y-%m-%dT%H:%M:%S")})
    writer = JsonlWriter(out_dir / VALIDATION, key=("stage", "level"))
    tracker = eval_tracker(cfg, out_dir, model, checkpoint)
    from eval.validation import validate  # after defer_bitsandbytes: it imports transformers' trainer utilities

    try:
        model_path = checkpoint or resolve_model(cfg.model, Path(cfg.paths.cache_dir))
        tag = {"stage": "eval", "stage_name": model_path, "global_step": 0}
        rows = validate(settings, model_path, pools, tag=tag, out_dir=out_dir / SAMPLES, writer=writer, tracker=tracker)
    except KeyboardInterrupt:
        print(interrupted_line(out_dir), file=sys.stderr)
        raise SystemExit(130) from None  # the shell's code for a Ctrl-C
    except ModelUnavailableError as err:  # no network, nothing cached: one line naming the offline choices
        raise SystemExit(f"model unavailable: {err}") from None
    finally:
        tracker.finish()
    mean = sum(r["accuracy"] for r in rows) / len(rows)
    # the mean over subsets, with the interval of all their records together (exact when the subsets are of one size)
    records = sum(trials(r, "accuracy") or 0 for r in rows)
    print(f"mean accuracy over {len(rows)} subsets: {rate_text(mean, records)}; rows in {out_dir / VALIDATION}, "
          f"graded completions in {out_dir / SAMPLES}; its report: python -m eval.report {out_dir}")
    return mean


def eval_tracker(cfg: DictConfig, out_dir: Path, model: str, checkpoint: str | None):
    """The tracker of one validation (in the group of the run whose final it validates, else "eval")."""
    run_dir = run_of_final(Path(checkpoint).resolve()) if checkpoint else None
    group = "eval" if run_dir is None else tracker_group(run_dir, in_sweep=(run_dir.parent / "multirun.yaml").exists())
    try:
        return open_tracker(cfg.logger, out_dir, name=f"eval {model}", group=group, job_type="eval",
                            run_id=f"eval-{out_dir.name}-{os.getpid()}",
                            config=OmegaConf.to_container(cfg, resolve=True))
    except TrackerStartError as err:  # the line names the mode and the way around it; wandb's traceback would bury it
        raise SystemExit(str(err)) from None


if __name__ == "__main__":
    args = split_checkpoint_arg(sys.argv[1:])
    if not any(a.startswith("hydra.run.dir=") for a in args):
        args.append("hydra.run.dir=${paths.output_dir}/eval/${kk_now:%Y-%m-%d_%H-%M-%S}")
    sys.argv = [sys.argv[0], *args]
    run_app(main)
