"""How many CPU threads torch should use, chosen by measuring rather than by core count.

On some machines (this project's CI among them) every multi-threaded op pays a wake-up delay of
several milliseconds: an elementwise op on a small tensor takes ~8 ms with 2 threads and ~0.04 ms
with 1, which makes a small model's forward pass ten times slower. `auto` times a few small ops
both ways and keeps the faster; a number pins it; on CUDA nothing changes.
"""

from __future__ import annotations

import time

import torch


def _small_ops_seconds(threads: int, repeats: int = 20) -> float:
    torch.set_num_threads(threads)
    x = torch.randn(16, 20, 576)
    x * 2.0  # warm the thread pool
    start = time.perf_counter()
    for _ in range(repeats):
        (x * 2.0 + x).sum()
    return time.perf_counter() - start


def configure_cpu_threads(setting) -> int:
    """Apply `setting` ("auto" or a number of threads) to torch; returns the threads in use.

    >>> configure_cpu_threads(1)
    1
    """
    if torch.cuda.is_available():
        return torch.get_num_threads()
    if setting != "auto":
        torch.set_num_threads(max(1, int(setting)))
        return torch.get_num_threads()
    default = torch.get_num_threads()
    if default <= 1:
        return default
    many, one = _small_ops_seconds(default), _small_ops_seconds(1)
    torch.set_num_threads(1 if one < 0.5 * many else default)
    return torch.get_num_threads()
