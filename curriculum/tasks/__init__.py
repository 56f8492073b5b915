"""Tasks behind one interface (`curriculum.tasks.base`): K&K, GSM8K, reasoning-gym datasets, and a user's own.

``build_task(cfg.task, fmt=cfg.prompt.fmt)`` turns a task config into a :class:`~curriculum.tasks.base.Task`:
``_target_`` is the import path of its class (conf/task/<name>.yaml for the built-ins; a user's own
module on PYTHONPATH, ``task=custom task._target_=my_pkg.MyTask``), every other key one of its
settings; a built-in may be named by its short ``name`` instead (``{"name": "gsm8k"}``). A task's
module is imported only when it is built, so K&K never imports reasoning-gym (an optional extra:
``pip install -e '.[rgym]'``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

from core.checks import ConfigError
from curriculum.tasks.base import Task
from curriculum.tasks.contract import check_task

#: The built-in tasks by their short name: a task config may name one by `name` instead of its `_target_`.
BUILT_IN = {
    "kk": "curriculum.tasks.kk.KKTask",
    "gsm8k": "curriculum.tasks.gsm8k.GSM8KTask",
    "reasoning_gym": "curriculum.tasks.rgym.ReasoningGymTask",
}


def task_class(path: str, key: str = "task._target_") -> type[Task]:
    """The Task subclass at import path `path` ("my_pkg.tasks.MyTask"); ConfigError naming `key` otherwise.

    >>> task_class("curriculum.tasks.gsm8k.GSM8KTask").name
    'gsm8k'
    >>> task_class("curriculum.tasks.gsm8k.Nothing")
    Traceback (most recent call last):
    core.checks.ConfigError: task._target_: 'curriculum.tasks.gsm8k.Nothing': curriculum.tasks.gsm8k has no Nothing
    """
    module, _, attr = str(path).rpartition(".")
    try:
        found = getattr(importlib.import_module(module), attr) if module else None
    except ModuleNotFoundError as err:
        raise ConfigError(f"{key}: {path!r}: no module {err.name} (is its folder on PYTHONPATH?)") from err
    except AttributeError:
        raise ConfigError(f"{key}: {path!r}: {module} has no {attr}") from None
    if not (isinstance(found, type) and issubclass(found, Task)):
        raise ConfigError(f"{key}: {path!r} is not a Task subclass (curriculum.tasks.base.Task)")
    return found


def build_task(task_cfg: Mapping, *, fmt: str | None = None) -> Task:
    """The task a task config describes. `fmt` (the prompt's answer format) goes to a task that takes it.

    Every key but ``_target_`` (or ``name``) must be a parameter of the task's class: a typo is a ConfigError
    naming it; `fmt` is the prompt's, never a task setting. The task's levels are held to its contract
    (`contract.check_task`).

    >>> build_task({"_target_": "curriculum.tasks.gsm8k.GSM8KTask", "source": "sample"}).levels
    ('2steps', '3steps', '4steps', '5steps', '6+steps')
    >>> build_task({"name": "gsm8k", "sorce": "hub"})
    Traceback (most recent call last):
    core.checks.ConfigError: task.sorce: not a setting of task gsm8k; settings: source, path, hub_id, hub_config
    """
    if isinstance(task_cfg, DictConfig):
        task_cfg = OmegaConf.to_container(task_cfg, resolve=True)
    settings = {str(k): v for k, v in task_cfg.items() if k not in ("_target_", "name")}
    cls = task_class(*_class_path(task_cfg))
    cls.check_installed()  # an optional extra it needs, named in one line (not its import's traceback)
    params = [p for p in inspect.signature(cls).parameters if p != "fmt"]
    for name in settings:
        if name not in params:
            raise ConfigError(f"task.{name}: not a setting of task {cls.name}; settings: {', '.join(params)}")
    injected = {"fmt": fmt} if fmt is not None and "fmt" in inspect.signature(cls).parameters else {}
    return check_task(cls(**settings, **injected))


def _class_path(task_cfg: Mapping) -> tuple[str, str]:
    """(import path, the key that gave it) of a task config: `_target_`, or a built-in's `name`."""
    if task_cfg.get("_target_") is not None:
        return str(task_cfg["_target_"]), "task._target_"
    name = task_cfg.get("name")
    if name not in BUILT_IN:
        raise ConfigError(f"task.name: {name!r} is not a task; known: {', '.join(BUILT_IN)} "
                          "(or task=custom task._target_=<your module.YourTask>)")
    return BUILT_IN[name], "task.name"


__all__ = ["BUILT_IN", "Task", "build_task", "task_class"]
