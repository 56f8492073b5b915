"""The weight-sync group of a trainer that rolls out through a vLLM server (train/stages/training.py): closed
as its stage ends, on success and on failure, so the next stage's trainer reopens it on the same port.

TRL's real `VLLMClient` talks to a tiny HTTP server on 127.0.0.1 (its constructor checks the server); its
communicator, which needs CUDA, is a stand-in holding vLLM's real StatelessProcessGroup, whose TCP store
listens on the group port as `init_communicator` leaves it. Whether that port can be listened on again is
what the next stage's `init_communicator` needs.
"""

from __future__ import annotations

import inspect
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from trl.generation.vllm_client import VLLMClient
from trl.generation.vllm_generation import VLLMGeneration
from trl.trainer.grpo_trainer import GRPOTrainer
from vllm.distributed.utils import StatelessProcessGroup

from core.distributed import SINGLE
from curriculum.plan import build_plan
from eval.vllm_engine import free_port
from train.stages.base import StageContext
from train.stages.training import WeightSyncGroup, run_stage


class VllmServerStandIn(BaseHTTPRequestHandler):
    """The two routes VLLMClient's constructor reads: /health and /v1/models."""

    def do_GET(self):
        body = {"/health": {}, "/v1/models": {"data": [{"id": "tiny"}]}}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body or {}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def server_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), VllmServerStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def open_group(port: int) -> StatelessProcessGroup:
    """The group's store listening on `port`, as `init_communicator` opens it on the trainer's side (rank 0)."""
    return StatelessProcessGroup.create(host="127.0.0.1", port=port, rank=0, world_size=1)


def connected_client(server_url: str, port: int) -> VLLMClient:
    """TRL's client as `init_communicator` leaves it: its communicator over a group listening on `port`."""
    client = VLLMClient(base_url=server_url, group_port=port)
    client.communicator = SimpleNamespace(group=open_group(port))  # PyNcclCommunicator's `group`, without CUDA
    return client


def server_mode_trainer(client, callbacks=()) -> SimpleNamespace:
    """The parts of a server-mode GRPOTrainer on the main process that binding and the teardown read."""
    return SimpleNamespace(vllm_generation=SimpleNamespace(mode="server", vllm_client=client),
                           callback_handler=SimpleNamespace(callbacks=list(callbacks)))


@pytest.mark.run
def test_the_stand_ins_use_trls_own_names():
    """A rename in TRL fails here rather than leaving every stage's group open."""
    assert callable(VLLMClient.close_communicator) and callable(VLLMClient.init_communicator)
    assert "self.vllm_generation = VLLMGeneration(" in inspect.getsource(GRPOTrainer.__init__)
    assert "self.mode = mode" in inspect.getsource(VLLMGeneration.__init__)
    assert "self.vllm_client = VLLMClient(" in inspect.getsource(VLLMGeneration._init_vllm)
    assert "self.communicator.group.store = None" in inspect.getsource(VLLMClient.close_communicator)


@pytest.mark.run
def test_the_port_is_free_for_the_next_stage_once_the_stage_is_torn_down(server_url):
    port = free_port()
    client = connected_client(server_url, port)
    with pytest.raises(Exception, match="(?i)address already in use"):
        open_group(port)  # what the next stage's init_communicator met while the group stayed open
    sync = WeightSyncGroup()
    sync.bind(server_mode_trainer(client))
    sync.release()  # run_stage's teardown
    assert client.communicator is None
    reopened = open_group(port)  # the next stage's group, on the same port
    assert reopened.store is not None
    sync.release()  # a second release: nothing left to close


class FailingTrainer:
    """A trainer whose training raises (a divergence stop, a failed reward): `on_train_end` never runs."""

    is_deepspeed_enabled = False

    def __init__(self, client, sync: WeightSyncGroup):
        self.model = torch.nn.Linear(2, 2)
        self.vllm_generation = SimpleNamespace(mode="server", vllm_client=client)
        self.callback_handler = SimpleNamespace(callbacks=[sync])

    def train(self):
        raise RuntimeError("training failed mid-stage")


@pytest.mark.run
def test_a_stage_that_fails_mid_training_still_closes_the_group(server_url, make_cfg, tmp_path):
    port = free_port()
    client = connected_client(server_url, port)
    sync = WeightSyncGroup()
    kind = SimpleNamespace(trainer=lambda *args: FailingTrainer(client, sync), reference_fingerprint=lambda t: None)
    stage = build_plan(make_cfg("+curriculum=kk_ladder", "experiment=smoke"))[0]
    ctx = StageContext(run_dir=tmp_path, init_model="unused", reference_model=None, config_hash="0", task="kk",
                       keep_trainer_checkpoints=False, processes=SINGLE, callbacks=[sync])
    with pytest.raises(RuntimeError, match="training failed mid-stage"):
        run_stage(kind, stage, ctx, rows=None)
    assert client.communicator is None
    assert open_group(port).store is not None
    assert not (Path(tmp_path) / "stages" / stage.dirname / "final").exists()


@pytest.mark.parametrize("generation", [
    None,  # no vLLM
    SimpleNamespace(mode="colocate"),  # the process's own engine: no group to close
    SimpleNamespace(mode="server"),  # a rank other than the main process: TRL builds no client there
])
def test_a_trainer_without_a_server_client_is_left_alone(generation):
    sync = WeightSyncGroup()
    sync.bind(SimpleNamespace(vllm_generation=generation) if generation is not None else SimpleNamespace())
    assert sync.client is None
    sync.release()


def test_every_stage_gets_its_own_weight_sync_callback(make_cfg):
    """The runner's `stage_callbacks` adds one to every stage's trainer; a new one each stage (each stage's
    trainer has its own client)."""
    from train.run.runner import CurriculumRun

    plan = build_plan(make_cfg("+curriculum=kk_ladder", "experiment=smoke"))
    settings = SimpleNamespace(rollouts=SimpleNamespace(every=0),
                               validation=SimpleNamespace(eval=SimpleNamespace(every=0)))
    run = CurriculumRun(settings, Path("unused"), rows={}, base="unused", held_out={}, manifest=None,
                        logs=SimpleNamespace(metrics=None, tracker=None, rollouts=None), callbacks=[])
    found = [[c for c in run.stage_callbacks(stage, 0, "unused", history=[])[0] if isinstance(c, WeightSyncGroup)]
             for stage in plan[:2]]
    assert [len(each) for each in found] == [1, 1]
    assert found[0][0] is not found[1][0]
