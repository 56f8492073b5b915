"""The curriculum run: the stage loop, what a resume decides, the finals, what ends a stage early, the
run's size (run.json itself: core/rundir/manifest.py)."""
