"""The machine a GPU check runs on (`--device` cuda | cpu), its one-line refusal, and the memory watch both paths
(our runner, bare TRL) time themselves with."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

GIB = 2**30
# Where the check runs: a CUDA card (what it is for), or this CPU with vLLM's CPU build (`--device cpu`)
DEVICES = ("cuda", "cpu")


class GpuCheckError(RuntimeError):
    """A missing piece of the machine; the message is one line starting with `gpu-check:`."""


def require_cuda(available: bool, why_not: Callable[[], str | None] = lambda: None) -> None:
    """Refuse a machine where torch sees no CUDA device, by `why_not`'s reason where it names one."""
    if available:
        return
    reason = why_not()
    raise GpuCheckError(reason or "gpu-check: no CUDA device (torch.cuda.is_available() is False); run it on a "
                        "machine with an NVIDIA GPU, its driver and the CUDA build of torch")


def split_device(argv: list[str]) -> tuple[str, list[str]]:
    """(`--device` cuda | cpu, the rest): the check's own argument, apart from the Hydra overrides.

    >>> split_device(["--device", "cpu", "eval.n=4"]), split_device(["eval.n=4"])
    (('cpu', ['eval.n=4']), ('cuda', ['eval.n=4']))
    """
    if "--device" not in argv:
        return "cuda", list(argv)
    at = argv.index("--device")
    device = argv[at + 1] if at + 1 < len(argv) else None
    if device not in DEVICES:
        raise GpuCheckError(f"gpu-check: --device {device}: not one of {', '.join(DEVICES)}")
    return device, [*argv[:at], *argv[at + 2:]]


def load_nvml():
    """The NVML bindings: `pynvml` (nvidia-ml-py), else the copy vLLM ships; None where neither imports."""
    try:
        import pynvml

        return pynvml
    except ImportError:
        pass
    try:
        from vllm.third_party import pynvml

        return pynvml
    except ImportError:
        return None


def nvml_used_bytes(nvml) -> Callable[[], int] | None:
    """A reader of this process's card's used memory through NVML (the driver, never the CUDA runtime: safe beside
    vLLM's graph capture), found by PCI address whatever CUDA_VISIBLE_DEVICES says; None where NVML does not start."""
    if nvml is None:
        return None
    try:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        nvml.nvmlInit()
        address = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        handle = nvml.nvmlDeviceGetHandleByPciBusId(address)
    except Exception as err:  # a driver without NVML, or bindings that do not match it
        log.info("gpu-check: NVML did not start (%s: %s): memory sampled at the block's ends only",
                 type(err).__name__, err)
        return None
    return lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used)


class MemoryWatch:
    """Peak GPU memory over a block (the device's used memory, torch's peaks); no CUDA: wall time only. Sampled from
    a thread through NVML only (a CUDA runtime call there would break vLLM's graph capture), else at the block's ends.
    """

    def __init__(self, cuda: bool, every: float = 0.1):
        self.cuda, self.every, self.peak_used = cuda, every, 0
        self.result: dict = {}
        self.read_used: Callable[[], int] | None = None
        self.thread: threading.Thread | None = None

    def __enter__(self):
        self.began, self.stop = time.perf_counter(), threading.Event()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self.nvml = load_nvml()
            self.read_used = nvml_used_bytes(self.nvml)
            if self.read_used is None:
                self._sample_here()
            else:
                self.thread = threading.Thread(target=self._sample, daemon=True)
                self.thread.start()
        return self

    def _sample(self) -> None:
        while True:
            self.peak_used = max(self.peak_used, self.read_used())
            if self.stop.wait(self.every):
                return

    def _sample_here(self) -> None:
        """One sample through the CUDA runtime, on the main thread, between phases."""
        free, total = torch.cuda.mem_get_info()
        self.peak_used = max(self.peak_used, total - free)

    def __exit__(self, *exc) -> None:
        self.result = {"seconds": round(time.perf_counter() - self.began, 1)}
        if not self.cuda:
            return
        if self.thread is None:
            self._sample_here()
            self.peak_used = max(self.peak_used, torch.cuda.max_memory_reserved())
            sampled = "at the block's start and end (no NVML), at least torch's max reserved"
        else:
            self.stop.set()
            self.thread.join()
            self.nvml.nvmlShutdown()
            sampled = f"NVML every {self.every} s"
        self.result.update(device_peak_used_gb=round(self.peak_used / GIB, 2), device_sampled=sampled,
                           torch_max_allocated_gb=round(torch.cuda.max_memory_allocated() / GIB, 2),
                           torch_max_reserved_gb=round(torch.cuda.max_memory_reserved() / GIB, 2))
