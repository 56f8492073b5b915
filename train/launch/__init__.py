"""`launch=`: a Hydra job that starts its run's processes (torchrun, accelerate, one per GPU)."""
