"""The stage kinds (`kind: grpo`, `kind: sft`) and what every kind shares: its inputs, its trainer's
fields, train -> publish, the trainer checkpoints a resume reads."""
