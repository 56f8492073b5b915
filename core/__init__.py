"""The plumbing below `curriculum/`, `train/` and `eval/`: model resolution and loading, device and
CPU-thread settings, JSONL files and the run-directory contract. It imports none of the three."""
