"""The Hydra config root (also importable, so tests and other apps compose the same files)."""

from pathlib import Path

from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parent


def register_resolvers() -> None:
    """Resolvers the configs use: `kk_run_dir` picks `resume` when set, else a fresh run directory."""
    OmegaConf.register_new_resolver("kk_run_dir", lambda resume, fresh: resume or fresh, replace=True)
