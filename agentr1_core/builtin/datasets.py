"""Built-in dataset loaders. A loader returns a list of rows: dicts with ``prompt`` (text or chat messages),
``data_source``, ``reward_model: {ground_truth: ...}``, optional ``env_kwargs`` and ``expert_actions``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from agentr1_core.config import ConfigError


def load_jsonl(path: str = "", limit: int = 0, data_source: str = "") -> list[dict[str, Any]]:
    """Rows from a JSONL file, one JSON object per line; a bad line is an error naming the file and line."""
    if not path:
        raise ConfigError("config error at data: the jsonl dataset needs a path")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"dataset file not found: {file}")
    rows = []
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{file}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(row, dict) or "prompt" not in row:
                raise ConfigError(f"{file}:{lineno}: each row needs a 'prompt'")
            if data_source:
                row.setdefault("data_source", data_source)
            rows.append(row)
            if limit and len(rows) >= limit:
                break
    return rows
