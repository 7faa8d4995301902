"""The task of the ``time-mcp`` config: time-zone conversions answered with the third-party ``mcp-server-time``
server's ``convert_time`` tool.

Every zone here keeps one UTC offset all year (no daylight saving time), so an answer does not depend on the date
of the run (the server converts on today's date). Each row: ``prompt`` (a question), ``reward_model.ground_truth``
(``HH:MM``, 24-hour), ``expert_actions`` (one ``convert_time`` call, then ``<answer>HH:MM</answer>``).
"""

from __future__ import annotations

import json
import random
from typing import Any

from agentr1_core.errors import ConfigError

OFFSETS = {  # minutes east of UTC, the same all year
    "UTC": 0, "Africa/Lagos": 60, "Africa/Johannesburg": 120, "Africa/Nairobi": 180, "Asia/Dubai": 240,
    "Asia/Karachi": 300, "Asia/Kolkata": 330, "Asia/Kathmandu": 345, "Asia/Dhaka": 360, "Asia/Jakarta": 420,
    "Asia/Shanghai": 480, "Asia/Singapore": 480, "Asia/Tokyo": 540, "Asia/Seoul": 540, "Australia/Brisbane": 600,
    "America/Sao_Paulo": -180, "America/Bogota": -300, "America/Lima": -300, "America/Phoenix": -420,
    "Pacific/Honolulu": -600,
}
TEMPLATES = (
    "It is {time} in {source}. What time is it in {target}?",
    "A call is set for {time} {source} time. What time is that in {target}?",
    "Convert {time} from {source} to {target}.",
    "The shop in {source} opens at {time}. What time is that for a customer in {target}?",
)


def converted(time: str, source: str, target: str) -> str:
    """``time`` (HH:MM) in ``source`` as the wall-clock time in ``target``."""
    hours, minutes = map(int, time.split(":"))
    total = (hours * 60 + minutes - OFFSETS[source] + OFFSETS[target]) % (24 * 60)
    return f"{total // 60:02d}:{total % 60:02d}"


def time_conversion_rows(split: str = "train", train_size: int = 512, val_size: int = 64,
                         seed: int = 0) -> list[dict[str, Any]]:
    """One seeded stream of distinct questions cut into ``train`` (the first ``train_size``) and ``val`` (the next
    ``val_size``): the splits never share a question."""
    if split not in ("train", "val"):
        raise ConfigError(f"config error at data: time_conversions split must be 'train' or 'val', got {split!r}")
    rng = random.Random(seed)
    zones = sorted(OFFSETS)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    while len(rows) < train_size + val_size:
        source, target = rng.sample(zones, 2)
        time = f"{rng.randrange(24):02d}:{rng.randrange(0, 60, 5):02d}"
        question = rng.choice(TEMPLATES).format(time=time, source=source, target=target)
        if question in seen:
            continue
        seen.add(question)
        answer = converted(time, source, target)
        call = json.dumps({"name": "convert_time",
                           "arguments": {"source_timezone": source, "time": time, "target_timezone": target}})
        rows.append({
            "prompt": question,
            "data_source": "time_conversions",
            "reward_model": {"ground_truth": answer},
            "expert_actions": [f"<tool_call>{call}</tool_call>", f"<answer>{answer}</answer>"],
            "extra_info": {"source": source, "target": target, "time": time, "index": len(rows)},
        })
    return rows[:train_size] if split == "train" else rows[train_size:]
