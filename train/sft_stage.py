"""A supervised stage (`kind: sft`): TRL's SFTTrainer on reference responses, saved and handed off
like any stage, so the next GRPO stage's reference model is the SFT checkpoint (the R1 recipe)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf
from transformers import AutoTokenizer
from trl import SFTConfig, SFTTrainer

from core.models import device_settings
from curriculum.plan import Stage
from train.checkpoints import fingerprint
from train.manifest import config_hash
from train.stage import StageContext, publish_stage, resume_and_train
from train.tracking import MetricsCallback


def sft_config(cfg: DictConfig, stage: Stage, output_dir) -> SFTConfig:
    device = device_settings()
    fields = {"optim": device["optim"], **OmegaConf.to_container(cfg.sft, resolve=True), **stage.overrides}
    fields.update(
        output_dir=str(output_dir), max_steps=stage.steps, seed=int(cfg.seed) + stage.index, report_to="none",
        bf16=device["bf16"], use_cpu=device["use_cpu"],
        model_init_kwargs={"dtype": str(device["dtype"]).removeprefix("torch.")},
        save_strategy="steps", dataset_text_field="text",
    )
    return SFTConfig(**fields)


def run_sft_stage(stage: Stage, ctx: StageContext, rows) -> dict:
    """Fine-tune on `rows` (prompt, completion) from `ctx.init_model`; publish `stages/<k>-<name>/final`."""
    stage_dir = ctx.run_dir / "stages" / stage.dirname
    args = sft_config(ctx.cfg, stage, stage_dir / "trainer")
    tokenizer = AutoTokenizer.from_pretrained(ctx.init_model)
    metrics = MetricsCallback(ctx.metrics, ctx.tracker, stage_index=stage.index, stage_name=stage.name,
                              ppl=stage.ppl_label, step_offset=ctx.step_offset)
    trainer = SFTTrainer(model=ctx.init_model, args=args, train_dataset=rows, processing_class=tokenizer,
                         callbacks=[metrics, *ctx.callbacks])
    start = fingerprint(trainer.model)
    resumed_from = resume_and_train(trainer, stage_dir, stage.name)
    info = {"stage": stage.name, "config_hash": config_hash(ctx.cfg), "steps_done": trainer.state.global_step,
            "init": ctx.init_model,
            "policy_fingerprint": start, "reference_fingerprint": None}
    publish_stage(trainer.model, tokenizer, stage_dir, info,
                  keep_trainer_checkpoints=ctx.cfg.keep_trainer_checkpoints)
    return {**info, "reference": None, "resumed_from": resumed_from}
