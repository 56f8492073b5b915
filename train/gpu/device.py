"""The machine a GPU check runs on (`--device` cuda | cpu), its one-line refusal, and the memory watch both paths
(our runner, bare TRL) time themselves with."""

from __future__ import annotations

import threading
import time

import torch

GIB = 2**30
# Where the check runs: a CUDA card (what it is for), or this CPU with vLLM's CPU build (`--device cpu`)
DEVICES = ("cuda", "cpu")


class GpuCheckError(RuntimeError):
    """A missing piece of the machine; the message is one line starting with `gpu-check:`."""


def require_cuda(available: bool) -> None:
    if not available:
        raise GpuCheckError("gpu-check: no CUDA device (torch.cuda.is_available() is False); run it on a machine "
                            "with an NVIDIA GPU, its driver and the CUDA build of torch")


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


class MemoryWatch:
    """Peak GPU memory over a block: the device's used memory sampled every `every` seconds (all of this
    process: torch, vLLM, the CUDA context; other processes too), and torch's own peak counters (whether
    they include vLLM's sleep-mode allocator is not known: compare with the device's). No CUDA: wall time only."""

    def __init__(self, cuda: bool, every: float = 0.1):
        self.cuda, self.every, self.peak_used = cuda, every, 0
        self.result: dict = {}

    def __enter__(self):
        self.began, self.stop = time.perf_counter(), threading.Event()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self) -> None:
        while True:
            free, total = torch.cuda.mem_get_info()
            self.peak_used = max(self.peak_used, total - free)
            if self.stop.wait(self.every):
                return

    def __exit__(self, *exc) -> None:
        self.result = {"seconds": round(time.perf_counter() - self.began, 1)}
        if self.cuda:
            self.stop.set()
            self.thread.join()
            self.result.update(device_peak_used_gb=round(self.peak_used / GIB, 2),
                               torch_max_allocated_gb=round(torch.cuda.max_memory_allocated() / GIB, 2),
                               torch_max_reserved_gb=round(torch.cuda.max_memory_reserved() / GIB, 2))
