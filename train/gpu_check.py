"""`make gpu-check` (`python -m train.gpu_check [--device cpu] [overrides]`): the first command on a new GPU machine.

In under ten minutes it says whether `experiment=single_gpu` works on this card and what it costs:
1. the machine: CUDA, bf16, vLLM, bitsandbytes (an 8-bit AdamW step on the card);
2. our path: the runner on kk_ladder's first two stages cut to 2 GRPO steps each under single_gpu (the
   handoff, a second trainer taking over the process's one vLLM engine), on the configured model (or `model.id=<local
   path>`, `make gpu-check MODEL=<path>`), validating subsets 2 and 3 through vLLM before and after each
   stage (through that engine) and once inside each through the trainer's hold on it (`eval.every=1`);
3. bare TRL: the same stages with GRPOTrainer alone (the same GRPOConfig, rewards and rows), each stage in a
   process of its own (train/gpu/bare.py), for the overhead ratio of everything this project wraps around
   it: training time against training time, our in-stage validation taken out;
4. peak GPU memory (the device's used memory, sampled through NVML: everything in the process, vLLM included;
   torch's max allocated/reserved; vLLM's budget), step time, tokens per second and each validation's
   cost, with the full validation plan projected from it, all in `<paths.output_dir>/gpu_check.json`.

vLLM gets `gpu.vllm_gb` (7 GB) of whatever card this is (`gpu.memory_gb` is set to the card's size), so
the peaks compare with the 24 GB arithmetic in docs/gpu.md. Without CUDA it stops at once: one line on
stderr, exit status 2, naming the cause where it is known: a driver older than torch's CUDA build needs, or
torch's CPU build (train/gpu/driver.py). `--cuda-only` does just that check, and that the torch the `vllm` extra
would install runs on this driver (the Makefile runs it before installing vLLM).
`--device cpu` runs every phase on this CPU instead (vLLM's CPU build, the tiny model with heads of 64, no
bf16, 8-bit AdamW or sleep mode: train/gpu/config.py DEVICE_OVERRIDES): the test suite runs it so.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

from train.gpu.device import GpuCheckError, require_cuda, split_device
from train.gpu.driver import driver_problem, driver_version, vllm_torch_problem


def main(argv: list[str] | None = None) -> int:
    """0 when every phase ran; 2 without CUDA or with a bad `--device` (before anything heavy is imported);
    1 on any other failure."""
    try:
        device, overrides = split_device(list(sys.argv[1:] if argv is None else argv))
        if device == "cuda":
            require_cuda(torch.cuda.is_available(), lambda: driver_problem(torch.__version__, torch.version.cuda,
                                                                           driver_version()))
        if overrides == ["--cuda-only"]:
            require_vllm_torch()
            return 0
    except GpuCheckError as err:
        print(err, file=sys.stderr)
        return 2
    from core.models import defer_bitsandbytes, quiet_libraries

    defer_bitsandbytes(set())  # before transformers.trainer imports it: single_gpu's 8-bit AdamW is CUDA's, kept
    from train.gpu.bare import gpu_check_cfg
    from train.gpu.measure import run_check

    quiet_libraries()
    cfg = gpu_check_cfg(overrides, device=device)
    out = Path(cfg.paths.output_dir) / "gpu_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        report = run_check(cfg, overrides, out, device)
    except Exception as err:  # say what failed in the file too
        out.write_text(json.dumps({"error": f"{type(err).__name__}: {err}"}, indent=2))
        print(f"gpu-check failed: {type(err).__name__}: {err} (see {out})", file=sys.stderr)
        return 1
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("memory", "speed", "overhead", "validation_plan_projection")}, indent=2))
    print(f"written: {out}")
    return 0


def require_vllm_torch() -> None:
    """Before the Makefile installs the `vllm` extra: refuse where the torch it would put in place of this one
    does not run on this machine's driver (vLLM itself installed: nothing to replace)."""
    if importlib.util.find_spec("vllm") is None:
        problem = vllm_torch_problem(torch.__version__, driver_version())
        if problem:
            raise GpuCheckError(problem)


if __name__ == "__main__":
    sys.exit(main())
