"""Everything a run checks before the model loads, in one call that reports every problem at once:
``preflight(cfg, registry) -> Checked``.

The checks, each one's problems collected before the next runs:

1. the problems the config loader already found (unknown keys, overrides of the wrong type: ``config.load_config``
   with ``problems=``), the config's values (``validation.value_problems``), the trackers of ``logging.trackers``
   (each a known name whose package is installed: ``lifecycle.trackers.tracker_problems``), the model path, the
   names in ``plugins.allow`` / ``plugins.block`` (each must be an installed plugin), every component's name and
   parameters (``components.component_problems``); the tool sources ``env.tools`` names (``mcp:calc``), started as
   the run starts them, their tools listed, and two tools of one name (``tool_sources``);
2. the datasets of the components that passed (``data.train``, ``data.val``): every line of a rows file that is not
   a JSON object (``agentr1_core.jsonl``), and every row against what the dataset, the reward and the env declare
   they read (``rows``), the tools a row names and the tool calls of its expert (``tool_rows``);
3. the light components built once: the reward, the algorithm (with ``critic.prefix`` over the training rows) and
   the env (with its tools, for the first training row).

A component whose own check failed is not built, so one mistake is reported once, not again by everything that
depends on it. If anything was found, one ``ConfigError`` is raised with one line per problem (the CLI prints each
and exits with code 2) before any model is loaded or engine started. Otherwise the rows read here are returned
(``Checked.rows``) for the trainer, which does not read the datasets again.
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from agentr1_core.components import build_reward_fn, component, component_problems
from agentr1_core.errors import ConfigError, UserError, failed_to_start, one_line
from agentr1_core.jsonl import JsonlError, capped
from agentr1_core.kinds import RESERVED
from agentr1_core.plugins import Registry
from agentr1_core.rows import RowNeed, declared_fields, row_problems
from agentr1_core.tool_rows import tool_row_check
from agentr1_core.tool_sources import check_references, close_all, tool_entries

MAX_LINES = 40  # problem lines printed in all; the count of the others follows


@dataclass
class Checked:
    """What a run that passed its checks hands its trainer: the rows of ``data.train`` and ``data.val`` by key."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


class Problems(list):
    """The problem lines found so far; ``at(key)`` turns what a block raises into one line for ``key``."""

    @contextmanager
    def at(self, key: str, name: str = "") -> Iterator[None]:
        """Record any exception raised in the block as one line: ``config error at KEY: ...``; with the component's
        ``name`` (``"env 'webshop'"``), a constructor that raised is named: ``... failed to start: ...``."""
        try:
            yield
        except Exception as exc:
            self.append(str(failed_to_start(key, name, exc)) if name else _at_key(key, exc))

    def raise_if_any(self) -> None:
        if self:
            raise ConfigError("\n".join(capped(list(dict.fromkeys(self)), MAX_LINES,
                                               "... and {more} more problems")))


def _at_key(key: str, exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    if isinstance(exc, UserError) and len(lines) > 1:  # several problems already written out: keep each line
        return "\n".join(lines)
    message = one_line(exc)
    return message if message.startswith("config error") else f"config error at {key}: {message}"


def load_rows(cfg: DictConfig, registry: Registry, key: str,
              found: Problems | None = None) -> list[dict[str, Any]] | None:
    """The rows of the dataset at ``key``; lines a rows file could not give are added to ``found`` and the rows it
    could give are returned (so that their own problems are found too). None when the loader failed. Without
    ``found``, any problem is raised."""
    problems = found if found is not None else Problems()
    name, params = component(cfg, key)
    rows: list[dict[str, Any]] | None
    try:
        built = registry.build("dataset", name, params, where=key)
        rows = built if isinstance(built, list) else list(built)
    except JsonlError as exc:
        problems.extend(exc.problems)
        rows = exc.rows
    except Exception as exc:
        problems.append(_at_key(key, exc))
        rows = None
    if found is None:
        problems.raise_if_any()
    return rows


def row_needs(cfg: DictConfig, registry: Registry, key: str, bad: set[str]) -> tuple[list[RowNeed], str, Any]:
    """What every row of the dataset at ``key`` must carry for this run: the fields its dataset, the reward and the
    env declare (``row_fields``; a component whose own check failed declares nothing), the env
    (``"env 'NAME'"``) and the keys a row's ``env_kwargs`` may set (the env's keyword parameters; None when it takes
    any or is unknown)."""
    chosen = [("dataset", key)] + [(kind, kind) for kind in ("reward", "env")
                                   if OmegaConf.select(cfg, kind) is not None]
    needs: list[RowNeed] = []
    for kind, at in chosen:
        if at in bad:
            continue
        name, _ = component(cfg, at)
        needs += [RowNeed(f, f"{kind} {name!r}") for f in declared_fields(registry.get(kind, name))]
    env, _ = component(cfg, "env")
    if "env" in bad:
        return needs, f"env {env!r}", None
    spec = registry.get("env", env)
    params = None if spec.accepts_any_keyword() else frozenset(spec.parameters()) - RESERVED["env"]
    return needs, f"env {env!r}", params


def build_env_once(cfg: DictConfig, registry: Registry, row: dict[str, Any] | None, found: Problems) -> Any:
    """The env built for ``row`` (its ``env_kwargs`` over the config) and closed again, or None when it failed
    (the failure is added to ``found``)."""
    env_cfg = OmegaConf.to_container(cfg.env, resolve=True)
    assert isinstance(env_cfg, dict)
    name = str(env_cfg.pop("name"))
    kwargs = (row or {}).get("env_kwargs")
    env_cfg.update(kwargs if isinstance(kwargs, dict) else {})
    with found.at("env", f"env {name!r}"):
        env = registry.build("env", name, env_cfg, where="env")
        close = getattr(env, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                asyncio.run(result)
        return env
    return None


def turn_cap_note(cfg: DictConfig) -> str | None:
    """A note when the env's own ``max_turns`` is larger than ``rollout.max_turns``: the agent loop stops an episode
    at ``rollout.max_turns`` turns (termination ``max_turns``), so the env's larger cap is never reached."""
    env_turns = OmegaConf.select(cfg, "env.max_turns", default=None)
    flow_turns = int(cfg.rollout.max_turns)
    if isinstance(env_turns, int) and not isinstance(env_turns, bool) and env_turns > flow_turns:
        return (f"note: rollout.max_turns={flow_turns} ends episodes before env.max_turns={env_turns} is reached "
                f"(an episode ends at whichever cap comes first)")
    return None


def _config_problems(cfg: DictConfig, registry: Registry, found: Problems) -> set[str]:
    """Values, trackers, model path, plugin lists and components; returns the keys of the components that failed."""
    from agentr1_core.lifecycle.trackers import tracker_problems
    from agentr1_core.models import model_path_problem
    from agentr1_core.validation import value_problems

    found.extend(value_problems(cfg))
    found.extend(tracker_problems(cfg))
    with found.at("model.path"):
        problem = model_path_problem(str(cfg.model.path))
        if problem:
            found.append(f"config error at model.path: {problem}")
    found.extend(registry.list_problems(cfg.plugins.allow or [], cfg.plugins.block or []))
    bad = component_problems(cfg, registry)
    found.extend(bad.values())
    return {key.partition("[")[0] for key in bad}


def _load_datasets(cfg: DictConfig, registry: Registry, bad: set[str],
                   found: Problems) -> dict[str, list[dict[str, Any]]]:
    datasets: dict[str, list[dict[str, Any]]] = {}
    for key in ("data.train", "data.val"):
        if OmegaConf.select(cfg, key) is None or key in bad:
            continue
        before = len(found)
        rows = load_rows(cfg, registry, key, found)
        if rows is None:
            continue
        if key == "data.train" and not rows and len(found) == before:
            found.append("config error at data.train: the dataset produced no rows")
        datasets[key] = rows
    return datasets


def row_check_problems(cfg: DictConfig, registry: Registry, datasets: dict[str, list[dict[str, Any]]],
                       bad: set[str] = frozenset(), env: Any = None) -> list[str]:
    """The problems of the rows of ``datasets`` (``{config key: rows}``): the fields the components read, the keys of
    ``env_kwargs``, and with ``env`` (built once) the tools the rows name and their expert's calls."""
    found = Problems()
    first = (datasets.get("data.train") or [None])[0]
    kwargs = first.get("env_kwargs") if isinstance(first, dict) else None
    row_tools = isinstance(kwargs, dict) and "tools" in kwargs
    config_tools = (OmegaConf.to_container(cfg.env, resolve=True) or {}).get("tools")
    replays = "sft" in [str(s) for s in cfg.stages] and _flow_plays_the_env(cfg, registry, bad)
    for key, rows in datasets.items():
        needs, env_name, params = row_needs(cfg, registry, key, bad)
        check = None
        if env is not None and "env.tools" not in bad:
            check = tool_row_check(registry, env, config_tools, row_tools,
                                   check_expert=replays and key == "data.train")
        found.extend(row_problems(rows, needs, key, "" if "env" in bad else env_name, params,
                                  [check] if check is not None else []))
    return found


def _flow_plays_the_env(cfg: DictConfig, registry: Registry, bad: set[str]) -> bool:
    """Whether the agent flow plays the env's actions (``AgentEnvLoop`` and its subclasses): then a row's expert
    actions are the env's tool calls. Another flow (an OpenAI-client agent) gives them to its own code."""
    from agentr1_core.flows import AgentEnvLoop

    if "agent_flow" in bad:
        return False
    factory = registry.load("agent_flow", component(cfg, "agent_flow")[0])
    return isinstance(factory, type) and issubclass(factory, AgentEnvLoop)


def check_rows(cfg: DictConfig, registry: Registry, datasets: dict[str, list[dict[str, Any]]]) -> None:
    """Raise one ``ConfigError`` with every problem of the rows of ``datasets`` (``row_check_problems``)."""
    found = Problems(row_check_problems(cfg, registry, datasets))
    found.raise_if_any()


def preflight(cfg: DictConfig, registry: Registry, build: bool = True,
              problems: list[str] | None = None) -> Checked:
    """Check ``cfg`` fully before anything heavy and raise one ``ConfigError`` listing every problem found (those of
    the config loader given as ``problems`` first). ``build=False`` stops after the config's own checks (names,
    values, parameters: what ``config show`` makes). Tool sources started by the checks are stopped again: the
    processes that play episodes start their own."""
    found = Problems(problems or [])
    bad = _config_problems(cfg, registry, found)
    if not build:
        found.raise_if_any()
        return Checked()
    try:
        datasets = _build_and_check(cfg, registry, bad, found)
    finally:
        close_all()
    found.raise_if_any()
    note = turn_cap_note(cfg)
    if note:
        print(f"[config] {note}", flush=True)
    return Checked(datasets)


def _build_and_check(cfg: DictConfig, registry: Registry, bad: set[str],
                     found: Problems) -> dict[str, list[dict[str, Any]]]:
    """The tools, the datasets and their rows, and the light components built once (steps 1 to 3 above)."""
    if not {"env", "env.tools"} & bad and not set(registry.names("tool_source")) & bad:
        with found.at("env.tools"):  # tool sources started as the run starts them, their tools listed
            problems_of_tools, listing = check_references(cfg, registry, tool_entries(cfg))
            for line in listing:
                print(line, flush=True)
            found.extend(problems_of_tools)
            if problems_of_tools:
                bad.add("env.tools")
    datasets = _load_datasets(cfg, registry, bad, found)
    env = None
    if not {"env", "env.tools"} & bad:  # built for the first training row, with its env_kwargs
        env = build_env_once(cfg, registry, (datasets.get("data.train") or [None])[0], found)
    found.extend(row_check_problems(cfg, registry, datasets, bad, env))
    if OmegaConf.select(cfg, "reward") is not None and "reward" not in bad:
        with found.at("reward", f"reward {component(cfg, 'reward')[0]!r}"):
            build_reward_fn(cfg, registry)
    if "algorithm" not in bad:
        name, params = component(cfg, "algorithm")
        with found.at("algorithm", f"algorithm {name!r}"):
            algorithm = registry.build("algorithm", name, params, where="algorithm")
            model_ok = not any(line.startswith("config error at model.path") for line in found)
            if datasets.get("data.train") and model_ok:
                from agentr1_core.algorithms.critic_prefix import critic_prefixes

                with found.at("critic.prefix"):  # a critic reads it, every training row within max_tokens
                    critic_prefixes(cfg, algorithm, datasets["data.train"])
    return datasets
