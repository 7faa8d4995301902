"""Build a small distillation student from a teacher: the teacher's first ``num_layers`` decoder blocks, its
embeddings, final norm and output layer, and its tokenizer, saved as a plain Hugging Face folder.

The student therefore shares the teacher's tokenizer exactly (what ``opd`` requires) and starts far from the teacher
(a 30-block model cut to 6 blocks predicts poorly), which makes distillation progress easy to see. The construction
is deterministic: no random initialisation is involved, so the same teacher always gives the same student.

CLI: ``agentr1-core opd-student --teacher smollm2-135m-instruct --layers 6 --out runs/opd-student``. This module
does not train anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_TEACHER = "smollm2-135m-instruct"
DEFAULT_LAYERS = 6
MARKER = "opd_student.json"


def _blocks_owner(model: Any) -> Any:
    base = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", model)
    if getattr(base, "layers", None) is None:
        raise ValueError("make_student needs a decoder-only model with its blocks at model.model.layers")
    return base


def truncate_model(model: Any, num_layers: int) -> Any:
    """Keep the first ``num_layers`` decoder blocks of ``model`` in place (config updated) and return it."""
    import torch

    base = _blocks_owner(model)
    total = len(base.layers)
    if not 1 <= num_layers <= total:
        raise ValueError(f"num_layers must be between 1 and {total} (the teacher's block count), got {num_layers}")
    base.layers = torch.nn.ModuleList(list(base.layers)[:num_layers])
    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    text_config.num_hidden_layers = num_layers
    if getattr(text_config, "layer_types", None):
        text_config.layer_types = list(text_config.layer_types)[:num_layers]
    return model


def make_student(out: str | os.PathLike, teacher: str = DEFAULT_TEACHER, num_layers: int = DEFAULT_LAYERS,
                 overwrite: bool = False) -> Path:
    """Write the student to ``out`` (atomically) and return the folder. An existing student made from the same
    teacher and layer count is kept as it is unless ``overwrite``; a different one is an error."""
    from agentr1_core.models import load_model_and_tokenizer

    target = Path(out)
    recipe = {"teacher": teacher, "num_layers": int(num_layers)}
    marker = target / MARKER
    if target.exists() and not overwrite:
        if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == recipe:
            return target
        raise FileExistsError(f"{target} exists and is not a student of {recipe}; pass overwrite=True (--overwrite)")
    model, tokenizer = load_model_and_tokenizer(teacher, dtype="float32", device="cpu")
    truncate_model(model, int(num_layers))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps(recipe), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--teacher", default=DEFAULT_TEACHER, help="teacher model id, path or alias")
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS, help="decoder blocks the student keeps")
    parser.add_argument("--out", default="runs/opd-student", help="folder to write the student to")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    parser.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    path = make_student(args.out, teacher=args.teacher, num_layers=args.layers, overwrite=args.overwrite)
    print(f"student ({args.layers} blocks of {args.teacher}) in {path}")
    return 0
