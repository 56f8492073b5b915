"""Whether a checkpoint folder's weights are those of the architecture its config.json names, read before it loads
(else it loads at random and is validated as if trained): the safetensors headers against the model built on the
meta device; extra weights pass, a folder without safetensors files is the loader's.
"""

from __future__ import annotations

from pathlib import Path

from core.checks import ConfigError
from core.parse_limits import parse_json

SINGLE_FILE, INDEX = "model.safetensors", "model.safetensors.index.json"


def file_weights(folder: Path) -> dict[str, tuple[int, ...]] | None:
    """Each weight's name and shape from the folder's safetensors headers; None where it holds none."""
    from safetensors import safe_open

    if (folder / INDEX).is_file():
        files = sorted(set(parse_json((folder / INDEX).read_text(), str(folder / INDEX))["weight_map"].values()))
    elif (folder / SINGLE_FILE).is_file():
        files = [SINGLE_FILE]
    else:
        return None
    shapes = {}
    for name in files:
        with safe_open(str(folder / name), framework="pt") as fh:
            names = fh.keys()  # a safetensors file's header, not a dict: it has no `in`
            shapes.update({key: tuple(fh.get_slice(key).get_shape()) for key in names})
    return shapes


def model_weights(folder: Path) -> tuple[dict[str, tuple[int, ...]], set[str], str]:
    """The weights (name: shape), tied names and class of the model config.json builds; ConfigError if none."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(folder)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError) as err:  # a config of no architecture transformers builds as a causal LM
        said = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"model={folder}: its config.json builds no causal language model ({said[:200]})") from None
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, set(tied), type(model).__name__


def check_weights_match(folder: str | Path) -> None:
    """Refuse (ConfigError) a folder whose files lack weights its config.json's model needs, or misshape them."""
    folder = Path(folder)
    held = file_weights(folder)
    if held is None:
        return
    needed, tied, built = model_weights(folder)
    prefix = next((p for p in _prefixes(needed) if held and not any(k.startswith(p) for k in held)), "")
    held = {f"{prefix}{k}": v for k, v in held.items()} if prefix else held  # a base model's weights, unprefixed
    missing = [k for k in needed if k not in held and k not in tied]
    mismatched = [k for k in needed if k in held and held[k] != needed[k]]
    if not (missing or mismatched):
        return
    unexpected = len([k for k in held if k not in needed])
    first = (missing or mismatched)[0]
    raise ConfigError(
        f"model={folder}: its weights are not those of the {built} its config.json builds: {len(missing)} of "
        f"{len(needed)} weights missing, {len(mismatched)} of another shape, {unexpected} unexpected (first: "
        f"{first}); loaded, it would be validated at random: put the config.json saved with these weights back")


def _prefixes(needed: dict) -> list[str]:
    """`model.`-like prefixes every needed weight of the body starts with (a base model saved alone lacks them)."""
    heads = {k.split(".", 1)[0] for k in needed if "." in k}
    return [f"{head}." for head in sorted(heads) if sum(k.startswith(f"{head}.") for k in needed) > len(needed) // 2]
