"""Everything a run checks before the model loads, in one call: ``preflight(cfg, registry)``.

In order: config values (``validation.check_values``), the model path (``models.check_model_path``), component
names and parameters (``components.check_components``: with the key path, and why a name is not installed), then the
light components are built once: the datasets (``data.train`` must give rows), whose every row is checked against
what the dataset, the reward and the env declare they read from it (``rows``: a missing field, a misspelled
``env_kwargs`` key, with the file and line), then the reward, the algorithm and the env (with its tools, for the
first training row). Any failure is a ``ConfigError`` of one line per problem naming the key path or the row, so a
missing corpus, catalogue or ground truth stops the run in seconds instead of turning every episode into an env
error or a wrong reward.

The dataset rows loaded here are handed to the local trainer (``take_rows``) instead of being read twice. Nothing
here loads a model or starts an engine.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from agentr1_core.algorithms.critic_prefix import critic_prefixes
from agentr1_core.components import build_reward_fn, check_components
from agentr1_core.config import component
from agentr1_core.errors import ConfigError, failed_to_start, one_line
from agentr1_core.kinds import RESERVED
from agentr1_core.plugins import Registry
from agentr1_core.rows import RowNeed, declared_fields, row_problems

_rows: dict[tuple[str, str], list[dict[str, Any]]] = {}


@contextmanager
def at_key(key: str, name: str = "") -> Iterator[None]:
    """Turn any exception raised while building the component at ``key`` into a one-line ``ConfigError``; with the
    component's ``name`` (``"env 'webshop'"``), a constructor that raised is named: ``... failed to start: ...``."""
    try:
        yield
    except Exception as exc:
        if name:
            raise failed_to_start(key, name, exc) from exc
        message = one_line(exc)
        if isinstance(exc, ConfigError) and message.startswith("config error"):
            raise ConfigError(message) from exc
        raise ConfigError(f"config error at {key}: {message}") from exc


def _rows_key(name: str, params: dict[str, Any]) -> tuple[str, str]:
    return name, json.dumps(params, sort_keys=True, default=str)


def load_rows(cfg: DictConfig, registry: Registry, key: str, keep: bool = True) -> list[dict[str, Any]]:
    """The rows of the dataset at ``key`` (``data.train`` / ``data.val``), kept for ``take_rows`` when ``keep``."""
    name, params = component(cfg, key)
    with at_key(key):
        rows = registry.build("dataset", name, params, where=key)
        rows = rows if isinstance(rows, list) else list(rows)
    if keep:
        _rows[_rows_key(name, params)] = rows
    return rows


def take_rows(name: str, params: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Rows that ``preflight`` already loaded for this dataset (handed over once), or None."""
    return _rows.pop(_rows_key(name, params), None)


def build_env_once(cfg: DictConfig, registry: Registry, row: dict[str, Any] | None) -> None:
    env_cfg = OmegaConf.to_container(cfg.env, resolve=True)
    assert isinstance(env_cfg, dict)
    name = str(env_cfg.pop("name"))
    env_cfg.update((row or {}).get("env_kwargs") or {})
    with at_key("env", f"env {name!r}"):
        env = registry.build("env", name, env_cfg, where="env")
        close = getattr(env, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                asyncio.run(result)


def row_needs(cfg: DictConfig, registry: Registry, key: str) -> tuple[list[RowNeed], str, frozenset[str] | None]:
    """What every row of the dataset at ``key`` must carry for this run: the fields its dataset, the reward and the
    env declare (``row_fields``), the env (``"env 'NAME'"``) and the keys a row's ``env_kwargs`` may set (the env's
    keyword parameters; None when it takes any)."""
    chosen = [("dataset", key)] + [(kind, kind) for kind in ("reward", "env")
                                   if OmegaConf.select(cfg, kind) is not None]
    needs: list[RowNeed] = []
    for kind, at in chosen:
        name, _ = component(cfg, at)
        needs += [RowNeed(f, f"{kind} {name!r}") for f in declared_fields(registry.get(kind, name))]
    env, _ = component(cfg, "env")
    spec = registry.get("env", env)
    params = None if spec.accepts_any_keyword() else frozenset(spec.parameters()) - RESERVED["env"]
    return needs, f"env {env!r}", params


def check_rows(cfg: DictConfig, registry: Registry, datasets: dict[str, list[dict[str, Any]]]) -> None:
    """Every row of ``datasets`` (``{config key: rows}``) against ``row_needs``: one line per distinct problem."""
    lines = []
    for key, rows in datasets.items():
        needs, env, params = row_needs(cfg, registry, key)
        lines += row_problems(rows, needs, key, env, params)
    if lines:
        raise ConfigError("\n".join(lines))


def turn_cap_note(cfg: DictConfig) -> str | None:
    """A note when the env's own ``max_turns`` is larger than ``rollout.max_turns``: the agent loop stops an episode
    at ``rollout.max_turns`` turns (termination ``max_turns``), so the env's larger cap is never reached."""
    env_turns = OmegaConf.select(cfg, "env.max_turns", default=None)
    flow_turns = int(cfg.rollout.max_turns)
    if isinstance(env_turns, int) and not isinstance(env_turns, bool) and env_turns > flow_turns:
        return (f"note: rollout.max_turns={flow_turns} ends episodes before env.max_turns={env_turns} is reached "
                f"(an episode ends at whichever cap comes first)")
    return None


def preflight(cfg: DictConfig, registry: Registry, keep_rows: bool = True, build: bool = True) -> None:
    """Check ``cfg`` fully before anything heavy; raise a ``ConfigError`` (one line per problem) at the first stage
    that finds one."""
    from agentr1_core.models import check_model_path
    from agentr1_core.validation import check_values

    check_values(cfg)
    check_model_path(str(cfg.model.path))
    check_components(cfg, registry)
    if not build:
        return
    train = load_rows(cfg, registry, "data.train", keep_rows)
    if not train:
        raise ConfigError("config error at data.train: the dataset produced no rows")
    datasets = {"data.train": train}
    if OmegaConf.select(cfg, "data.val") is not None:
        datasets["data.val"] = load_rows(cfg, registry, "data.val", keep_rows)
    check_rows(cfg, registry, datasets)
    if OmegaConf.select(cfg, "reward") is not None:
        with at_key("reward", f"reward {component(cfg, 'reward')[0]!r}"):
            build_reward_fn(cfg, registry)
    name, params = component(cfg, "algorithm")
    with at_key("algorithm", f"algorithm {name!r}"):
        algorithm = registry.build("algorithm", name, params, where="algorithm")
    critic_prefixes(cfg, algorithm, train)  # critic.prefix: a critic reads it, every training row within max_tokens
    build_env_once(cfg, registry, train[0])
    note = turn_cap_note(cfg)
    if note:
        print(f"[config] {note}", flush=True)
