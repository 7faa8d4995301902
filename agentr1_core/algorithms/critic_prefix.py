"""The asymmetric critic's privileged prefix (``critic.prefix``): token ids only the critic reads before a step.

For the critic-based algorithms (PPO, StepPO: step-level GAE) the critic may see what the actor must not: the
row's ground truth, a reference solution. ``critic.prefix`` gives it as

* ``template``: text with ``{name}`` variables over the row's fields. Named variables: ``{ground_truth}``
  (``reward_model.ground_truth``), ``{reference_solution}`` (``extra_info.solution``, else ``extra_info.answer``),
  ``{question}`` (``extra_info.question``, else ``prompt`` when it is text), ``{data_source}``; any other name is a
  dotted path into the row (``{extra_info.expression}``). ``{{`` and ``}}`` are literal braces. Format specs,
  conversions, indexing and positional ``{}`` are errors; or
* ``field``: a dotted path to one field of the row that already holds the prefix text (``""`` is a valid empty
  prefix);

and ``max_tokens`` (default 256), the most tokens one row's prefix may have. Unknown or missing fields, values that
are not text or numbers, and a prefix longer than ``max_tokens`` are errors before the model loads (preflight; one
``ConfigError`` line, exit 2), never silently truncated. So is a prefix with an algorithm that has no critic (GRPO,
RLOO, ReMax ...).

Each training row's prefix is rendered and tokenised once, on its own (``add_special_tokens=False``), when the run
starts: fixed per row across samples, steps and iterations, and made of the row alone, so it holds only what is known
before any action (no reward, no future step). The trainer joins it by token ids in front of the step's own prompt
and response (``batching.critic_view``): nothing is decoded or re-encoded, the separator is the template's own
text. The actor's generation, log-probs, reference and update never see it. Rows are found again through their
``task_id`` (``rollout.driver``), and two rows with one id but different prefixes are an error. The run directory
records the template (or field), ``max_tokens`` and a hash of them in ``critic_prefix.json``.

This module renders and tokenises; the trainers (``trainers.update``, ``trainers.roles``, the verl backend) run the
critic over the joined ids.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from agentr1_core.errors import ConfigError, ModelPathError
from agentr1_core.rollout.driver import task_id

KEY = "critic.prefix"
RECORD_FILE = "critic_prefix.json"
DEFAULT_MAX_TOKENS = 256
# named template variables -> the row paths they are read from, first present one wins
VARIABLES: dict[str, tuple[str, ...]] = {
    "ground_truth": ("reward_model.ground_truth",),
    "reference_solution": ("extra_info.solution", "extra_info.answer"),
    "question": ("extra_info.question", "prompt"),
    "data_source": ("data_source",),
}
_MISSING = object()


def fail(message: str) -> ConfigError:
    return ConfigError(f"config error at {KEY}: {message}")


@dataclass(frozen=True)
class PrefixSpec:
    """``critic.prefix``: a ``template`` or a ``field`` (exactly one), and ``max_tokens``."""

    template: str | None = None
    field: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS

    @classmethod
    def from_config(cls, cfg: Any) -> "PrefixSpec | None":
        """The spec of ``cfg.critic.prefix``, or None when the run has none (neither template nor field)."""
        from omegaconf import OmegaConf

        node = OmegaConf.select(cfg, KEY, default=None)
        if node is None:
            return None
        raw = OmegaConf.to_container(node, resolve=True) if not isinstance(node, dict) else dict(node)
        if not isinstance(raw, dict):
            raise fail(f"must be a mapping with template or field, and max_tokens; got {raw!r}")
        unknown = sorted(set(raw) - {"template", "field", "max_tokens"})
        if unknown:
            raise fail(f"unknown key {unknown[0]!r}; valid: template, field, max_tokens")
        template, field_path = raw.get("template"), raw.get("field")
        if template is None and field_path is None:
            return None
        if template is not None and field_path is not None:
            raise fail("give either template or field, not both")
        if template is not None and not isinstance(template, str):
            raise fail(f"template must be text, got {type(template).__name__}")
        if field_path is not None and (not isinstance(field_path, str) or not field_path.strip()):
            raise fail(f"field must be a dotted path into the row, got {field_path!r}")
        max_tokens = raw.get("max_tokens", DEFAULT_MAX_TOKENS)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise fail(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
        spec = cls(template=template, field=field_path, max_tokens=int(max_tokens))
        if template is not None:
            parse_template(template)
        return spec

    def describe(self) -> dict[str, Any]:
        """What the run directory records: the template or field, ``max_tokens`` and their sha256."""
        body = {"template": self.template, "field": self.field, "max_tokens": self.max_tokens}
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()
        return {**body, "sha256": digest}


def parse_template(template: str) -> list[tuple[str, str | None]]:
    """``[(literal text, variable name or None)]``; raises a ``ConfigError`` for anything but plain ``{name}``."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise fail(f"template is not valid: {exc}") from None
    out = []
    for literal, name, spec, conversion in parts:
        if name is None:
            out.append((literal, None))
            continue
        where = f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}"
        if not name:
            raise fail(f"template variable {where} has no name; write {{ground_truth}}, {{question}} ...")
        if conversion or spec:
            raise fail(f"template variable {where}: conversions and format specs are not allowed")
        if any(c in name for c in "[]") or name[0].isdigit() or any(not p for p in name.split(".")):
            raise fail(f"template variable {where}: use a variable name or a dotted path into the row")
        out.append((literal, name))
    return out


def lookup(row: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of ``row`` (mappings only), or ``_MISSING``."""
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def scalar_text(value: Any, what: str) -> str:
    """``value`` as prefix text: text as it is, numbers and booleans as ``str``; anything else is an error."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    if value is None or value is _MISSING:
        raise ValueError(f"{what} is missing")
    raise ValueError(f"{what} is a {type(value).__name__}, not text or a number")


def variable(row: dict[str, Any], name: str) -> str:
    paths = VARIABLES.get(name, (name,))
    for path in paths:
        value = lookup(row, path)
        if value is _MISSING or value is None:
            continue
        if name == "question" and path == "prompt" and not isinstance(value, str):
            continue  # a chat-message prompt is not a question text
        return scalar_text(value, f"{{{name}}} ({path})")
    known = ", ".join(sorted(VARIABLES))
    hint = f"; named variables: {known}" if name not in VARIABLES else ""
    raise ValueError(f"{{{name}}} is missing (looked for {' / '.join(paths)}){hint}")


def render(spec: PrefixSpec, row: dict[str, Any]) -> str:
    """The prefix text of one dataset row (``ValueError`` naming what is wrong)."""
    if spec.field is not None:
        return scalar_text(lookup(row, spec.field), f"field {spec.field!r}")
    return "".join(literal + (variable(row, name) if name is not None else "")
                   for literal, name in parse_template(spec.template or ""))


def tokenize(tokenizer: Any, text: str) -> list[int]:
    """The prefix text's token ids, encoded on their own (no special tokens)."""
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


class CriticPrefixes:
    """Every training row's prefix token ids, by ``task_id``; ``attach`` gives them to step rows."""

    def __init__(self, spec: PrefixSpec, by_task: dict[str, list[int]]) -> None:
        self.spec = spec
        self.by_task = by_task

    @classmethod
    def build(cls, spec: PrefixSpec, tokenizer: Any, rows: Sequence[dict[str, Any]]) -> "CriticPrefixes":
        """Render and tokenise the prefix of every row (a ``ConfigError`` naming the first bad row)."""
        by_task: dict[str, list[int]] = {}
        first_row: dict[str, int] = {}
        for i, row in enumerate(rows):
            tid = task_id(row)
            try:
                ids = tokenize(tokenizer, render(spec, row))
            except ValueError as exc:
                raise fail(f"training row {i} (task {tid}): {exc}") from None
            if len(ids) > spec.max_tokens:
                raise fail(f"training row {i} (task {tid}): the prefix has {len(ids)} tokens, more than "
                           f"max_tokens={spec.max_tokens} (it is never cut; shorten it or raise max_tokens)")
            if tid in by_task and by_task[tid] != ids:
                raise fail(f"training rows {first_row[tid]} and {i} share the task id {tid!r} but give different "
                           "prefixes; give each row its own 'id'")
            by_task.setdefault(tid, ids)
            first_row.setdefault(tid, i)
        return cls(spec, by_task)

    def ids_for(self, trajectory: Any) -> list[int]:
        tid = trajectory.info.get("task_id")
        if tid not in self.by_task:
            raise KeyError(f"{KEY}: episode {trajectory.uid!r} has task id {tid!r}, which is no training row's")
        return self.by_task[tid]

    def attach(self, rows: Sequence[Any], trajectories: Sequence[Any]) -> dict[str, float]:
        """Set ``critic_prefix_ids`` of every step row (``row.traj`` indexes ``trajectories``); returns metrics."""
        lengths = []
        for row in rows:
            row.critic_prefix_ids = list(self.ids_for(trajectories[row.traj]))
            lengths.append(len(row.critic_prefix_ids))
        return {"critic_prefix_tokens_mean": sum(lengths) / len(lengths) if lengths else 0.0}

    def stats(self) -> dict[str, float]:
        lengths = [len(v) for v in self.by_task.values()]
        return {"rows": float(len(lengths)), "tokens_mean": sum(lengths) / max(1, len(lengths)),
                "tokens_max": float(max(lengths, default=0))}

    def record(self, run_dir: Path) -> Path:
        """Write ``critic_prefix.json`` (template or field, ``max_tokens``, sha256, token counts) in ``run_dir``."""
        path = Path(run_dir) / RECORD_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**self.spec.describe(), **self.stats()}, indent=2), encoding="utf-8")
        return path

    def line(self) -> str:
        """One line for the ``[setup]`` message."""
        s, d = self.stats(), self.spec.describe()
        return (f"critic prefix {d['sha256'][:12]} on {int(s['rows'])} rows ({s['tokens_mean']:.0f} tokens mean, "
                f"{int(s['tokens_max'])} max)")


def check_combination(spec: PrefixSpec | None, algorithm: Any, name: str) -> None:
    """A prefix needs a critic: a critic-free estimator with one is a ``ConfigError``."""
    if spec is not None and not bool(getattr(algorithm, "needs_critic", False)):
        raise fail(f"algorithm {name!r} has no critic, so nothing would read the prefix; use a critic-based "
                   "algorithm (ppo, steppo) or remove critic.prefix")


def load_tokenizer(path: str) -> Any:
    """The tokenizer of ``model.path`` alone (no model weights; ``models.load_tokenizer``), its failure one line."""
    from agentr1_core import models

    try:
        return models.load_tokenizer(path)
    except (ModelPathError, OSError, ValueError, ImportError) as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise fail(f"cannot load the tokenizer of model.path {path!r} to count the prefix tokens: {first}") from None


def critic_prefixes(cfg: Any, algorithm: Any, rows: Sequence[dict[str, Any]],
                    tokenizer: Any = None) -> CriticPrefixes | None:
    """Everything ``critic.prefix`` needs checked, at preflight and again when a backend builds: the spec, the
    algorithm has a critic, every training row renders within ``max_tokens``. None when the run has no prefix."""
    from omegaconf import OmegaConf

    spec = PrefixSpec.from_config(cfg)
    if spec is None:
        return None
    check_combination(spec, algorithm, str(OmegaConf.select(cfg, "algorithm.name", default="?")))
    if tokenizer is None:
        tokenizer = load_tokenizer(str(cfg.model.path))
    return CriticPrefixes.build(spec, tokenizer, rows)
