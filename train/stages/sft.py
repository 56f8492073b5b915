"""The supervised stage kind (`kind: sft`): TRL's SFTTrainer on reference responses, saved and handed off like any
stage (LoRA merged into the final), so the next GRPO stage's reference model is the SFT checkpoint (the R1 recipe).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from transformers import AutoTokenizer
from trl import SFTConfig, SFTTrainer

from core.checks import ConfigError
from core.stage_kinds import SFT, StageKindFacts
from curriculum.data import to_sft_rows
from curriculum.plan import Stage
from curriculum.prompts import prompt_ids
from curriculum.tasks.base import TaskRecord
from train.stages.base import KindSettings, StageContext
from train.stages.fields import check_trainer_fields, lora_config, trainer_fields


@dataclass(eq=False)
class SftStage:
    """`kind: sft`: next-token loss on the reference completion after the prompt; no rewards, no reference."""

    facts: ClassVar[StageKindFacts] = SFT
    sft: Mapping
    shared: KindSettings

    def fields(self, stage: Stage) -> dict:
        """The `sft` group with the stage's overrides: the SFTConfig fields a config chose."""
        return {**self.sft, **stage.overrides}

    def rows(self, records: list[TaskRecord], tokenizer):
        """SFT rows: each record's prompt and the task's reference response (`Task.sft_target`)."""
        model = self.shared.model
        return to_sft_rows(self.shared.task, records, self.shared.prompt, tokenizer, chat=bool(model["chat"]),
                           chat_kwargs=model.get("chat_template_kwargs"))

    def check(self, stage: Stage, key: str) -> None:
        if stage.overrides:  # else the stage trains on the group as it is, which check_config checks as `sft`
            check_trainer_fields(self.fields(stage), SFTConfig, key)

    def check_lengths(self, stage: Stage, rows, tokenizer) -> None:
        """Prompt + reference completion (+ EOS, as TRL appends it) must fit `max_length`: TRL would cut the answer."""
        max_length = self.fields(stage).get("max_length")
        budget_key = "sft.max_length"
        if "max_length" in stage.overrides:
            budget_key = f"curriculum.stages[{stage.index - 1}].overrides.max_length"
        if max_length is None:  # TRL truncates nothing; the model's context is the limit
            max_length, budget_key = int(self.shared.model["context_length"]), "model.context_length"
        eos = tokenizer.eos_token or ""
        texts = [prompt + completion + ("" if completion.endswith(eos) else eos)
                 for prompt, completion in zip(rows["prompt"], rows["completion"], strict=True)]
        longest = max((len(prompt_ids(text, tokenizer)) for text in texts), default=0)  # as TRL tokenizes
        if longest > int(max_length):
            raise ConfigError(f"{budget_key}: {stage.name} has a prompt and reference completion of {longest} tokens, "
                              f"over the SFT budget of {max_length} (TRL would truncate the reference answer)")

    def has_reference(self, stage: Stage) -> bool:
        return False

    def rollout_engine(self, stage: Stage, rank: int) -> dict | None:
        return None  # SFT generates nothing

    def trainer(self, stage: Stage, ctx: StageContext, rows, output_dir: Path) -> SFTTrainer:
        fields = trainer_fields(self.sft, stage, seed=self.shared.seed, output_dir=output_dir,
                                lora=self.shared.model.get("lora"), config_class=SFTConfig)
        return SFTTrainer(
            model=ctx.init_model,
            args=SFTConfig(**fields, dataset_text_field="text"),
            train_dataset=rows,
            processing_class=AutoTokenizer.from_pretrained(ctx.init_model),
            callbacks=ctx.callbacks,
            peft_config=lora_config(self.shared.model),
        )

    def reference_fingerprint(self, trainer: SFTTrainer) -> str | None:
        return None
