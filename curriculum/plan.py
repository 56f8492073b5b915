"""The stage plan: a curriculum config turned into checked `Stage` records, with the adaptive rules a stage may
carry (promotion, replay, the collapse guard), checked before any model or data loads; the schema (conf/schema.py)
checks keys, types and ranges first, the rules across keys are here."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from conf.choices import ValidationPlan
from conf.ranges import check_field_ranges
from conf.schema import GuardConfig, PromoteConfig, with_defaults
from core.checks import ConfigError, is_number, plain, whole_number
from core.rundir.files import stage_dirname
from core.rundir.records import StageRecord, Status
from core.stage_kinds import STAGE_KIND_FACTS, StageKindFacts
from curriculum.tasks import build_task
from curriculum.tasks.base import ALL, Task

# `eval.subsets_after_stage`'s names, the schema's (a caller from Python may pass any string)
VALIDATION_PLANS = tuple(str(plan) for plan in ValidationPlan)
EACH = "each"  # a stage's `level: each`: that stage once per level of the task, each named by its level
# The guard's signals: (config key, metrics.jsonl key it watches).
GUARD_SIGNALS = (("length_drop", "completions/mean_length"), ("zero_std", "frac_reward_zero_std"),
                 ("distinct_below", "completions/distinct_share"))


@dataclass(frozen=True)
class Promote:
    """End a stage once held-out accuracy on its own levels reaches `accuracy` (checked every `every` steps)."""

    accuracy: float  # threshold in [0, 1]
    every: int  # optimizer steps between checks
    min_steps: int  # no check before this many steps


@dataclass(frozen=True)
class Guard:
    """Collapse thresholds over a window of logged steps; None switches a signal off."""

    length_drop: float | None  # mean length fell by this share from the stage's best window
    zero_std: float | None  # share of zero-variance groups at or above this
    distinct_below: float | None  # share of distinct completions per group below this
    window: int  # logged steps averaged per signal
    action: str  # warn | stop


def parse_guard(value, key: str) -> Guard | None:
    """A `guard` block; None when absent. Signals left out (or null) are not watched.

    >>> parse_guard({"length_drop": 0.5, "window": 5, "action": "stop"}, "guard")
    Guard(length_drop=0.5, zero_std=None, distinct_below=None, window=5, action='stop')
    """
    if value is None:
        return None
    block = with_defaults(GuardConfig, value)
    names = [name for name, _ in GUARD_SIGNALS]
    thresholds = {name: None if block[name] is None else float(block[name]) for name in names}
    if all(v is None for v in thresholds.values()):
        raise ConfigError(f"{key}: watches nothing; set at least one of {names}")
    return Guard(**thresholds, window=int(block["window"]), action=block["action"])


@dataclass(frozen=True)
class Stage:
    """One stage of a curriculum, with every budget already resolved."""

    index: int  # 1-based position in the plan
    name: str
    kind: str  # grpo | sft
    level_weights: dict[str, float]  # the task's level -> share of the pool (sums to 1), easiest first
    steps: int  # optimizer steps
    pool: int  # training records
    overrides: dict = field(default_factory=dict)  # GRPO (or SFT) fields: the stage's own, then stage_overrides.<name>
    promote: Promote | None = None  # end early on held-out accuracy (steps stays the ceiling)
    replay: dict[str, float] = field(default_factory=dict)  # levels of earlier stages -> share of the pool
    guard: Guard | None = None  # collapse guard (the stage's own, else curriculum.guard)

    @property
    def pool_weights(self) -> dict[str, float]:
        """level -> share of the training pool: its own mix scaled down to make room for the replay shares.

        >>> Stage(2, "b", "grpo", {"3ppl": 1.0}, 1, 1, replay={"2ppl": 0.2}).pool_weights
        {'2ppl': 0.2, '3ppl': 0.8}
        """
        scale = 1.0 - sum(self.replay.values())
        merged = {level: weight * scale for level, weight in self.level_weights.items()}
        for level, weight in self.replay.items():
            merged[level] = merged.get(level, 0.0) + weight
        return {level: round(weight, 12) for level, weight in sorted(merged.items())}

    @property
    def kind_facts(self) -> StageKindFacts:
        """What its kind is (core/stage_kinds.py): its step cap, whether it learns from rewards, its label."""
        return STAGE_KIND_FACTS[self.kind]

    @property
    def dirname(self) -> str:
        """`<k>-<name>`: the stage's folder under `stages/` of a run directory."""
        return stage_dirname(self.index, self.name)

    @property
    def level_label(self) -> str:
        """The level, or a mix's easiest and hardest ("2-6ppl" when both end alike), for plots and tables.

        >>> mix = lambda *levels: Stage(1, "a", "grpo", dict.fromkeys(levels, 1 / len(levels)), 1, 1).level_label
        >>> mix("3ppl"), mix("2ppl", "6ppl"), mix("2steps", "6+steps"), mix("level0", "level2")
        ('3ppl', '2-6ppl', '2steps-6+steps', 'level0-level2')
        """
        levels = list(self.level_weights)
        if len(levels) == 1:
            return levels[0]
        head, tail = re.fullmatch(r"(\d+)(\D*)", levels[0]), re.fullmatch(r"(\d+)(\D*)", levels[-1])
        if head and tail and head.group(2) == tail.group(2):
            return f"{head.group(1)}-{tail.group(1)}{head.group(2)}"
        return f"{levels[0]}-{levels[-1]}"

    def planned_record(self) -> StageRecord:
        """Its entry in a new run.json: planned, not started."""
        return StageRecord(index=self.index, name=self.name, kind=self.kind, levels=dict(self.level_weights),
                           pool_levels=dict(self.pool_weights), level_label=self.level_label, steps_budget=self.steps,
                           pool=self.pool, status=Status.PENDING, steps_done=0)


@dataclass(frozen=True)
class PlanSections:
    """What a plan reads besides the stages (the guard: `curriculum.guard`)."""

    limits: Mapping
    grpo: Mapping
    named_overrides: Mapping[str, dict]
    guard: object
    task: Task
    world_size: int = 1


def build_plan(cfg: DictConfig, world_size: int = 1, task: Task | None = None) -> list[Stage]:
    """The checked stages of `cfg.curriculum`, `cfg.limits` applied, on `world_size` processes, of `task` (None: the
    one `cfg.task` names). `stage_overrides` is given whole: Hydra refuses a key that starts with a digit.

    >>> from conf.schema import StageConfig
    >>> from curriculum.tasks.kk import KKTask
    >>> stages = [OmegaConf.structured(StageConfig(name="a", level=2, steps=3, pool=9))]
    >>> cfg = OmegaConf.create({"curriculum": {"stages": stages}, "limits": {"max_steps": 2}, "grpo": {}})
    >>> build_plan(cfg, task=KKTask())[0].steps
    2
    """
    if OmegaConf.select(cfg, "curriculum") is None:
        raise ConfigError("curriculum: missing; choose one with +curriculum=<a file of conf/curriculum/> "
                          "(ladder: a stage per level of any task)")
    check_field_ranges({"curriculum": plain(cfg.curriculum), "limits": plain(cfg.get("limits"))})
    task = task if task is not None else build_task(cfg.task)
    named = OmegaConf.select(cfg, "stage_overrides")
    if named is not None and not isinstance(named, DictConfig):
        raise ConfigError(f"stage_overrides: must be a mapping of stage name -> fields (got {named!r})")
    for name, fields in (named or {}).items():
        if not isinstance(fields, DictConfig):
            raise ConfigError(f"stage_overrides.{name}: must be a mapping of trainer fields, e.g. "
                              f"{{learning_rate: 1.0e-6}} (got {fields!r})")
    sections = PlanSections(
        limits=plain(cfg.get("limits")) or {}, grpo=plain(cfg.get("grpo")) or {},
        named_overrides={str(name): OmegaConf.to_container(fields, resolve=True) for name, fields in
                         (named or {}).items()},
        guard=OmegaConf.select(cfg, "curriculum.guard"), task=task, world_size=world_size)
    stages_cfg = ladder_stages(cfg.curriculum.stages, task)
    if not stages_cfg:
        raise ConfigError("curriculum.stages: must be a non-empty list of stages")
    plan: list[Stage] = []
    for block in stages_cfg:
        plan.append(_build_stage(len(plan) + 1, plain(block), sections, plan))
    names = [s.name for s in plan]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"curriculum.stages: stage name {name!r} appears twice; names must be unique")
    for key, by_name in (("limits.stage_steps", sections.limits.get("stage_steps")),
                         ("stage_overrides", sections.named_overrides)):
        for name in by_name or {}:
            if name not in names:
                raise ConfigError(f"{key}.{name}: no stage of that name; stages: {', '.join(names)}")
    return plan


def ladder_stages(stages_cfg, task: Task) -> list:
    """`curriculum.stages` with a `level: each` stage written out: one stage per level, each named by its level.

    >>> from curriculum.tasks.gsm8k import GSM8KTask
    >>> [(s["name"], s["level"], s["steps"]) for s in ladder_stages([{"level": "each", "steps": 3}], GSM8KTask())][:2]
    [('2steps', '2steps', 3), ('3steps', '3steps', 3)]
    """
    blocks = [plain(block) for block in stages_cfg or []]
    each = [i for i, block in enumerate(blocks) if block.get("level") == EACH]
    if not each:
        return blocks
    if len(blocks) > 1:
        raise ConfigError(f"curriculum.stages[{each[0]}].level: {EACH} is the whole ladder (a stage per level of the "
                          "task): give it as the curriculum's only stage")
    if blocks[0].get("name") is not None:
        raise ConfigError(f"curriculum.stages[0].name: a `level: {EACH}` stage is one stage per level, each named by "
                          f"its level; leave name out (got {blocks[0]['name']!r})")
    return [{**blocks[0], "name": level, "level": level} for level in task.levels]


def _build_stage(index: int, block: dict, sections: PlanSections, earlier: list[Stage]) -> Stage:
    key, limits = f"curriculum.stages[{index - 1}]", sections.limits
    name, kind = block["name"], block["kind"]
    if not name or "/" in name:
        raise ConfigError(f"{key}.name: must be a non-empty name without '/' (got {name!r})")
    level, people = block.get("level"), block.get("ppl")  # ppl: K&K's name for level (a people count)
    if level is not None and people is not None:
        raise ConfigError(f"{key}: give level or ppl (K&K's name for level), not both")
    if level is None and people is None:
        raise ConfigError(f"{key}.level: missing; a level of the task")
    written = (level, f"{key}.level") if level is not None else (people, f"{key}.ppl")
    level_weights = parse_levels(written, sections.task)
    pool = int(block["pool"])
    overrides = {**(block["overrides"] or {}), **sections.named_overrides.get(name, {})}  # by stage name, win
    steps = _stage_steps(block, key, pool, sections, overrides)
    if limits.get("max_pool"):
        pool = min(pool, int(limits["max_pool"]))
    facts = STAGE_KIND_FACTS[kind]
    cap = limits.get(facts.step_cap)
    if cap:
        steps = min(steps, int(cap))
    named = (limits.get("stage_steps") or {}).get(name)
    if named is not None:  # a CPU twin giving one stage more (or fewer) steps than the caps
        steps = int(named)
    for own in ("promote", "guard"):
        if block[own] is not None and not facts.learns_from_rewards:
            raise ConfigError(f"{key}.{own}: only a grpo stage has one (this stage is {kind})")
    promote = None
    if block["promote"] is not None:
        values = with_defaults(PromoteConfig, block["promote"])
        promote = Promote(float(values["accuracy"]), int(values["every"]), int(values["min_steps"]))
    guard = parse_guard(block["guard"], f"{key}.guard")
    if guard is None and facts.learns_from_rewards:  # the curriculum-wide guard watches every GRPO stage
        guard = parse_guard(sections.guard, "curriculum.guard")
    replay = {}
    if block.get("replay"):  # a share of the pool, spread evenly over the levels of the stages before this one
        levels = sorted({level for s in earlier for level in s.level_weights if level != ALL})
        if not levels:
            raise ConfigError(f"{key}.replay: the first stage has no earlier stage to replay")
        replay = {level: block["replay"] / len(levels) for level in levels}
    return Stage(index, name, kind, level_weights, steps, pool, overrides, promote, replay, guard)


def parse_levels(written: tuple[object, str], task: Task) -> dict[str, float]:
    """A stage's levels (one, a list: uniform, or {level: weight}) as normalised weights in the task's order.

    >>> from curriculum.tasks.kk import KKTask
    >>> parse_levels(({2: 1, 3: 3}, "level"), KKTask())
    {'2ppl': 0.25, '3ppl': 0.75}
    """
    value, key = plain(written[0]), written[1]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, str):
        pairs = [(k, 1.0) for k in value]
    else:
        pairs = [(value, 1.0)]
    raw = {ALL if k == ALL and task.has_all else task.level_of(k, key): w for k, w in pairs}
    if not raw or not all(is_number(w, finite=True) and w >= 0 for w in raw.values()) or sum(raw.values()) <= 0:
        raise ConfigError(f"{key}: weights must be numbers >= 0 with a positive sum (got {value!r})")
    if ALL in raw and len(raw) > 1:
        raise ConfigError(f"{key}: {ALL} is the whole split; it mixes with no other level")
    total, order = sum(raw.values()), (*task.levels, ALL)
    return {level: raw[level] / total for level in sorted(raw, key=order.index) if raw[level] > 0}


def _stage_steps(block: dict, key: str, pool: int, sections: PlanSections, overrides: Mapping) -> int:
    """Steps from `steps`, or from `epochs` over the pool at the stage's prompts per step."""
    if block["steps"] is not None:
        if block["epochs"] is not None:
            raise ConfigError(f"{key}: give steps or epochs, not both")
        return int(block["steps"])
    if block["epochs"] is None:
        raise ConfigError(f"{key}.steps: missing (give steps > 0, or epochs > 0)")
    per_step = prompts_per_step(sections.grpo, overrides, sections.world_size)
    return max(1, math.ceil(block["epochs"] * pool / per_step))


def validation_subsets(mode: str, subsets: Sequence[str], plan: Sequence[Stage], index: int) -> list[str]:
    """The subsets validated after stage `index` (0: the baseline) under `eval.subsets_after_stage`. `near`: all at
    the baseline and after the last stage, else the stage's own levels and the next's (all if none is a subset).

    >>> ladder = [Stage(i, f"{p}ppl", "grpo", {f"{p}ppl": 1.0}, steps=10, pool=9) for i, p in enumerate(range(2, 7), 1)]
    >>> every = [f"{p}ppl" for p in range(2, 8)]
    >>> [validation_subsets("near", every, ladder, i) for i in (0, 1, 2)]
    [['2ppl', '3ppl', '4ppl', '5ppl', '6ppl', '7ppl'], ['2ppl', '3ppl'], ['3ppl', '4ppl']]
    >>> validation_subsets("near", ["2ppl", "3ppl"], ladder, 3), validation_subsets("all", ["2ppl", "3ppl"], ladder, 2)
    (['2ppl', '3ppl'], ['2ppl', '3ppl'])
    """
    if mode not in VALIDATION_PLANS:
        raise ConfigError(f"eval.subsets_after_stage: {mode!r} is not one of {VALIDATION_PLANS}")
    every = list(subsets)
    if mode == "all" or index == 0 or index >= len(plan):
        return every
    near = {*plan[index - 1].level_weights, *plan[index].level_weights}
    return [p for p in every if p in near] or every


def validation_completions(mode: str, subsets: Sequence[str], plan: Sequence[Stage],
                           sizes: Mapping[str, int]) -> dict[int, int]:
    """The completions each validation generates, by stage index (0: the baseline), `sizes[level]` per subset.

    >>> ladder = [Stage(i, f"{p}ppl", "grpo", {f"{p}ppl": 1.0}, steps=10, pool=9) for i, p in enumerate(range(2, 7), 1)]
    >>> every = [f"{p}ppl" for p in range(2, 8)]
    >>> [sum(validation_completions(mode, every, ladder, dict.fromkeys(every, 100)).values()) for mode in ("all",
    ...                                                                                                "near")]
    [3600, 2000]
    >>> validation_completions("near", ["2ppl", "3ppl", "4ppl"], ladder[:2], {"2ppl": 63, "3ppl": 4, "4ppl": 1})
    {0: 68, 1: 67, 2: 68}
    """
    return {index: sum(sizes[level] for level in validation_subsets(mode, subsets, plan, index))
            for index in range(len(plan) + 1)}


def prompts_per_step(grpo: Mapping, overrides: Mapping | None = None, world_size: int = 1) -> float:
    """Distinct prompts one optimizer step consumes, from the `grpo` group, a stage's overrides and the processes.

    >>> grpo = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8, "num_generations": 8}
    >>> prompts_per_step(grpo), prompts_per_step(grpo, world_size=4)
    (8.0, 32.0)
    """
    merged = {**(plain(grpo) or {}), **(overrides or {})}
    return grpo_batch(merged, "grpo", world_size).prompts_per_step


@dataclass(frozen=True)
class GrpoBatch:
    """TRL 1.16's batch arithmetic (GRPOConfig.__post_init__); the per-device batch counts completions. A generation
    batch (all processes) serves `steps_per_generation x num_iterations` micro-batches per process."""

    generation_batch: int
    steps_per_generation: int
    num_iterations: int
    gradient_accumulation_steps: int
    num_generations: int
    processes: int = 1

    @property
    def prompts_per_step(self) -> float:
        """New prompts per optimizer step: a generation's prompts over the steps that consume it."""
        prompts_per_generation = self.generation_batch // self.num_generations
        micro_batches_per_generation = self.steps_per_generation * self.num_iterations
        return prompts_per_generation * self.gradient_accumulation_steps / micro_batches_per_generation


def grpo_batch(grpo: Mapping, key: str, world_size: int = 1) -> GrpoBatch:
    """The batch arithmetic of GRPOConfig fields on `world_size` processes; ConfigError where TRL would refuse them.

    >>> b = grpo_batch({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8,
    ...                 "num_generations": 8, "num_iterations": 2}, "grpo")
    >>> b.generation_batch, b.prompts_per_step
    (64, 4.0)
    >>> grpo_batch({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2}, "grpo", 4).prompts_per_step
    8.0
    """
    counts: dict[str, int | None] = {}
    # (field, TRL's default, least); null is TRL's default; GRPO normalises within a group of >= 2
    for name, default, least in (("per_device_train_batch_size", 8, 1), ("gradient_accumulation_steps", 1, 1),
                                 ("num_iterations", 1, 1), ("num_generations", 8, 2),
                                 ("generation_batch_size", None, 1), ("steps_per_generation", None, 1)):
        value = default if grpo.get(name) is None else grpo[name]
        counts[name] = None if value is None else whole_number(value, f"{key}.{name}", least=least)
    micro, accumulation = counts["per_device_train_batch_size"], counts["gradient_accumulation_steps"]
    generations = counts["num_generations"]
    explicit_batch, explicit_steps = counts["generation_batch_size"], counts["steps_per_generation"]
    if explicit_batch is not None and explicit_steps is not None:
        raise ConfigError(f"{key}.generation_batch_size: give it or steps_per_generation, not both (TRL)")
    per_round = micro * world_size  # one micro-batch on every process
    if explicit_batch is not None and explicit_batch % per_round:
        raise ConfigError(f"{key}.generation_batch_size: {explicit_batch} is not a multiple of "
                          f"per_device_train_batch_size {micro} x {world_size} process(es)")
    steps = explicit_steps or (explicit_batch // per_round if explicit_batch else accumulation)
    batch = per_round * steps
    if batch % generations:
        raise ConfigError(f"{key}.num_generations: {generations} does not divide the generation batch {batch} "
                          f"(per_device_train_batch_size x {world_size} process(es) x steps_per_generation, which "
                          "defaults to gradient_accumulation_steps)")
    return GrpoBatch(batch, steps, counts["num_iterations"], accumulation, generations, world_size)
