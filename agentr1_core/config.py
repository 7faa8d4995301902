"""Run configuration: structured dataclasses merged with YAML files and dotlist overrides through OmegaConf.

Components are chosen by name, ``{name: ..., **params}``, at the keys that ``agentr1_core.kinds`` lists; their
params are checked against the factory's keyword arguments (``agentr1_core.params``). A YAML file may start from
another with ``base: NAME_OR_PATH`` (a named config that an installed distribution provides, such as ``default`` or
``webshop``, or a path relative to the file). A layer or override that changes a component's ``name``
(``env: {name: maze}`` over a base with ``tool_env``) starts that component afresh: the old one's params are not
inherited; ``key.name=...`` overrides apply before the others. Every mistake becomes a ``ConfigError`` whose message
is one line with the full key path; the CLI prints it and exits with code 2. Unknown keys are all reported at once
(one line each), with the unknown component names of the rest of the config. An installed tool source adds a
top-level section named after it (``mcp:``), checked against its factory (``agentr1_core.tool_sources``).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agentr1_core import named_configs  # noqa: F401  (registers the ${package_data:...} resolver)
from agentr1_core.components import component, unknown_names  # noqa: F401  (component: a config helper too)
from agentr1_core.errors import ConfigError, suggest
from agentr1_core.kinds import config_keys
from agentr1_core.plugins import get_registry
from agentr1_core.specs import ConfigSpec


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    path: str = "smollm2-135m-instruct"  # a Hugging Face id, a local folder, or the offline alias
    dtype: str = "float32"
    device: str = "auto"  # auto | cpu | cuda
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling (``trainers.dynamic_sampling``): a group whose episodes all got the same reward carries
    no GRPO gradient; it is dropped and more rows are rolled out until ``rollout.batch_size`` informative groups are
    there, in at most ``max_rounds`` extra rounds of ``rollout.batch_size`` rows each."""

    enabled: bool = False
    max_rounds: int = 4  # extra rollout rounds per iteration at most; when they are spent, what was found trains


@dataclass
class OverlongConfig:
    """Episodes cut by a limit (``trainers.overlong``): ``mask`` keeps them out of the loss (their rewards
    still count in their group's baseline); ``penalty`` lowers the episode's reward linearly over the last
    ``buffer_tokens`` tokens of a step's ``rollout.max_new_tokens``, by ``penalty_factor`` at the limit (DAPO's
    soft overlong punishment); ``none`` trains on them as they are."""

    mode: str = "none"  # none | mask | penalty
    buffer_tokens: int = 0  # penalty: the last N tokens of the budget over which the penalty grows
    penalty_factor: float = 1.0  # penalty: the reward subtracted at the budget


@dataclass
class RolloutConfig:
    batch_size: int = 8  # dataset rows per iteration
    n: int = 4  # samples per row (the GRPO group)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    max_turns: int = 4
    max_prompt_tokens: int = 2048
    stop: list[str] = field(default_factory=list)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    overlong: OverlongConfig = field(default_factory=OverlongConfig)


@dataclass
class ValidationConfig:
    every: int = 5  # iterations between validations (0: only before and after training)
    before: bool = True  # validate the untrained model first (false skips it: same greedy baseline on every seed)
    max_rows: int = 64
    n: int = 1
    temperature: float = 0.0  # 0 = greedy


@dataclass
class SFTConfig:
    """Warm start on scripted-expert trajectories (``stages: [sft, rl]``)."""

    rows: int = 64
    epochs: int = 1
    lr: float = 1e-4
    batch_size: int = 8


@dataclass
class TrainerConfig:
    name: str = "local"
    total_steps: int = 10  # RL iterations (rollout + update)
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    optimizer_kernel: str = "auto"  # auto | fused | foreach: AdamW's kernel (auto: fused on CUDA, foreach elsewhere)
    max_grad_norm: float = 1.0
    micro_batch_size: int = 8  # steps per forward/backward
    micro_batch_tokens: int = 0  # and at most this many token positions per forward/backward (0: rows only)
    share_prefix: int = 32  # a micro-batch's common token prefix of at least this many tokens runs once (0: off)
    skip_inert_rows: bool = True  # rows with zero loss and gradient (a GRPO group of equal rewards) are not run
    onednn_linears: bool = True  # on CPU, passes without gradients run linear layers through oneDNN (cpu_linears)
    activation_checkpointing: bool = False  # recompute the blocks' activations in the backward pass (less memory)
    mmap_threshold_kb: int = 0  # glibc: blocks above this go back to the OS when freed (0: the allocator's own)
    mini_batches: int = 1  # optimizer steps per update pass
    update_epochs: int = 1  # passes over one rollout batch
    recompute_old_logprobs: str = "auto"  # auto | true | false (auto: several steps per rollout or a foreign engine)
    max_staleness: int = 0  # rollouts run ahead of the update with weights up to this many updates old (0: in turn)
    off_policy_correction: str = "none"  # none | tis | decoupled (losses.OffPolicyCorrection)
    importance_cap: float = 2.0  # importance weights of the off-policy correction above this are capped
    importance_cap_mode: str = "truncate"  # truncate (w = min(w, cap)) | mask (w > cap -> 0, token stays counted)
    importance_level: str = "token"  # token | sequence (product over the step) | geometric (its geometric mean)
    step_without_gradient: bool = False  # true: the optimizer steps even when no row carries a gradient
    warmup_steps: int = 0
    ref_model: Any = False  # KL reference: true = the policy at the start of RL (also implied by kl_coef > 0); a path
    critic_lr: float = 1e-5
    value_coef: float = 1.0  # weight of the critic loss added to the policy loss
    train_layers: int = 0  # train only the top N decoder blocks (0: all); with LoRA, adapters only there
    threads: int = 0  # torch threads (0: leave the default)
    checkpoint_every: int = 0  # iterations between checkpoints (0: only at the end; < 0: never)
    keep_checkpoints: int = 2
    resume: str = "never"  # never | auto (continue from the latest checkpoint in run_dir)
    min_free_gb: float = 1.0  # free disk space the run directory needs before training starts
    keep_train_episodes: int = 4  # RL episodes kept per iteration in run_dir/episodes/train/iter_<N>.jsonl (0: none)
    params: dict[str, Any] = field(default_factory=dict)  # backend-specific extras


@dataclass
class CriticPrefixConfig:
    """Privileged text only the critic reads before each step (``algorithms.critic_prefix``): a ``template`` over
    the row's fields (``{ground_truth}``, ``{reference_solution}``, ``{question}`` ...) or the dotted path of a
    ``field`` that holds it, at most ``max_tokens`` tokens. Neither set: no prefix."""

    template: str | None = None
    field: str | None = None
    max_tokens: int = 256


@dataclass
class CriticConfig:
    """``model: null``: a linear value head on the policy trunk, learning at ``head_lr`` (default
    ``trainer.critic_lr``); a model path: a separate critic model with its own optimizer at ``lr`` (default
    ``trainer.critic_lr``; verl's critic, a whole value model, too). The two differ: a head's value moves by about
    ``head_lr`` x the L1 norm of the trunk's last hidden state per update (docs/algorithms.md). ``prefix``: the
    asymmetric critic's privileged prefix."""

    model: str | None = None
    lr: float | None = None
    head_lr: float | None = None
    prefix: CriticPrefixConfig = field(default_factory=CriticPrefixConfig)


@dataclass
class PluginsConfig:
    allow: list[str] = field(default_factory=list)
    block: list[str] = field(default_factory=list)


@dataclass
class CurriculumConfig:
    """Rows sampled by their running pass rate (``trainers.curriculum``): a row whose last ``window`` visits were
    all solved (``skip_solved``) or all failed (``skip_failed``) is skipped; its state is in the checkpoint."""

    enabled: bool = False
    window: int = 2  # visits (RL rollouts of the row) the pass rate is read over
    skip_solved: bool = True
    skip_failed: bool = True


@dataclass
class DataConfig:
    train: dict[str, Any] = field(default_factory=lambda: {"name": "jsonl"})
    val: dict[str, Any] | None = None
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)


@dataclass
class LoggingConfig:
    """Where metrics go besides ``metrics.jsonl``: any of ``tensorboard``, ``wandb`` (offline without an account),
    ``mlflow`` (a local file store), ``trackio``; each but TensorBoard is an optional install
    (``lifecycle.trackers``)."""

    trackers: list[str] = field(default_factory=lambda: ["tensorboard"])
    project: str = "agentr1"
    run_name: str | None = None  # the run folder's name when unset


@dataclass
class RunConfig:
    seed: int = 0
    run_dir: str = "runs/default"
    stages: list[str] = field(default_factory=lambda: ["rl"])  # any of: sft, rl
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: dict[str, Any] = field(default_factory=lambda: {"name": "transformers"})
    env: dict[str, Any] = field(default_factory=lambda: {"name": "tool_env"})
    agent_flow: dict[str, Any] = field(default_factory=lambda: {"name": "agent_env_loop"})
    reward: dict[str, Any] | None = None
    algorithm: dict[str, Any] = field(default_factory=lambda: {"name": "grpo"})
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    plugins: PluginsConfig = field(default_factory=PluginsConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# The {name: ..., **params} nodes of a run config (agentr1_core.kinds), by key: a new name there starts the node afresh.
COMPONENT_KEYS = config_keys("node")
SWITCHABLE_KEYS = tuple(COMPONENT_KEYS)
SWITCH_OVERRIDES = tuple(f"{k}.name" for k in SWITCHABLE_KEYS)


def _switch_component(cfg: DictConfig, key: str, new_name: Any) -> None:
    """When ``new_name`` differs from the component named at ``key``, empty the node so that the old component's
    params do not leak into the new one."""
    old_name = OmegaConf.select(cfg, f"{key}.name", default=None)
    if new_name is not None and old_name is not None and str(new_name) != str(old_name):
        OmegaConf.update(cfg, key, {}, merge=False)


def _one_line(exc: OmegaConfBaseException) -> str:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    key = getattr(exc, "full_key", None)
    return f"config error at {key}: {msg}" if key else f"config error: {msg}"


def find_config(name: str) -> Path | None:
    """The YAML file of the named config ``name``, or None when no installed distribution provides it.

    Two distributions providing one name raise the registry's conflict error (naming both)."""
    registry = get_registry()
    if name not in registry.components["config"] and ("config", name) not in registry.conflicts:
        return None
    spec = registry.get("config", name)
    assert isinstance(spec, ConfigSpec)
    return spec.path()


MAX_LISTED_CHARS = 240  # how long the list of named configs on a "not found" line may be


def resolve_config_path(name: str, relative_to: Path | None = None) -> Path:
    """A YAML path, or the name of a config that an installed distribution provides (``default``, ``webshop``)."""
    candidates = [Path(name)]
    if relative_to is not None:
        candidates.insert(0, relative_to / name)
    for c in candidates:
        if c.is_file():
            return c
    found = find_config(name)
    if found is not None:
        return found
    if Path(name).is_dir():
        raise ConfigError(f"{name} is a folder without a saved config.yaml, so not a run directory (a run writes "
                          f"its config.yaml there when it starts)")
    from agentr1_core.errors import suggest

    names = get_registry().names("config")
    listed = f"named configs: {', '.join(names)}; `agentr1-core config list` shows which distribution provides each"
    if len(listed) > MAX_LISTED_CHARS:  # a line a terminal still shows whole: the count instead of every name
        listed = f"{len(names)} named configs are installed; `agentr1-core config list` shows each and its distribution"
    raise ConfigError(f"config file {name!r} not found{suggest(Path(name).stem, names)} ({listed})")


def _read_yaml(path: Path, depth: int = 0) -> list[DictConfig]:
    if depth > 8:
        raise ConfigError(f"config {path}: 'base' chain is too deep (a cycle?)")
    try:
        cfg = OmegaConf.load(path)
    except Exception as exc:  # yaml syntax errors: file:line:column and the problem
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"config {where}: cannot parse YAML: {problem}") from exc
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"config {path}: top level must be a mapping")
    base = cfg.pop("base", None)
    chain = _read_yaml(resolve_config_path(str(base), path.parent), depth + 1) if base else []
    return chain + [cfg]


def _section(parts: list[str]) -> Any:
    """The ``RunConfig`` section (a dataclass) at the key path ``parts``, or None where keys are free (component
    nodes, ``trainer.params``) or the path is unknown."""
    section: Any = RunConfig
    for part in parts:
        section = typing.get_type_hints(section).get(part)
        if not dataclasses.is_dataclass(section):
            return None
    return section


def run_config_tree() -> DictConfig:
    """``RunConfig``'s defaults as an OmegaConf tree that also takes top-level sections of tool sources (``mcp:``):
    ``load_config`` drops and reports every other unknown key before it merges."""
    cfg = OmegaConf.structured(RunConfig)
    OmegaConf.set_struct(cfg, False)
    return cfg


def tool_source_sections() -> list[str]:
    """The top-level keys that installed tool sources add to a run config (``agentr1_core.tool_sources``)."""
    return get_registry().names("tool_source")


def _unknown_key(parts: list[str]) -> str | None:
    """The error for the key path ``parts`` when a section of ``RunConfig`` lacks one of its keys, else None. A
    tool source's section (``mcp:``) is the source's to check (its factory's parameters)."""
    if parts and parts[0] in tool_source_sections():
        return None
    for depth, part in enumerate(parts):
        section = _section(parts[:depth])
        if section is None:
            return None
        fields = [f.name for f in dataclasses.fields(section)]
        if part not in fields:
            return (f"config error at {'.'.join(parts[:depth + 1])}: Key {part!r} not in "
                    f"{section.__name__!r}{suggest(part, fields)}")
    return None


def _drop_unknown_keys(layers: list[DictConfig], overrides: list[str]) -> tuple[list[str], list[str]]:
    """``(problems, overrides)``: one line per unknown key of the YAML layers and the overrides, all of them; the
    keys are taken out of the layers and the overrides returned without them, so that the rest can be checked."""
    problems: dict[str, None] = {}

    def walk(node: DictConfig, prefix: list[str]) -> None:  # in file order, into the sections of RunConfig only
        for key in list(node.keys()):
            parts = [*prefix, str(key)]
            problem = _unknown_key(parts)
            if problem:
                problems[problem] = None
                del node[key]
            elif OmegaConf.is_dict(node._get_node(key)) and _section(parts) is not None:
                walk(node._get_node(key), parts)

    for layer in layers:
        walk(layer, [])
    kept = []
    for item in overrides:
        problem = _unknown_key(item.partition("=")[0].split("."))
        if problem:
            problems[problem] = None
        else:
            kept.append(item)
    return list(problems), kept


def _unknown_names(cfg: DictConfig) -> list[str]:
    """The component names of ``cfg`` no plugin registers (to report them with the unknown keys, all at once)."""
    from agentr1_core.plugins import Registry

    try:
        registry = Registry(cfg.plugins.allow, cfg.plugins.block).load_entry_points()
        return unknown_names(cfg, registry)
    except Exception:  # a malformed node: reported by the checks that follow once the keys are fixed
        return []


def load_config(path: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                problems: list[str] | None = None) -> DictConfig:
    """Merge defaults, the YAML chain of ``path`` (packaged ``default`` when None) and dotlist ``overrides``.
    Unknown keys are reported all at once, with the unknown component names of the rest. Given a ``problems``
    list, unknown keys and overrides that do not fit their key are added to it instead and the rest of the config
    is loaded, so that a run reports them together with everything its checks find (``preflight``)."""
    layers = _read_yaml(resolve_config_path(path or "default"))
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"override {bad[0]!r} must look like key.path=value")
    unknown, overrides = _drop_unknown_keys(layers, list(overrides))
    collect = problems is not None
    try:
        cfg = run_config_tree()
        for layer in layers:  # a layer that names another component replaces the node (no inherited params)
            for key in SWITCHABLE_KEYS:
                _switch_component(cfg, key, OmegaConf.select(layer, f"{key}.name", default=None))
            cfg = OmegaConf.merge(cfg, layer)
        for item in sorted(overrides, key=lambda o: o.partition("=")[0] not in SWITCH_OVERRIDES):
            try:
                _apply_override(cfg, item)
            except OmegaConfBaseException as exc:
                if not collect:
                    raise
                unknown.append(_one_line(exc))
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError("\n".join([*unknown, _one_line(exc)])) from exc
    if unknown and collect:
        problems.extend(unknown)
    elif unknown:
        raise ConfigError("\n".join(unknown + _unknown_names(cfg)))
    for key in COMPONENT_KEYS:
        node = OmegaConf.select(cfg, key)
        if node is not None and not OmegaConf.select(cfg, f"{key}.name"):
            raise ConfigError(f"config error at {key}: a component needs a 'name'")
    return cfg


def _apply_override(cfg: DictConfig, item: str) -> None:
    """Set ``key=value`` in ``cfg``; one at a time, so that list items can be addressed: ``env.tools.0.k=5``."""
    key, _, raw = item.partition("=")
    value = OmegaConf.to_container(OmegaConf.from_dotlist([f"v={raw}"]))["v"]
    if key in SWITCHABLE_KEYS and isinstance(value, dict):
        _switch_component(cfg, key, value.get("name"))
    elif key in SWITCH_OVERRIDES:
        _switch_component(cfg, key.rsplit(".", 1)[0], value)
    parts = key.split(".")
    for depth in range(1, len(parts)):  # reward.name=x when reward is null: start an empty node
        prefix = ".".join(parts[:depth])
        if OmegaConf.select(cfg, prefix, default="missing") is None:
            OmegaConf.update(cfg, prefix, {}, merge=False)
    OmegaConf.update(cfg, key, value, merge=True)


def split_config_args(items: list[str] | tuple[str, ...]) -> tuple[str | None, list[str]]:
    """``[CONFIG] [key=value ...]`` of a command line: the first item without ``=`` is the config."""
    config, overrides = None, []
    for item in items:
        if "=" not in item and config is None and not overrides:
            config = item
        else:
            overrides.append(item)
    return config, overrides


@dataclasses.dataclass
class CommandLineConfig:
    """A config named on the command line: ``cfg``, the ``problems`` loading it found (for the run's checks to
    report with theirs), the ``overrides`` given, and ``run_folder`` when CONFIG was a run directory (its saved
    ``config.yaml``, with ``run_dir`` set to it)."""

    cfg: DictConfig
    problems: list[str]
    overrides: list[str]
    run_folder: str | None = None


def config_from_items(items: list[str] | tuple[str, ...]) -> CommandLineConfig:
    """The config of ``[CONFIG|RUN_DIR] [key=value ...]``: a run directory stands for its saved ``config.yaml``."""
    from agentr1_core.lifecycle.run_dir import saved_config

    config, overrides = split_config_args(items)
    saved = saved_config(config) if config else None
    problems: list[str] = []
    if saved is not None:
        cfg = load_config(str(saved), [f"run_dir={config}", *overrides], problems=problems)
        return CommandLineConfig(cfg, problems, overrides, run_folder=str(config))
    return CommandLineConfig(load_config(config, overrides, problems=problems), problems, overrides)
