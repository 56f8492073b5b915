"""What validation reads from the config, as one frozen record built once (`validation_settings`).

`validate` and the in-stage validation take this record, not the whole config: what they can see
is what is listed here (the `eval` group as its schema record, conf/schema.py EvalConfig; the prompt template and
its grader format, the model's chat settings), and a caller can build one by hand for a checkpoint from anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from omegaconf import DictConfig, OmegaConf

from conf.fields import as_record
from conf.schema import EvalConfig
from curriculum.tasks.base import ALL, Task, TaskRecord
from curriculum.tasks.contract import check_records

# The template keys `curriculum.prompts.render_prompt` reads.
PROMPT_KEYS = ("system", "user", "prefill", "plain")


@dataclass(frozen=True)
class ValidationSettings:
    """How validation generates and grades: one subset's puzzles -> prompts -> completions -> grades."""

    eval: EvalConfig  # the `eval` group: n, max_new_tokens, batch_size, temperature, samples, seed, backend...
    subsets: tuple[str, ...]  # `eval.subsets` as the held-out subsets: levels of the task, in its order
    fmt: str  # the prompt's answer format (`prompt.fmt`), which the task grades
    chat: bool  # prompts are chat messages rendered by the tokenizer's template
    prompt: Mapping[str, str] = field(default_factory=dict)  # system, user, prefill, plain
    chat_kwargs: Mapping = field(default_factory=dict)  # extra apply_chat_template arguments
    task: Task | None = None  # renders each prompt, grades each completion, says what a row holds

    def prompts(self, records: list[TaskRecord]) -> list:
        """Each record's prompt, rendered by the task as training renders it."""
        return [self.task.render(r, self.prompt, chat=self.chat) for r in records]


def subset_levels(task: Task, subsets) -> tuple[str, ...]:
    """`eval.subsets` as the task's level keys, in its order: levels, numbers (2: the level that starts with
    it), `all` (every level) or null (the task's `validation_levels`); ConfigError naming eval.subsets for any other.

    >>> from curriculum.tasks import build_task
    >>> kk = build_task({"name": "kk"})
    >>> subset_levels(kk, [3, "2ppl"]), len(subset_levels(kk, ["all"])), subset_levels(kk, None)[-1]
    (('2ppl', '3ppl'), 7, '7ppl')
    """
    if subsets is None:
        return task.validation_levels
    named = set(task.levels) if ALL in list(subsets) else {task.level_of(p, "eval.subsets") for p in subsets}
    return tuple(level for level in task.levels if level in named)


def validation_settings(ev: DictConfig, prompt: DictConfig, model: DictConfig, task: Task) -> ValidationSettings:
    """The record from the `eval`, `prompt` and `model` groups of a composed config and the run's task (`eval` as
    its schema record, every key as the group gives it: its one default is its YAML's, conf/eval/default.yaml).

    >>> from omegaconf import OmegaConf
    >>> from curriculum.tasks import build_task
    >>> cfg = OmegaConf.create({"eval": {"subsets": [2, 3], "n": 4, "max_new_tokens": 64, "batch_size": 8,
    ...     "temperature": 0.0, "samples": 1, "seed": 1234, "backend": "hf", "every": 0,
    ...     "vllm_gpu_memory_utilization": 0.3, "subsets_after_stage": "near"},
    ...     "prompt": {"fmt": "think_answer", "system": "S", "user": "{quiz}", "prefill": "", "plain": "{user}"},
    ...     "model": {"chat": True, "chat_template_kwargs": {"enable_thinking": False}}})
    >>> s = validation_settings(cfg.eval, cfg.prompt, cfg.model, build_task({"name": "kk"}))
    >>> s.subsets, s.eval.n, s.fmt, dict(s.chat_kwargs), s.prompts([TaskRecord("q", "2ppl", "Q?", {})])[0][1]
    (('2ppl', '3ppl'), 4, 'think_answer', {'enable_thinking': False}, {'role': 'user', 'content': 'Q?'})
    """
    chat_kwargs = OmegaConf.to_container(model.get("chat_template_kwargs") or OmegaConf.create({}), resolve=True)
    return ValidationSettings(
        eval=as_record(EvalConfig, ev), subsets=subset_levels(task, ev.subsets),
        fmt=str(prompt.fmt),
        chat=bool(model.chat), prompt=MappingProxyType({k: prompt.get(k) for k in PROMPT_KEYS}),
        chat_kwargs=MappingProxyType(dict(chat_kwargs)), task=task,
    )


def validation_pools(settings: ValidationSettings, seed: int) -> dict[str, list[TaskRecord]]:
    """The held-out pool of every subset `settings` validates, read as a run reads them and before any model loads:
    the task held to its contract on one record of each subset (curriculum/tasks/contract.py: ConfigError naming the
    member), then each pool as the task reads it, which screens its records (K&K: curriculum/tasks/kk/screen.py, a
    RecordError naming the file and line). `seed` is the run's `seed`, which validation's test split never reads."""
    task = settings.task
    check_records(task, [], settings.subsets, settings.fmt, seeds=(seed, settings.eval.seed))
    return {level: task.validation_records(level, settings.eval.n, settings.eval.seed) for level in settings.subsets}
