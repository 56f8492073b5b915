"""The plumbing below `curriculum/`, `train/` and `eval/`: model resolution and loading, device and
CPU-thread settings, and the run-directory contract (`core/rundir/`). It imports none of the three."""
