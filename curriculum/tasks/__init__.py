"""Tasks by name: K&K, GSM8K and reasoning-gym datasets behind one interface (`curriculum.tasks.base`).

``build_task(cfg.task)`` turns a task config (conf/task/<name>.yaml: ``name`` plus the task's own
settings) into a :class:`~curriculum.tasks.base.Task`. A task's module is imported only when it is
built, so K&K never imports reasoning-gym (an optional extra: ``pip install -e '.[rgym]'``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

from core.checks import ConfigError
from curriculum.tasks.base import Task

#: task name -> "module:class"
TASKS = {
    "kk": "curriculum.tasks.kk:KKTask",
    "gsm8k": "curriculum.tasks.gsm8k:GSM8KTask",
    "reasoning_gym": "curriculum.tasks.rgym:ReasoningGymTask",
}


def task_class(name: str) -> type[Task]:
    """The class registered as `name`; ConfigError naming task.name when there is none."""
    if name not in TASKS:
        raise ConfigError(f"task.name: {name!r} is not a task; known: {', '.join(TASKS)}")
    module, _, attr = TASKS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def build_task(task_cfg: Mapping, **injected) -> Task:
    """The task a task config describes; `injected` are objects from layers above (K&K's grader).

    Every key but ``name`` must be a parameter of the task's class: a typo is a ConfigError naming it.

    >>> build_task({"name": "gsm8k", "source": "sample"}).levels
    ('2steps', '3steps', '4steps', '5steps', '6+steps')
    >>> build_task({"name": "gsm8k", "sorce": "hub"})
    Traceback (most recent call last):
    core.checks.ConfigError: task.sorce: not a setting of task gsm8k; settings: source, path, hub_id, hub_config
    """
    if isinstance(task_cfg, DictConfig):
        task_cfg = OmegaConf.to_container(task_cfg, resolve=True)
    settings = {str(k): v for k, v in task_cfg.items() if k != "name"}
    cls = task_class(str(task_cfg.get("name")))
    params = [p for p in inspect.signature(cls).parameters if p not in injected]
    for name in settings:
        if name not in params:
            raise ConfigError(f"task.{name}: not a setting of task {cls.name}; settings: {', '.join(params)}")
    return cls(**settings, **injected)


__all__ = ["TASKS", "Task", "build_task", "task_class"]
