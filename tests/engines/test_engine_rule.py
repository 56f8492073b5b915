"""CUDA's rule for vLLM engines, which vLLM's CPU build skips, and the process's one engine that keeps it.

The guard (tests/engine_guard.py) is checked on stand-ins of vLLM's two classes it wraps: that it refuses what
CUDA refuses, so the engine tests that run under it mean something. The process's engine (eval/vllm_engine.py) is
checked on a stand-in with CUDA's sleep mode (vLLM refuses sleep mode on a CPU): the order of its calls is what
keeps a sleeping engine from being freed. Whether TRL still asks its engine for the arguments the process's engine
is started with is checked on TRL's real GRPOTrainer, its `LLM` recorded instead of started.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from core.models import resolve_model
from eval.vllm_engine import TRL_FREE, ProcessEngine, engine_arguments, rollout_arguments
from tests import engine_guard
from tests.conftest import compose_cfg
from train.stages.grpo import colocated_engine_setup

# vLLM for real: `make test` runs these again under the transformers a GPU user's `vllm` extra gets (Makefile)
pytestmark = pytest.mark.vllm


class FakeClient:
    """vLLM's in-process engine client as far as the guard wraps it."""

    def __init__(self):
        self.calls = []

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def shutdown(self):
        self.calls.append(("shutdown",))


@pytest.fixture
def guarded_client():
    cls = type("InprocClient", (FakeClient,), {})
    engine_guard._guard_core_client(SimpleNamespace(InprocClient=cls))
    return cls()


@pytest.mark.parametrize("calls, refused", [
    ([], False),  # never slept: freed as any allocation
    ([("sleep", None)], True),  # freed asleep: CUDA hands its allocations back twice (a close that skips wake_up)
    ([("sleep", None), ("wake_up", None)], False),  # woken whole first: what ProcessEngine.close does
    ([("sleep", None), ("wake_up", ["kv_cache"])], True),  # the weights still asleep
    ([("sleep", None), ("wake_up", ["kv_cache"]), ("wake_up", ["weights"])], False),  # woken in TRL's two steps
])
def test_the_guard_refuses_a_sleeping_engine_shut_down(guarded_client, calls, refused):
    for name, tags in calls:
        guarded_client.sleep(2) if name == "sleep" else guarded_client.wake_up(tags)
    if refused:
        with pytest.raises(AssertionError, match="sleeping vLLM engine was shut down"):
            guarded_client.shutdown()
    else:
        guarded_client.shutdown()


class Weights:
    """An engine's model: what the guard watches (weakly)."""


def _fake_llm_module():
    class LLM:
        def __init__(self, model):
            weights = Weights()
            self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
                model_runner=SimpleNamespace(model=weights))))

    return SimpleNamespace(LLM=LLM)


@pytest.mark.parametrize("strict, keep_first, refused", [
    (True, False, True),  # a product run: a second start is refused even after the first is gone
    (True, True, True),
    (False, True, True),  # the test process: the first engine's weights alive, as CUDA's allocator tracks them
    (False, False, False),  # the first one freed whole: CUDA's allocator is empty again
])
def test_the_guard_refuses_a_second_engine_as_cuda_would(monkeypatch, strict, keep_first, refused):
    monkeypatch.setattr(engine_guard, "_engines", [])
    monkeypatch.setattr(engine_guard, "_strict", strict)
    module = _fake_llm_module()
    engine_guard._guard_llm(module)
    first = module.LLM(model="a")
    if not keep_first:
        del first
    if refused:
        with pytest.raises(AssertionError, match="one instance per process"):
            module.LLM(model="b")
    else:
        module.LLM(model="b")


class SleepingLLM:
    """vLLM's LLM with CUDA's sleep mode, recording the calls the process's engine makes."""

    def __init__(self, calls: list):
        self.calls, self.asleep = calls, False
        self.llm_engine = SimpleNamespace(is_sleeping=lambda: self.asleep,
                                          engine_core=SimpleNamespace(shutdown=lambda: calls.append("shutdown")))

    def sleep(self, level):
        self.calls.append(f"sleep {level}")
        self.asleep = True

    def wake_up(self, tags=None):
        self.calls.append("wake_up")
        self.asleep = False


@pytest.mark.parametrize("launched, expected", [
    (False, ["sleep 2", "wake_up", "shutdown"]),  # one process: woken, then shut down
    (True, ["sleep 2", "wake_up"]),  # under a launcher: woken, never shut down (it takes the process group)
])
def test_the_process_engine_is_woken_before_it_is_freed(monkeypatch, launched, expected):
    calls = []
    engine = ProcessEngine({"enable_sleep_mode": True}, rollouts=True, shutdown_at_close=not launched)
    engine.llm = SleepingLLM(calls)
    engine.llm.sleep(2)  # as TRL leaves it after a stage's last rollout
    engine.close()
    assert calls == expected


def test_a_trainer_gets_the_process_engine_awake_and_reseeded(monkeypatch):
    calls, seeds = [], []
    monkeypatch.setattr("vllm.utils.torch_utils.set_random_seed", seeds.append)
    engine = ProcessEngine({"enable_sleep_mode": True, "seed": 3, "gpu_memory_utilization": 0.3}, rollouts=True)
    engine.llm = SleepingLLM(calls)
    engine.llm.sleep(2)
    assert engine.for_trainer(model="stage-2", seed=3, max_num_seqs=64, gpu_memory_utilization=0.3) is engine.llm
    assert calls == ["sleep 2", "wake_up"] and seeds == [3], "TRL sleeps it again itself: it must be awake"
    with pytest.raises(RuntimeError, match=r"gpu_memory_utilization=0.9 \(the process's engine has 0.3\)"):
        engine.for_trainer(model="stage-2", gpu_memory_utilization=0.9)


def test_trl_asks_its_engine_for_the_arguments_the_process_engine_starts_with(cache_dir, tmp_path):
    """TRL 1.16's GRPOTrainer (`VLLMGeneration._init_vllm`) asks `LLM(...)` for what `rollout_arguments` computes
    from the same GRPOConfig: should TRL change them, this fails (and so would `for_trainer`, naming the key)."""
    cfg = compose_cfg(cache_dir, "experiment=smoke")
    path = resolve_model(cfg.model, cache_dir)
    args = GRPOConfig(output_dir=str(tmp_path), use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.25,
                      per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=2,
                      max_completion_length=8, use_cpu=True, report_to=[])
    asked = []

    def recorded(**kwargs):
        asked.append(kwargs)
        return SimpleNamespace(sleep=lambda level: None)

    engine = ProcessEngine(engine_arguments(rollout_arguments(vars(args)), rollouts=True), rollouts=True)
    engine.for_trainer = recorded
    from datasets import Dataset

    with colocated_engine_setup(engine):
        GRPOTrainer(model=path, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                    train_dataset=Dataset.from_dict({"prompt": ["a"] * 8}),
                    processing_class=AutoTokenizer.from_pretrained(path, padding_side="left"))
    expected = rollout_arguments(vars(args))
    assert len(asked) == 1 and asked[0]["model"] == path
    assert {k: v for k, v in asked[0].items() if k != "model"} == {k: expected[k] for k in asked[0] if k != "model"}
    assert set(asked[0]) - {"model"} == set(expected), "every argument TRL passes, and no other"
    assert expected["max_num_seqs"] == 4 * 1 * 2 and "max_num_seqs" in TRL_FREE


def test_the_floor_pass_runs_the_transformers_it_names():
    """`make test`'s second pass (the vLLM tests under a GPU user's transformers) is that transformers, not the
    venv's: the folder before the venv's own took."""
    import transformers

    floor = os.environ.get("KK_TRANSFORMERS_FLOOR")
    if floor is None:
        pytest.skip("the first pass: the venv's transformers")
    assert transformers.__version__ == floor


@pytest.mark.parametrize("world_size, port_kept", [
    (None, False),  # one process, no launcher: a port the OS hands out, never TRL's fixed 29500
    ("1", False),  # as TRL leaves a single process (WORLD_SIZE=1): the same
    ("2", True),  # under torchrun: the launcher's port, which every rank shares
])
def test_an_engine_outside_a_launcher_binds_a_port_the_os_picked(world_size, port_kept):
    import socket

    from eval.vllm_engine import single_process_env

    # the whole environment restored after: the variables single_process_env sets would otherwise make every later
    # `python -m train` this worker starts join a process group on 29500
    with patch.dict(os.environ), socket.socket() as taken:
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR"):
            os.environ.pop(name, None)
        if world_size:
            os.environ["WORLD_SIZE"] = world_size
        taken.bind(("127.0.0.1", 0))  # a port another process holds, as a concurrent run's engine would
        os.environ["MASTER_PORT"] = str(taken.getsockname()[1])
        single_process_env()
        port = int(os.environ["MASTER_PORT"])
        assert (port == taken.getsockname()[1]) is port_kept
    if not port_kept:
        with socket.socket() as mine:  # free: the engine can bind it
            mine.bind(("127.0.0.1", port))
