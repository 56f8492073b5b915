"""Inputs from outside the config (a data file, the environment) that were taken as what they are not."""

from __future__ import annotations

import pytest

from core.gpu_pool import visible_gpus
from curriculum.tasks.base import RecordError
from curriculum.tasks.kk.generator import generate
from curriculum.tasks.kk.sources import load_records


def _parquet(path, records) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), path)


@pytest.mark.parametrize("keep", [
    0.5,  # cut mid-file: its footer is gone (pyarrow's own ArrowInvalid names no file)
    0.0,  # emptied: "Parquet file size is 0 bytes"
])
def test_a_truncated_parquet_file_is_named(tmp_path, keep):
    path = tmp_path / "2ppl" / "train.parquet"
    _parquet(path, generate(2, 8, seed=0))
    assert len(load_records("local", 2, "train", path=tmp_path)) == 8, "whole, it reads"
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(RecordError, match=rf"^{path}: not a readable parquet file \("):
        load_records("local", 2, "train", path=tmp_path)


@pytest.mark.parametrize(("value", "gpus"), [
    ("-1", []),  # the usual way to hide every GPU: no GPU named "-1" handed to a launch=per_gpu job
    ("", []),  # empty: none either
    ("0,-1,2", ["0"]),  # CUDA reads up to the first negative index
    ("1,0", ["1", "0"]),  # order kept: the pool hands them out in it
    ("GPU-5d1b,MIG-a2", ["GPU-5d1b", "MIG-a2"]),  # UUIDs as written
])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, gpus):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": value}) == gpus


@pytest.mark.run
def test_a_per_gpu_sweep_with_every_gpu_hidden_is_refused_before_it_starts(tmp_path):
    from tests.conftest import run_cli

    sweep = tmp_path / "sweep"
    refused = run_cli("train", "-m", "+curriculum=kk_ladder", "experiment=smoke", "launch=per_gpu", "seed=1,2",
                      f"hydra.sweep.dir={sweep}", env={"CUDA_VISIBLE_DEVICES": "-1"}, timeout=120)
    assert refused.stderr.strip().splitlines()[-1] == (
        "config error: launch.gpus: no GPU to share out here (CUDA_VISIBLE_DEVICES hides them all, or is unset and "
        "nvidia-smi lists none); name them (launch.gpus=[0,1]), or drop launch=per_gpu"), refused.stderr[-2000:]
    assert not sweep.exists()
