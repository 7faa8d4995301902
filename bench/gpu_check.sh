#!/usr/bin/env bash
# The GPU measurements of one GPU machine, in one prepared script: each part under its own time limit, the results
# in one output folder.
#
#   a  the default config (calculator, SFT warm start then GRPO) with model.device=cuda, for each seed: held-out
#      success before training, after SFT and after RL, logprob_gap_max and the mismatch diagnostics per iteration
#   b  hotpotqa-gpu at smoke size on verl + vLLM (bench/gpu_smoke.sh): rollouts, update, weights back to the engine
#   c  rollout tokens/s at 64 and 256 concurrent requests: the transformers engine, one static-batch generate, vLLM
#      (bench/bench_gpu_rollout.py; vLLM only where it is installed)
#
# Usage, on the GPU machine:  bash bench/gpu_check.sh [--bundle DIR] [--parts a,b,c] [options]
#
#   --bundle DIR      an offline bundle (scripts/gpu_bundle.sh) to install first into --site with
#                     scripts/gpu_install.sh --target; skipped when --site already holds that bundle
#   --site DIR        where the bundle is installed; put on PYTHONPATH after this checkout's code [/tmp/agentr1-site]
#   --parts LIST      which parts to run, in order                                                      [a,b,c]
#   --seeds LIST      part a's seeds                                                                    [0,1,2]
#   --out DIR         the results                                                   [$OUT, else runs/gpu_check]
#   --budget S        seconds this call may take in all: each part gets at most its own limit and what is left,
#                     and a part that would get less than its minimum is skipped (said in the summary)      [570]
#   --dry-run         print the plan (parts, commands, limits) and what is missing for it; run nothing
#
# Moving a bundle in pieces (a device call carries at most 64 MiB, the checkout included):
#
#   --stage BUNDLE    on the connected machine: link BUNDLE's files into .gpu-carry/b01, b02, ... of at most
#                     --batch-mb MiB each (the first with SHA256SUMS and MANIFEST) and print one call per batch
#   --batch-mb N      [50]
#   --carry-dir DIR   where the batches go; run --stage from the checkout's root so that the path is relative
#                     (a device call's carry names paths inside the checkout)                          [.gpu-carry]
#   --receive DIR     on the GPU machine: move the files of a carried batch into --bundle (default
#                     /tmp/agentr1-bundle, outside the checkout), check each against SHA256SUMS and say what is still
#                     missing; nothing else runs unless --parts is given too
#
# Limits in seconds (environment): GPU_CHECK_INSTALL_S 240, GPU_CHECK_SEED_S 150 (part a, per seed),
# GPU_CHECK_SMOKE_S 420 (b), GPU_CHECK_ROLLOUT_S 300 (c). GPU_CHECK_CONFIG names part a's config (default
# `default`), GPU_CHECK_DEVICE its device (default cuda): GPU_CHECK_DEVICE=cpu GPU_CHECK_CONFIG=tiny rehearses part a
# on a machine without a GPU. GPU_CHECK_RUNS: the run folders and full logs [/tmp/agentr1-gpu-check].
# The parts should need about 11-13 minutes together on one H200 (estimated: a about 3, b about 5, c about 3, the
# install 1-2): run them as two calls, e.g. --parts a,c then --parts b.
#
# Results (at most 8 files, as a device call brings back): gpu_check.txt (versions, each part's outcome and table),
# part_a.json, rollout.json, freeze.txt (the machine's own packages: a --have file for the next bundle) and
# logs.tar.gz (every log, metrics.jsonl and resolved config; no checkpoints).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "gpu_check: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

BUNDLE=""
SITE=/tmp/agentr1-site
PARTS=a,b,c
PARTS_GIVEN=0
SEEDS=0,1,2
RESULTS=${OUT:-runs/gpu_check}
BUDGET=570
DRY_RUN=0
STAGE=""
BATCH_MB=50
CARRY=.gpu-carry
RECEIVE=""
PY=${PYTHON:-python3}
INSTALL_S=${GPU_CHECK_INSTALL_S:-240}
SEED_S=${GPU_CHECK_SEED_S:-150}
SMOKE_S=${GPU_CHECK_SMOKE_S:-420}
ROLLOUT_S=${GPU_CHECK_ROLLOUT_S:-300}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
CONFIG=${GPU_CHECK_CONFIG:-default}

need_value() { if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (see --help)"; fi; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --bundle) need_value "$@"; BUNDLE=$2; shift 2 ;;
    --site) need_value "$@"; SITE=$2; shift 2 ;;
    --parts) need_value "$@"; PARTS=$2; PARTS_GIVEN=1; shift 2 ;;
    --seeds) need_value "$@"; SEEDS=$2; shift 2 ;;
    --out) need_value "$@"; RESULTS=$2; shift 2 ;;
    --budget) need_value "$@"; BUDGET=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --stage) need_value "$@"; STAGE=$2; shift 2 ;;
    --batch-mb) need_value "$@"; BATCH_MB=$2; shift 2 ;;
    --carry-dir) need_value "$@"; CARRY=$2; shift 2 ;;
    --receive) need_value "$@"; RECEIVE=$2; shift 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$PARTS" =~ ^[abc](,[abc])*$ ]] || die "--parts takes a comma list of a, b, c; got '$PARTS'"
[[ "$SEEDS" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--seeds takes a comma list of integers; got '$SEEDS'"
[[ "$BUDGET" =~ ^[0-9]+$ ]] || die "--budget takes whole seconds; got '$BUDGET'"
[[ "$BATCH_MB" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--batch-mb takes a positive number of MiB; got '$BATCH_MB'"
BATCH_BYTES=$(awk -v mb="$BATCH_MB" 'BEGIN { printf "%d", mb * 1048576 }')
[ "$BATCH_BYTES" -ge 1024 ] || die "--batch-mb $BATCH_MB is below 1 KiB"
[[ "$DEVICE" =~ ^(cuda|cpu)$ ]] || die "GPU_CHECK_DEVICE must be cuda or cpu; got '$DEVICE'"
[[ "$CONFIG" =~ ^[A-Za-z0-9_.-]+$ ]] || die "GPU_CHECK_CONFIG must be a config name; got '$CONFIG'"
for v in INSTALL_S SEED_S SMOKE_S ROLLOUT_S; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "GPU_CHECK_$v must be whole seconds; got '${!v}'"
done
IFS=, read -r -a PART_LIST <<< "$PARTS"
IFS=, read -r -a SEED_LIST <<< "$SEEDS"
has_part() { [[ ",$PARTS," == *",$1,"* ]]; }

# -- staging: a bundle cut into batches that each fit one device call (on the connected machine) ----------------------
if [ -n "$STAGE" ]; then
  if [ ! -f "$STAGE/SHA256SUMS" ] || [ ! -f "$STAGE/MANIFEST" ]; then
    die "$STAGE is not a bundle (no SHA256SUMS or MANIFEST)"
  fi
  carry=$CARRY
  limit=$BATCH_BYTES
  rm -rf "$carry"
  mkdir -p "$carry/b01"
  cp "$STAGE/SHA256SUMS" "$STAGE/MANIFEST" "$carry/b01/"
  # first fit, largest file first: each file goes into the first batch with room for it
  used=($(( $(stat -c %s "$STAGE/SHA256SUMS") + $(stat -c %s "$STAGE/MANIFEST") )))
  while read -r size file; do
    [ "$size" -le "$limit" ] \
      || die "$file is $((size / 1048576)) MiB, more than --batch-mb $BATCH_MB: bundle again with a smaller --split-mb"
    i=0
    while [ "$i" -lt "${#used[@]}" ] && [ $((used[i] + size)) -gt "$limit" ]; do i=$((i + 1)); done
    [ "$i" -lt "${#used[@]}" ] || used+=(0)
    used[i]=$((used[i] + size))
    dir=$carry/$(printf 'b%02d' $((i + 1)))
    mkdir -p "$dir"
    ln "$STAGE/$file" "$dir/$file" 2>/dev/null || cp "$STAGE/$file" "$dir/$file"
  done < <(awk '$2 != "MANIFEST" { print $2 }' "$STAGE/SHA256SUMS" \
           | while read -r f; do echo "$(stat -c %s "$STAGE/$f") $f"; done | sort -k1,1nr -k2)
  batch=${#used[@]}
  if ! git check-ignore -q "$carry" 2>/dev/null; then
    echo "gpu_check: warning: $carry is not ignored by git: add it to .git/info/exclude, or it travels with every" \
      "call" >&2
  fi
  echo "gpu_check: $batch batch(es) of at most $BATCH_MB MiB in $carry; one device call each, in order:"
  for ((i = 1; i <= batch; i++)); do
    b=$(printf 'b%02d' "$i")
    echo "  carry [\"$carry/$b\"]: bash bench/gpu_check.sh --receive $carry/$b" \
      "($(du -sm "$carry/$b" | cut -f1) MiB, $(find "$carry/$b" -type f | wc -l) files)"
  done
  echo "then: bash bench/gpu_check.sh --bundle /tmp/agentr1-bundle --parts a,c   and   --parts b"
  exit 0
fi

# -- receiving a carried batch (on the GPU machine) -------------------------------------------------------------------
if [ -n "$RECEIVE" ]; then
  [ -d "$RECEIVE" ] || die "no such folder to receive: $RECEIVE"
  dest=${BUNDLE:-/tmp/agentr1-bundle}
  mkdir -p "$dest"
  moved=()
  for f in "$RECEIVE"/*; do
    [ -f "$f" ] || continue
    mv -f "$f" "$dest/" 2>/dev/null || cp -f "$f" "$dest/"
    moved+=("$(basename "$f")")
  done
  sums=$dest/SHA256SUMS
  [ -f "$sums" ] || die "received ${#moved[@]} file(s), but $dest has no SHA256SUMS yet: carry the first batch (b01)"
  bad=()
  for file in "${moved[@]}"; do
    want=$(awk -v f="$file" '$2 == f { print $1 }' "$sums")
    [ -z "$want" ] || [ "$(sha256sum "$dest/$file" | cut -d' ' -f1)" = "$want" ] || bad+=("$file")
  done
  present=0
  missing=()
  while read -r _ file; do
    if [ -f "$dest/$file" ]; then present=$((present + 1)); else missing+=("$file"); fi
  done < "$sums"
  echo "gpu_check: received ${#moved[@]} file(s); $dest holds $present of $((present + ${#missing[@]})) files"
  if [ "${#bad[@]}" -gt 0 ]; then
    rm -f "${bad[@]/#/$dest/}"
    die "checksum mismatch, removed: ${bad[*]} (carry them again)"
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    more=""
    [ "${#missing[@]}" -le 6 ] || more=" ..."
    echo "gpu_check: still missing ${#missing[@]}: ${missing[*]:0:6}$more"
  fi
  [ "$PARTS_GIVEN" -eq 1 ] || exit 0
  [ "${#missing[@]}" -eq 0 ] || die "the bundle is incomplete; not running the parts"
  BUNDLE=$dest
fi

# -- the plan ---------------------------------------------------------------------------------------------------
RUNS=${GPU_CHECK_RUNS:-/tmp/agentr1-gpu-check}  # run folders and logs (big files stay here, not in the results)
CLI=("$PY" -c "from agentr1_core.cli import entry; entry()")
plan() {
  echo "gpu_check plan (budget ${BUDGET} s; python $PY; results in $RESULTS):"
  if [ -n "$BUNDLE" ]; then
    echo "  install  $BUNDLE -> $SITE (scripts/gpu_install.sh --target), limit ${INSTALL_S} s"
  fi
  echo "  PYTHONPATH=$ROOT:$ROOT/plugins/agentr1-tools-search:$SITE"
  for part in "${PART_LIST[@]}"; do
    case "$part" in
      a) for s in "${SEED_LIST[@]}"; do
           echo "  a seed $s  agentr1-core run $CONFIG model.device=$DEVICE seed=$s run_dir=$RUNS/a-seed$s" \
                "  (limit ${SEED_S} s)"
         done ;;
      b) echo "  b        PYTHON=$PY RUN_DIR=$RUNS/b ITERATIONS=3 bash bench/gpu_smoke.sh   (limit ${SMOKE_S} s):"
         echo "           $(RUN_DIR=$RUNS/b ITERATIONS=3 bash "$ROOT/bench/gpu_smoke.sh" --dry-run)" ;;
      c) echo "  c        python bench/bench_gpu_rollout.py --concurrency 64,256 --max-new-tokens 128" \
              "--methods engine,static_batch[,vllm] --out $RESULTS/rollout.json   (limit ${ROLLOUT_S} s)" ;;
    esac
  done
}

missing_for_plan() {  # what the plan needs and this machine lacks, one line each (no driver: torch not asked)
  command -v "$PY" >/dev/null 2>&1 || echo "a Python interpreter '$PY' (set PYTHON)"
  if [ "$DEVICE" = cpu ]; then
    :  # a rehearsal: no GPU wanted
  elif ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "nvidia-smi (an NVIDIA driver and GPU)"
  elif ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "a CUDA GPU visible to torch ($PY)"
  fi
  if [ -n "$BUNDLE" ]; then
    [ -f "$BUNDLE/SHA256SUMS" ] || echo "the bundle $BUNDLE (no SHA256SUMS there)"
  fi
  return 0
}

if [ "$DRY_RUN" -eq 1 ]; then
  plan
  lacking=$(missing_for_plan)
  if [ -n "$lacking" ]; then
    echo "gpu_check: this machine lacks, for a real run:"
    while read -r line; do echo "  - $line"; done <<< "$lacking"
  fi
  exit 0
fi
lacking=$(missing_for_plan)
[ -z "$lacking" ] || die "cannot run here: no $(head -1 <<< "$lacking") (--dry-run prints the plan)"

# -- the run ----------------------------------------------------------------------------------------------------
deadline=$((SECONDS + BUDGET))
mkdir -p "$RESULTS" "$RUNS"
RESULTS=$(cd "$RESULTS" && pwd)
SUMMARY=$RESULTS/gpu_check.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
limit_for() {  # limit_for LIMIT MINIMUM: seconds a step may take now, 0 when less than MINIMUM is left
  local left=$((deadline - SECONDS - 30))  # room for a stopped step's clean-up and the final archive
  local t=$(( $1 < left ? $1 : left ))
  if [ "$t" -lt "$2" ]; then echo 0; else echo "$t"; fi
}
peak_start() {
  MEM_PID=""
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$RUNS/mem-$1.log" &
  MEM_PID=$!
}
peak_stop() {  # prints the peak in MiB, or n/a
  [ -z "$MEM_PID" ] || { kill "$MEM_PID" 2>/dev/null || true; wait "$MEM_PID" 2>/dev/null || true; }
  local peak
  peak=$(sort -n "$RUNS/mem-$1.log" 2>/dev/null | tail -1)
  echo "${peak:-n/a}"
}
MEM_PID=""
trap '[ -z "$MEM_PID" ] || kill "$MEM_PID" 2>/dev/null || true' EXIT

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
note "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ), parts $PARTS, checkout $commit"
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 \
        || echo "no GPU (device $DEVICE)")"
"$PY" -m pip freeze > "$RESULTS/freeze.txt" 2>/dev/null || true

if [ -n "$BUNDLE" ]; then
  stamp=$(sha256sum "$BUNDLE/SHA256SUMS" | cut -d' ' -f1)
  if [ "$(cat "$SITE/.agentr1-bundle" 2>/dev/null)" = "$stamp" ]; then
    note "install: $SITE already holds this bundle"
  else
    t=$(limit_for "$INSTALL_S" 30)
    [ "$t" -gt 0 ] || die "no time left to install the bundle"
    start=$SECONDS
    rc=0
    timeout -k 15 "$t" bash "$ROOT/scripts/gpu_install.sh" "$BUNDLE" --target "$SITE" --python "$PY" \
      > "$RUNS/install.log" 2>&1 || rc=$?
    note "install: exit $rc in $((SECONDS - start)) s ($(tail -1 "$RUNS/install.log"))"
    [ "$rc" -eq 0 ] || { tail -20 "$RUNS/install.log" >&2; die "the bundle did not install (log above)"; }
    echo "$stamp" > "$SITE/.agentr1-bundle"
  fi
fi
export PYTHONPATH="$ROOT:$ROOT/plugins/agentr1-tools-search${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
note "$("$PY" - <<'EOF'
import importlib
out = []
for name in ("torch", "transformers", "vllm", "verl", "ray", "agentr1_core"):
    try:
        out.append(f"{name} {importlib.import_module(name).__version__}")
    except Exception as exc:  # noqa: BLE001 - a missing package is part of the report
        out.append(f"{name} missing ({type(exc).__name__})")
import torch
out.append(f"cuda {torch.version.cuda}")
print("versions: " + ", ".join(out))
EOF
)"

for part in "${PART_LIST[@]}"; do
  case "$part" in
    a)
      for s in "${SEED_LIST[@]}"; do
        t=$(limit_for "$SEED_S" 60)
        if [ "$t" -eq 0 ]; then note "a seed $s: skipped (budget)"; continue; fi
        rm -rf "$RUNS/a-seed$s"
        start=$SECONDS
        rc=0
        peak_start "a$s"
        timeout -k 15 "$t" "${CLI[@]}" run "$CONFIG" "model.device=$DEVICE" "seed=$s" "run_dir=$RUNS/a-seed$s" \
          > "$RUNS/a-seed$s.log" 2>&1 || rc=$?
        note "a seed $s: exit $rc in $((SECONDS - start)) s (limit $t s), GPU memory peak $(peak_stop "a$s") MiB"
      done
      "$PY" - "$RUNS" "$RESULTS/part_a.json" "${SEED_LIST[@]}" <<'EOF' | tee -a "$SUMMARY"
import json, sys
from pathlib import Path
runs, out, seeds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
result = {}
print(f"{'seed':>4} {'before':>7} {'sft':>5} {'rl':>5}  logprob_gap_max per iteration / max k3 KL / min ESS")
for seed in seeds:
    path = runs / f"a-seed{seed}" / "metrics.jsonl"
    recs = [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.is_file() else []
    val = {r["label"]: round(r["success_rate"] * r["cases"]) for r in recs if r.get("event") == "validation"}
    its = [r for r in recs if "iteration" in r and "event" not in r]
    gaps = [r.get("logprob_gap_max") for r in its]
    kl = [r["mismatch/k3_kl"] for r in its if isinstance(r.get("mismatch/k3_kl"), (int, float))]
    ess = [r["mismatch/ess"] for r in its if isinstance(r.get("mismatch/ess"), (int, float))]
    result[seed] = {"held_out": val, "logprob_gap_max": gaps, "k3_kl_max": max(kl, default=None),
                    "ess_min": min(ess, default=None), "iterations": len(its)}
    cell = lambda k: str(val.get(k, "-"))
    gap_text = " ".join(f"{g:.1e}" if isinstance(g, (int, float)) else "-" for g in gaps) or "-"
    print(f"{seed:>4} {cell('before_sft'):>7} {cell('after_sft'):>5} {cell('after_rl'):>5}  {gap_text} / "
          f"{result[seed]['k3_kl_max']} / {result[seed]['ess_min']}")
out.write_text(json.dumps(result, indent=2) + "\n")
EOF
      ;;
    b)
      t=$(limit_for "$SMOKE_S" 180)
      if [ "$t" -eq 0 ]; then note "b: skipped (budget)"; continue; fi
      start=$SECONDS
      rc=0
      PYTHON=$PY RUN_DIR=$RUNS/b ITERATIONS=3 timeout -k 15 "$t" bash "$ROOT/bench/gpu_smoke.sh" \
        > "$RUNS/b.log" 2>&1 || rc=$?
      note "b: exit $rc in $((SECONDS - start)) s (limit $t s)"
      sed -n '/^gpu_smoke summary/,$p' "$RUNS/b.log" | tee -a "$SUMMARY"
      ;;
    c)
      t=$(limit_for "$ROLLOUT_S" 90)
      if [ "$t" -eq 0 ]; then note "c: skipped (budget)"; continue; fi
      methods=engine,static_batch
      if "$PY" -c 'import vllm' >/dev/null 2>&1; then methods=$methods,vllm; fi
      start=$SECONDS
      rc=0
      peak_start c
      timeout -k 15 "$t" "$PY" "$ROOT/bench/bench_gpu_rollout.py" --concurrency 64,256 --max-new-tokens 128 \
        --methods "$methods" --out "$RESULTS/rollout.json" > "$RUNS/c.log" 2>&1 || rc=$?
      note "c: exit $rc in $((SECONDS - start)) s (limit $t s, methods $methods), GPU memory peak $(peak_stop c) MiB"
      sed -n '/^method /,/^$/p' "$RUNS/c.log" | tee -a "$SUMMARY"
      ;;
  esac
done

(cd "$RUNS" && find . \( -name '*.log' -o -name metrics.jsonl -o -name config.yaml -o -name summary.json \
  -o -name errors.log \) -size -20M -print0 | tar -czf "$RESULTS/logs.tar.gz" --null -T -)
note "gpu_check: done in $((BUDGET - (deadline - SECONDS))) s; results in $RESULTS"
