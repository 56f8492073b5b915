"""`python -m train.gpu_check --cuda-only` on a machine whose NVIDIA driver is older than torch's CUDA build needs:
it names the driver and the build, not "no CUDA device". Shown on this CPU through what the check reads: a fake
nvidia-smi on PATH (or the kernel module's version file, or NVML), and torch.cuda / torch.version as a CUDA
build of torch answers them."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest
import torch

import train.gpu.driver as driver
from tests.conftest import run_cli
from train.gpu_check import main

TOO_OLD_FOR_13 = ("gpu-check: torch 2.13.0 is built for CUDA 13.0, which needs NVIDIA driver >= 580.65.06; this "
                  "machine has 550.54.15: upgrade the driver, or install a torch built for CUDA 12.x (docs/gpu.md)")


def fake_nvidia_smi(tmp_path, monkeypatch, version: str | None) -> None:
    """PATH holds only an nvidia-smi answering `version` (None: no nvidia-smi at all); no kernel module file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if version is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho {version}\n")
        smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(driver, "KERNEL_MODULE", str(tmp_path / "no-module"))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML bindings either


def as_torch(monkeypatch, version: str, cuda: str | None, available: bool) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)


@pytest.mark.parametrize(("torch_version", "cuda", "found", "line"), [
    # PyPI's torch 2.13.0 on an R550 driver: the case `make gpu-check` met (it said "no CUDA device")
    ("2.13.0", "13.0", "550.54.15", TOO_OLD_FOR_13),
    ("2.13.0", "13.0", "580.65.06", None),  # 13.0 GA's own driver: the driver is not why
    ("2.13.0+cu128", "12.8", "535.104.05", None),  # R535 runs any 12.x build (minor version compatibility)
    # older than every CUDA 12 build: the newest CUDA it runs (an older torch's), or nothing to install instead
    ("2.13.0+cu128", "12.8", "470.82.01", "gpu-check: torch 2.13.0+cu128 is built for CUDA 12.8, which needs "
     "NVIDIA driver >= 525.60.13; this machine has 470.82.01: upgrade the driver, or install a torch built for CUDA "
     "11.x (docs/gpu.md)"),
    ("2.13.0+cu128", "12.8", "418.67", "gpu-check: torch 2.13.0+cu128 is built for CUDA 12.8, which needs "
     "NVIDIA driver >= 525.60.13; this machine has 418.67: upgrade the driver (docs/gpu.md)"),
    ("2.13.0+cpu", None, "550.54.15", "gpu-check: torch 2.13.0+cpu is the CPU build, on a machine with NVIDIA "
     "driver 550.54.15: install a CUDA build of torch (docs/gpu.md)"),
    ("2.13.0", "13.0", None, None),  # no driver found: the plain "no CUDA device" line
])
def test_the_driver_or_the_build_is_named_when_torch_sees_no_cuda(tmp_path, monkeypatch, capsys, torch_version,
                                                                    cuda, found, line):
    fake_nvidia_smi(tmp_path, monkeypatch, found)
    as_torch(monkeypatch, torch_version, cuda, available=False)
    assert main(["--cuda-only"]) == 2
    said = capsys.readouterr().err.strip()
    assert said == (line or said) and len(said.splitlines()) == 1
    assert said.startswith("gpu-check: no CUDA device") is (line is None), said


@pytest.mark.parametrize(("torch_version", "cuda", "found", "refused"), [
    # torch 2.12 for CUDA 12.6 runs here, but the vllm extra would swap in PyPI's torch 2.13.0 (CUDA 13.0)
    ("2.12.0+cu126", "12.6", "550.54.15", "gpu-check: the vllm extra replaces torch 2.12.0+cu126 with torch 2.13.0, "
     "whose PyPI build is for CUDA 13.0, which needs NVIDIA driver >= 580.65.06; this machine has 550.54.15: "
     "upgrade the driver, or install torch 2.13.0 built for CUDA 12.x (docs/gpu.md)"),
    ("2.13.0+cu128", "12.8", "550.54.15", None),  # docs/gpu.md's way: pip keeps a torch 2.13.0 already there
    ("2.12.0+cu126", "12.6", "580.82.07", None),  # a driver that runs PyPI's build
])
def test_cuda_only_refuses_a_vllm_install_whose_torch_the_driver_does_not_run(tmp_path, monkeypatch, capsys,
                                                                             torch_version, cuda, found, refused):
    fake_nvidia_smi(tmp_path, monkeypatch, found)
    as_torch(monkeypatch, torch_version, cuda, available=True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "vllm" else real_find_spec(name, *args))
    assert main(["--cuda-only"]) == (2 if refused else 0)
    assert capsys.readouterr().err.strip() == (refused or "")


def test_the_driver_is_read_from_nvidia_smi_then_the_kernel_module_then_nvml(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "570.211.01")
    assert driver.driver_version() == "570.211.01"
    (tmp_path / "bin" / "nvidia-smi").unlink()
    assert driver.driver_version() is None, "nothing answers"
    module = tmp_path / "version"
    module.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
                      "GCC version:  gcc version 12.2.0\n")
    monkeypatch.setattr(driver, "KERNEL_MODULE", str(module))
    assert driver.driver_version() == "550.54.15"
    monkeypatch.setattr(driver, "KERNEL_MODULE", str(tmp_path / "no-module"))
    nvml = SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                           nvmlSystemGetDriverVersion=lambda: b"535.104.05")
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert driver.driver_version() == "535.104.05"


@pytest.mark.run
def test_the_cli_names_the_cpu_build_on_a_machine_with_a_driver(tmp_path):
    """This CPU's torch with a driver on PATH, as a user who installed the CPU build on a GPU box runs it."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 550.54.15\n")
    smi.chmod(0o755)
    done = run_cli("train.gpu_check", "--cuda-only", env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"gpu-check: torch {torch.__version__} is the CPU build, on a machine with NVIDIA "
                                   "driver 550.54.15: install a CUDA build of torch (docs/gpu.md)")
