"""The stage plan: a curriculum config turned into checked, plain `Stage` records.

Every check here runs before any model or data is loaded, and every error names the config key,
so a typo in a sweep costs a second, not a GPU hour.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from conf.choices import ValidationPlan
from conf.ranges import check_field_ranges
from core.checks import ConfigError, is_number, plain, whole_number
from core.rundir.files import stage_dirname
from core.rundir.records import StageRecord, Status
from core.stage_kinds import STAGE_KIND_FACTS, StageKindFacts
from curriculum.adaptive import Guard, Promote, mixed_weights, parse_guard, parse_promote, replay_weights
from curriculum.tasks import build_task
from curriculum.tasks.base import ALL, Task

# `eval.subsets_after_stage`'s names, the schema's (a caller from Python may pass any string)
VALIDATION_PLANS = tuple(str(plan) for plan in ValidationPlan)
#: A stage's `level: each`: that stage once per level of the task, easiest first, each named by its level.
EACH = "each"


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
        """level -> share of the training pool: the stage's own mix, with the replay shares made room for."""
        return mixed_weights(self.level_weights, self.replay)

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

        >>> one, mix = Stage(1, "a", "grpo", {"3ppl": 1.0}, 1, 1), Stage(1, "a", "grpo", {"2ppl": .5, "6ppl": .5}, 1, 1)
        >>> one.level_label, mix.level_label
        ('3ppl', '2-6ppl')
        """
        levels = list(self.level_weights)
        return levels[0] if len(levels) == 1 else span_label(levels[0], levels[-1])

    def planned_record(self) -> StageRecord:
        """Its entry in a new run.json: planned, not started."""
        return StageRecord(index=self.index, name=self.name, kind=self.kind, levels=dict(self.level_weights),
                           pool_levels=dict(self.pool_weights), level_label=self.level_label, steps_budget=self.steps,
                           pool=self.pool, status=Status.PENDING, steps_done=0)


def span_label(first: str, last: str) -> str:
    """"2-6ppl" for 2ppl..6ppl (a shared ending written once), "level0-level3" otherwise.

    >>> span_label("2ppl", "6ppl"), span_label("2steps", "6+steps"), span_label("level0", "level2")
    ('2-6ppl', '2steps-6+steps', 'level0-level2')
    """
    head, tail = re.fullmatch(r"(\d+)(\D*)", first), re.fullmatch(r"(\d+)(\D*)", last)
    if head and tail and head.group(2) == tail.group(2):
        return f"{head.group(1)}-{tail.group(1)}{head.group(2)}"
    return f"{first}-{last}"


def build_plan(cfg: DictConfig, world_size: int = 1, task: Task | None = None) -> list[Stage]:
    """Check `cfg.curriculum` and return its stages, with `cfg.limits` applied; `world_size` processes
    train each step (a stage given in `epochs` takes fewer steps with more of them). A stage's levels
    are `task`'s (None: the one `cfg.task` names).

    A stage's keys, their types and ranges are the schema's (conf/schema.py StageConfig, LimitsConfig: their ranges
    checked first, interpolations resolved); what is checked here is what a field cannot say: rules across keys,
    names that must exist.

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
    sections = PlanSections(
        limits=plain(cfg.get("limits")) or {}, grpo=plain(cfg.get("grpo")) or {},
        named_overrides=_named_overrides(OmegaConf.select(cfg, "stage_overrides")),
        guard=OmegaConf.select(cfg, "curriculum.guard"), task=task, world_size=world_size)
    return stages_of(ladder_stages(cfg.curriculum.stages, task), sections)


def ladder_stages(stages_cfg, task: Task) -> list:
    """`curriculum.stages` with a `level: each` stage written out: one stage per level of `task`, easiest first,
    each named by its level and otherwise that stage (a ladder over any task's levels, +curriculum=ladder). It is
    the curriculum's only stage, and has no name of its own. ConfigError names the key.

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


@dataclass(frozen=True)
class PlanSections:
    """What a plan reads besides the stages: the caps, the GRPO group (prompts per step), the stages'
    named overrides, the curriculum-wide guard, the task (its levels) and the processes."""

    limits: Mapping
    grpo: Mapping
    named_overrides: Mapping[str, dict]
    guard: object
    task: Task
    world_size: int = 1


def stages_of(stages_cfg, sections: PlanSections) -> list[Stage]:
    """The checked stages of `curriculum.stages` under `sections` (build_plan)."""
    if not stages_cfg:
        raise ConfigError("curriculum.stages: must be a non-empty list of stages")
    limits = sections.limits
    plan = [_build_stage(i, plain(s), sections) for i, s in enumerate(stages_cfg, start=1)]
    plan = [_with_replay(stage, stages_cfg[stage.index - 1], plan[: stage.index - 1], sections.task) for stage in plan]
    names = [s.name for s in plan]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"curriculum.stages: stage name {name!r} appears twice; names must be unique")
    named_maps = (("limits.stage_steps", limits.get("stage_steps")), ("stage_overrides", sections.named_overrides))
    for key, named in named_maps:
        for name in named or {}:
            if name not in names:
                raise ConfigError(f"{key}.{name}: no stage of that name; stages: {', '.join(names)}")
    return plan


def _named_overrides(named) -> dict[str, dict]:
    """`stage_overrides`: {stage name: {GRPOConfig or SFTConfig field: value}}, applied over a stage's own.

    Keyed by name because a list index (`curriculum.stages.2.overrides...`) is awkward on a command line,
    and Hydra's grammar refuses a key that starts with a digit (`stage_overrides.2ppl.x=1`): give the
    mapping whole, `'stage_overrides={2ppl: {learning_rate: 1e-6}}'` (a sweep: several, comma-separated).
    """
    if named is None:
        return {}
    if not isinstance(named, DictConfig):
        raise ConfigError(f"stage_overrides: must be a mapping of stage name -> fields (got {named!r})")
    out = {}
    for name, fields in named.items():
        if not isinstance(fields, DictConfig):
            raise ConfigError(f"stage_overrides.{name}: must be a mapping of trainer fields, e.g. "
                              f"{{learning_rate: 1.0e-6}} (got {fields!r})")
        out[str(name)] = OmegaConf.to_container(fields, resolve=True)
    return out


def _build_stage(index: int, block: dict, sections: PlanSections) -> Stage:
    key, limits = f"curriculum.stages[{index - 1}]", sections.limits
    name, kind = block["name"], block["kind"]
    if not name or "/" in name:
        raise ConfigError(f"{key}.name: must be a non-empty name without '/' (got {name!r})")
    level_weights = parse_levels(_stage_level(block, key), sections.task)
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
    promote = parse_promote(block["promote"], f"{key}.promote")
    guard = parse_guard(block["guard"], f"{key}.guard")
    if guard is None and facts.learns_from_rewards:  # the curriculum-wide guard watches every GRPO stage
        guard = parse_guard(sections.guard, "curriculum.guard")
    return Stage(index, name, kind, level_weights, steps, pool, overrides, promote, guard=guard)


def _stage_level(block: dict, key: str) -> tuple[object, str]:
    """(the stage's levels as written, the key that holds them): `level`, or `ppl`, K&K's name for it (its
    curricula write a people count there), not both."""
    level, people = block.get("level"), block.get("ppl")
    if level is not None and people is not None:
        raise ConfigError(f"{key}: give level or ppl (K&K's name for level), not both")
    if level is None and people is None:
        raise ConfigError(f"{key}.level: missing; a level of the task")
    return (level, f"{key}.level") if level is not None else (people, f"{key}.ppl")


def _with_replay(stage: Stage, stage_cfg, earlier: list[Stage], task: Task) -> Stage:
    """Resolve `replay: share` over the levels of the stages before this one."""
    share = stage_cfg.get("replay")
    if share is None:
        return stage
    key = f"curriculum.stages[{stage.index - 1}].replay"
    levels = [level for s in earlier for level in s.level_weights if level != ALL]
    ordered = sorted(dict.fromkeys(levels), key=task.levels.index)
    return dataclasses.replace(stage, replay=replay_weights(share, ordered, key))


def parse_levels(written: tuple[object, str], task: Task) -> dict[str, float]:
    """A stage's levels as normalised weights, in the task's order: one level, a list (uniform) or
    {level: weight}; a number names a level as the task reads it (K&K: a people count, 3, [2, 3], {2: 1, 3: 3}).

    >>> from curriculum.tasks.kk import KKTask
    >>> parse_levels(({2: 1, 3: 3}, "level"), KKTask())
    {'2ppl': 0.25, '3ppl': 0.75}
    """
    value, key = plain(written[0]), written[1]
    if isinstance(value, Mapping):
        raw = {_level(k, key, task): w for k, w in value.items()}
    elif isinstance(value, Sequence) and not isinstance(value, str):
        raw = {_level(k, key, task): 1.0 for k in value}
    else:
        raw = {_level(value, key, task): 1.0}
    if not raw or not all(is_number(w, finite=True) and w >= 0 for w in raw.values()) or sum(raw.values()) <= 0:
        raise ConfigError(f"{key}: weights must be numbers >= 0 with a positive sum (got {value!r})")
    if ALL in raw and len(raw) > 1:
        raise ConfigError(f"{key}: {ALL} is the whole split; it mixes with no other level")
    total, order = sum(raw.values()), (*task.levels, ALL)
    return {level: raw[level] / total for level in sorted(raw, key=order.index) if raw[level] > 0}


def _level(value, key: str, task: Task) -> str:
    if value == ALL and task.has_all:
        return ALL
    return task.level_of(value, key)


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
    """The subsets (level keys, in the task's order) validated after stage `index` (0: the baseline) under
    `eval.subsets_after_stage`.

    `all`: every subset, every time. `near`: every subset at the baseline and after the last stage;
    in between, the stage's own levels and the next stage's, among `subsets` (a stage near none of
    them is validated on all, never on nothing).

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


def validation_completions(mode: str, subsets: Sequence[str], plan: Sequence[Stage], n: int) -> int:
    """Greedy completions a whole run's validations generate: the baseline and every stage, `n` per subset.

    docs/gpu.md's arithmetic for kk_ladder (5 stages, 6 subsets of 100): `all` 3600, `near` 2000.

    >>> ladder = [Stage(i, f"{p}ppl", "grpo", {f"{p}ppl": 1.0}, steps=10, pool=9) for i, p in enumerate(range(2, 7), 1)]
    >>> [validation_completions(mode, [f"{p}ppl" for p in range(2, 8)], ladder, 100) for mode in ("all", "near")]
    [3600, 2000]
    """
    return n * sum(len(validation_subsets(mode, subsets, plan, i)) for i in range(len(plan) + 1))


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
    """TRL 1.16's batch arithmetic (GRPOConfig.__post_init__). The per-device batch counts completions.

    A generation batch of `generation_batch` completions (`prompts_per_generation` prompts x
    `num_generations`, over all `processes`) is generated once and used for `steps_per_generation x
    num_iterations` micro-batches per process; an optimizer step takes `gradient_accumulation_steps`
    micro-batches on every process. So one step consumes per-device batch x gradient accumulation x
    processes / num_generations prompts (with num_iterations 1 and steps_per_generation at its default).
    """

    generation_batch: int
    steps_per_generation: int
    num_iterations: int
    gradient_accumulation_steps: int
    num_generations: int
    processes: int = 1

    @property
    def prompts_per_generation(self) -> int:
        return self.generation_batch // self.num_generations

    @property
    def prompts_per_step(self) -> float:
        """New prompts per optimizer step: a generation's prompts over the steps that consume it."""
        micro_batches_per_generation = self.steps_per_generation * self.num_iterations
        return self.prompts_per_generation * self.gradient_accumulation_steps / micro_batches_per_generation


def grpo_batch(grpo: Mapping, key: str, world_size: int = 1) -> GrpoBatch:
    """The batch arithmetic of GRPOConfig fields on `world_size` processes; ConfigError (naming
    `key`.<field>) when TRL would refuse them.

    >>> b = grpo_batch({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8,
    ...                 "num_generations": 8, "num_iterations": 2}, "grpo")
    >>> b.prompts_per_generation, b.prompts_per_step
    (8, 4.0)
    >>> grpo_batch({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2}, "grpo", 4).prompts_per_step
    8.0
    """
    def count(name: str, default: int | None, least: int = 1) -> int | None:  # null is TRL's default
        value = default if grpo.get(name) is None else grpo[name]
        return None if value is None else whole_number(value, f"{key}.{name}", least=least)

    micro, accumulation = count("per_device_train_batch_size", 8), count("gradient_accumulation_steps", 1)
    iterations = count("num_iterations", 1)
    generations = count("num_generations", 8, least=2)  # GRPO normalises within a group of >= 2
    explicit_batch, explicit_steps = count("generation_batch_size", None), count("steps_per_generation", None)
    if explicit_batch is not None and explicit_steps is not None:
        raise ConfigError(f"{key}.generation_batch_size: give it or steps_per_generation, not both (TRL)")
    per_round = micro * world_size  # one micro-batch on every process
    if explicit_batch is not None and explicit_batch % per_round:
        raise ConfigError(f"{key}.generation_batch_size: {explicit_batch} is not a multiple of "
                          f"per_device_train_batch_size {micro} x {world_size} process(es)")
    steps = explicit_steps or (explicit_batch // per_round if explicit_batch else accumulation)
    batch = per_round * steps
    if batch % generations:
        raise ConfigError(
            f"{key}.num_generations: {generations} does not divide the generation batch {batch} "
            f"(per_device_train_batch_size x {world_size} process(es) x steps_per_generation, which defaults to "
            "gradient_accumulation_steps)"
        )
    return GrpoBatch(batch, steps, iterations, accumulation, generations, world_size)
