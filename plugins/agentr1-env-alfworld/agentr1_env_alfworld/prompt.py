"""The per-step context the ALFWorld env shows the model, and how a reply becomes a game command.

The context is rebuilt every step (never appended to), so its length stays flat as an episode grows: a system
message with the rules, then one user message with the task, the room as first seen (unless it is left out), the last
``history`` actions with what they produced, and the commands admissible now. The reply is a plain command;
``parse_command`` keeps its first non-empty line, drops a leading ``>`` or ``Action:`` and surrounding quotes, and
lower-cases it. It does not check the command against the admissible list (the game answers "Nothing happens." to
an invalid one).
"""

from __future__ import annotations

import re
from typing import Any

DEFAULT_SYSTEM_PROMPT = (
    "You are a household robot in a text game. Each turn you see your task, what happened recently and the "
    "commands you can use now. Reply with exactly one command from the list, copied as written, and nothing else."
)

_TASK = re.compile(r"Your task is to:\s*(.+)", re.IGNORECASE)
_BANNER = re.compile(r"^-=.*?=-\s*", re.DOTALL)
_PREFIX = re.compile(r"^(?:>\s*|(?:action|command|next command)\s*:\s*)", re.IGNORECASE)


def split_intro(feedback: str) -> tuple[str, str]:
    """``(task, room)`` from the game's opening text: the "Your task is to: ..." line and the description."""
    match = _TASK.search(feedback)
    task = match.group(1).strip() if match else ""
    room = _TASK.sub("", feedback)
    room = _BANNER.sub("", room.strip()).strip()
    return task, room


def parse_command(text: str) -> str:
    """The game command in a model reply (see the module docstring)."""
    for line in text.strip().splitlines():
        line = line.strip()
        if line:
            break
    else:
        return ""
    line = _PREFIX.sub("", line).strip()
    line = line.strip("`\"'").strip()
    line = line.rstrip(".").strip()
    return " ".join(line.split()).lower()


def render_user_message(task: str, room: str, history: list[tuple[str, str]], admissible: list[str],
                        step: int, max_steps: int) -> str:
    parts = [f"Your task is to: {task}"] + ([f"At the start: {room}"] if room else [])
    if history:
        lines = []
        for command, feedback in history:
            lines.append(f"> {command}\n{feedback}")
        parts.append("Your most recent actions and what happened:\n" + "\n".join(lines))
    parts.append(f"Step {step + 1} of {max_steps}. Commands you can use now:\n" + "\n".join(admissible))
    parts.append("Reply with one command.")
    return "\n\n".join(parts)


def render_messages(system_prompt: str, user: str) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": user}]
