"""gpu-check's memory watch on a card, shown on this CPU with torch.cuda and NVML faked: its sampling thread
makes no CUDA runtime call (vLLM captures CUDA graphs in global mode, where one from another thread breaks the
capture), and without NVML the main thread alone samples, between phases."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import torch

import train.gpu.device as device
from train.gpu.device import GIB, MemoryWatch

CARD = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x65, pci_device_id=0)


class FakeNvml:
    """NVML's few calls the watch makes: the card at CARD's PCI address, its used memory rising by 1 GiB a read."""

    def __init__(self):
        self.reads, self.address, self.running = 0, None, False

    def nvmlInit(self):
        self.running = True

    def nvmlShutdown(self):
        self.running = False

    def nvmlDeviceGetHandleByPciBusId(self, address):
        self.address = address
        return "handle"

    def nvmlDeviceGetMemoryInfo(self, handle):
        assert handle == "handle" and self.running
        self.reads += 1
        return SimpleNamespace(used=min(self.reads, 3) * GIB, total=80 * GIB)


@pytest.fixture
def cuda_calls(monkeypatch):
    """torch.cuda as a card answers, each call recorded with whether it came from the main thread."""
    calls = []

    def fake(name, value):
        def call(*args, **kwargs):
            calls.append((name, threading.current_thread() is threading.main_thread()))
            return value
        monkeypatch.setattr(torch.cuda, name, call)

    fake("mem_get_info", (70 * GIB, 80 * GIB))  # 10 GiB used
    fake("get_device_properties", CARD)
    fake("current_device", 0)
    fake("reset_peak_memory_stats", None)
    fake("max_memory_allocated", 2 * GIB)
    fake("max_memory_reserved", 12 * GIB)
    return calls


def profiled_calls_off_the_main_thread():
    """Start recording every call made on threads started from now on: (module or C function name)."""
    seen = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append(frame.f_globals.get("__name__", ""))
        elif event == "c_call":
            seen.append(f"{getattr(arg, '__module__', '') or ''}.{getattr(arg, '__qualname__', '')}")
    threading.setprofile(profile)
    return seen


@pytest.mark.parametrize("nvml", [FakeNvml(), None], ids=["nvml", "no-nvml"])
def test_no_cuda_runtime_call_leaves_the_main_thread(monkeypatch, cuda_calls, nvml):
    monkeypatch.setattr(device, "load_nvml", lambda: nvml)
    off_main = profiled_calls_off_the_main_thread()
    try:
        with MemoryWatch(cuda=True, every=0.01) as watch:
            deadline = time.monotonic() + 10  # the sampling thread (with NVML) reads several times, on a busy CPU too
            while nvml is not None and nvml.reads < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        threading.setprofile(None)
    assert [name for name, on_main in cuda_calls if not on_main] == [], "torch.cuda off the main thread"
    assert [name for name in off_main if "torch" in name or "cuda" in name.lower()] == []
    if nvml is not None:
        # sampled off the main thread through NVML, on this card (found by its PCI address), and closed after
        assert nvml.reads >= 3 and nvml.address == "00000000:65:00.0" and not nvml.running
        assert watch.result["device_peak_used_gb"] == 3.0 and watch.result["device_sampled"] == "NVML every 0.01 s"
        assert ("mem_get_info", True) not in cuda_calls, "the device read through NVML alone"
    else:
        # the main thread samples at the block's ends; the peak is at least what torch reserved
        assert [call for call in cuda_calls if call[0] == "mem_get_info"] == [("mem_get_info", True)] * 2
        assert watch.thread is None and watch.result["device_peak_used_gb"] == 12.0
        assert watch.result["device_sampled"].startswith("at the block's start and end (no NVML)")
    assert watch.result["torch_max_reserved_gb"] == 12.0


def test_nvml_that_does_not_start_falls_back_to_the_main_thread(monkeypatch, cuda_calls):
    broken = FakeNvml()
    broken.nvmlInit = lambda: (_ for _ in ()).throw(RuntimeError("NVML Shared Library Not Found"))
    monkeypatch.setattr(device, "load_nvml", lambda: broken)
    with MemoryWatch(cuda=True, every=0.01) as watch:
        pass
    assert watch.thread is None and broken.reads == 0
    assert all(on_main for _, on_main in cuda_calls)


def test_without_cuda_it_times_the_block_only(monkeypatch):
    monkeypatch.setattr(device, "load_nvml", lambda: pytest.fail("no card, no NVML"))
    with MemoryWatch(cuda=False) as watch:
        pass
    assert set(watch.result) == {"seconds"}
