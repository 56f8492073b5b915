"""`make gpu-check` (`python -m train.gpu_check [--device cpu] [overrides]`): the first command on a new GPU machine.

In under ten minutes it says whether `experiment=single_gpu` works on this card and what it costs (the runner and
bare TRL on kk_ladder's first two stages, cut short; `<paths.output_dir>/gpu_check.json`, docs/gpu.md). Without CUDA
it stops at once naming the cause (exit 2); `--cuda-only` does just that check and the `vllm` extra's torch's.
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
    """0 when every phase ran; 2 without CUDA or with a bad `--device`; 1 on any other failure."""
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
    """Refuse, before the `vllm` extra is installed, a torch it would install that this driver does not run."""
    if importlib.util.find_spec("vllm") is None:
        problem = vllm_torch_problem(torch.__version__, driver_version())
        if problem:
            raise GpuCheckError(problem)


if __name__ == "__main__":
    sys.exit(main())
