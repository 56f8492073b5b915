"""The curriculum run: the stage loop, run.json, what a resume decides, the finals, what ends a
stage early, the run's size."""
