"""CUDA's rule for vLLM engines in one process, held on this CPU, where vLLM's CPU build skips it.

On CUDA with sleep mode, vLLM allocates through its CuMem allocator, which serves one engine per process:
vLLM 0.31 (`v1/worker/gpu_worker.py` `_maybe_get_memory_pool_context`) asserts "CuMem allocator can only be used
for one instance per process" when an engine loads its weights while another's allocations are still tracked,
and an allocation freed while its engine sleeps is handed back twice (`vllm/device_allocator/cumem.py`). The CPU
build returns `nullcontext()` there, so no CPU run meets either. `install` makes both fail here as they would:

- `strict` (a product run: `python -m train`, `make gpu-check`): any second engine start in the process is
  refused, the rule the product keeps (eval/vllm_engine.py: one engine per process for a whole run);
- otherwise (the test process itself, where several tests each start one): a start is refused while an
  earlier engine's weights are still alive, which is the allocator's own condition;
- in both, an engine shut down while asleep (`sleep` not followed by a full `wake_up`) is refused.

Each start is also written, one JSON line (pid, model), to the file KK_ENGINE_LOG names, so a test counts the
engines each process started. Subprocesses get the guard through `guard_site/sitecustomize.py` (KK_ENGINE_GUARD).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import weakref

ONE_ENGINE = "CuMem allocator can only be used for one instance per process."
FREED_ASLEEP = "a sleeping vLLM engine was shut down: on CUDA its allocations would be freed twice"
_engines: list[weakref.ref] = []  # the weights of every engine this process started
_installed = False
_strict = True  # read at each start: a pytest-xdist worker inherits `strict` from the environment first


def _log_start(model) -> None:
    path = os.environ.get("KK_ENGINE_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps({"pid": os.getpid(), "model": str(model)}) + "\n")


def _guard_llm(module) -> None:
    llm_class = module.LLM
    started = llm_class.__init__

    def __init__(self, *args, **kwargs):
        alive = [ref for ref in _engines if ref() is not None]
        if _engines and (_strict or alive):
            raise AssertionError(f"{ONE_ENGINE} (engine guard: {len(_engines)} started before in this process)")
        _log_start(kwargs.get("model", args[0] if args else None))
        started(self, *args, **kwargs)
        _engines.append(weakref.ref(self.llm_engine.model_executor.driver_worker.model_runner.model))

    llm_class.__init__ = __init__


def _guard_core_client(module) -> None:
    client = module.InprocClient
    sleep, wake_up, shutdown = client.sleep, client.wake_up, client.shutdown

    def guarded_sleep(self, *args, **kwargs):
        self._guard_asleep = {"weights", "kv_cache"}
        return sleep(self, *args, **kwargs)

    def guarded_wake_up(self, tags=None):
        asleep = getattr(self, "_guard_asleep", set())
        self._guard_asleep = set() if tags is None else asleep - set(tags)
        return wake_up(self, tags)

    def guarded_shutdown(self, *args, **kwargs):
        if getattr(self, "_guard_asleep", None):
            raise AssertionError(f"{FREED_ASLEEP} ({sorted(self._guard_asleep)} asleep)")
        return shutdown(self, *args, **kwargs)

    client.sleep, client.wake_up, client.shutdown = guarded_sleep, guarded_wake_up, guarded_shutdown


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches vLLM's modules as they are imported: installing the guard must not import vLLM (seconds)."""

    def __init__(self, patchers: dict):
        self.patchers = patchers

    def find_spec(self, name, path, target=None):
        patch = self.patchers.pop(name, None)
        if patch is None:
            return None
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


def install(strict: bool) -> None:
    """The guard in this process, wrapping vLLM's classes once (twice would count each start twice): see the module
    docstring. A later call sets `strict` only: a pytest-xdist worker starts with the environment's `strict`
    (guard_site), then its conftest makes it the test process's guard."""
    global _installed, _strict
    _strict = strict
    if _installed:
        return
    _installed = True
    patchers = {"vllm.entrypoints.llm": _guard_llm,
                "vllm.v1.engine.core_client": _guard_core_client}
    for name in [n for n in patchers if n in sys.modules]:
        patchers.pop(name)(sys.modules[name])
    if patchers:
        sys.meta_path.insert(0, _PatchOnImport(patchers))


def engine_starts(log_path) -> dict[int, int]:
    """Engines started per process (pid) as the guard logged them."""
    counts: dict[int, int] = {}
    if os.path.exists(log_path):
        with open(log_path) as log:
            for line in log:
                pid = json.loads(line)["pid"]
                counts[pid] = counts.get(pid, 0) + 1
    return counts
