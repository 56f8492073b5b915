"""Why torch sees no CUDA device on a machine with an NVIDIA driver: a driver older than the one torch's CUDA build
needs, or torch's CPU build. Read before anything heavy loads (`python -m train.gpu_check --cuda-only`, which the
Makefile runs before it installs the `vllm` extra)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# The oldest Linux x86_64 driver that runs each CUDA major's builds (CUDA Toolkit release notes)
MINIMUM_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
# The torch the `vllm` extra pins and the CUDA of its PyPI build, which pip installs unless that version is there
VLLM_TORCH, VLLM_TORCH_PYPI_CUDA = "2.13.0", "13.0"
NVIDIA_SMI = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
# The loaded kernel module's version line: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..."
KERNEL_MODULE = "/proc/driver/nvidia/version"
KERNEL_MODULE_VERSION = re.compile(r"Kernel Module\s+(\d+(?:\.\d+)+)")


def version_key(version: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15): driver versions compared as numbers.

    >>> version_key("580.65.06") > version_key("570.211.01") > version_key("570.26")
    True
    """
    return tuple(int(part) for part in version.strip().split("."))


def driver_version() -> str | None:
    """This machine's NVIDIA driver version: nvidia-smi's, else the kernel module's, else pynvml's; else None."""
    if shutil.which(NVIDIA_SMI[0]):
        try:
            done = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        lines = done.stdout.split() if done is not None and done.returncode == 0 else []
        if lines:
            return lines[0]
    try:
        found = KERNEL_MODULE_VERSION.search(Path(KERNEL_MODULE).read_text())
    except OSError:
        found = None
    if found:
        return found.group(1)
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
    except Exception:  # no NVML bindings, or no driver library behind them
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def cuda_major_for(driver: str) -> int | None:
    """The newest CUDA major whose builds `driver` runs (MINIMUM_DRIVER), None for one older than all.

    >>> cuda_major_for("550.54.15"), cuda_major_for("580.82.07"), cuda_major_for("418.67")
    (12, 13, None)
    """
    fits = [major for major, needed in MINIMUM_DRIVER.items() if version_key(driver) >= version_key(needed)]
    return max(fits, default=None)


def driver_problem(torch_version: str, torch_cuda: str | None, driver: str | None) -> str | None:
    """Why torch built for CUDA `torch_cuda` (None: the CPU build) does not run on `driver`, in one line, or None."""
    if driver is None:
        return None
    if torch_cuda is None:
        return (f"gpu-check: torch {torch_version} is the CPU build, on a machine with NVIDIA driver {driver}: "
                "install a CUDA build of torch (docs/gpu.md)")
    return _too_old(f"torch {torch_version} is built for CUDA {torch_cuda}", torch_cuda, driver, "a torch")


def vllm_torch_problem(torch_version: str, driver: str | None) -> str | None:
    """Why the torch the `vllm` extra would install in place of `torch_version` does not run on `driver`, or None."""
    if driver is None or torch_version.split("+")[0] == VLLM_TORCH:
        return None
    what = (f"the vllm extra replaces torch {torch_version} with torch {VLLM_TORCH}, whose PyPI build is for CUDA "
            f"{VLLM_TORCH_PYPI_CUDA}")
    return _too_old(what, VLLM_TORCH_PYPI_CUDA, driver, f"torch {VLLM_TORCH}")


def _too_old(what: str, cuda: str, driver: str, build: str) -> str | None:
    """`what` (a torch build for CUDA `cuda`) needs a newer driver than `driver`: the line saying so, else None."""
    needed = MINIMUM_DRIVER.get(int(cuda.split(".")[0]))
    if needed is None or version_key(driver) >= version_key(needed):
        return None
    fits = cuda_major_for(driver)
    instead = f", or install {build} built for CUDA {fits}.x" if fits else ""
    return (f"gpu-check: {what}, which needs NVIDIA driver >= {needed}; this machine has {driver}: upgrade the "
            f"driver{instead} (docs/gpu.md)")
