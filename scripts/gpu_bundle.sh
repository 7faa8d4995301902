#!/usr/bin/env bash
# Download every wheel the GPU stack needs into one folder, for a machine that cannot reach a package index (an
# air-gapped cluster, a GPU box behind a job runner). Run it on a connected machine; install the folder with
# scripts/gpu_install.sh.
#
# Usage: bash scripts/gpu_bundle.sh [options]
#
#   -o, --out DIR            the bundle folder; created, must be absent or empty            [gpu-bundle]
#   --python-version X.Y     the target's Python                                          [3.12]
#   --platform TAG           a wheel platform tag the target accepts; repeatable  [manylinux x86_64, glibc 2.5-2.39]
#   --only REQ               bundle this requirement instead of the GPU stack; repeatable
#   -r, --requirements FILE  requirements from a file (with --only: both)
#   --ours LIST              distributions of this checkout built as wheels: a comma list of `core` and folder names
#                            under plugins/, `all`, or `none`     [core,agentr1-model-smollm2,agentr1-tools-search]
#   --have FILE              what the target already has, as a `pip freeze` of it; repeatable. `name==version` lines
#                            are reused wherever they satisfy the stack (what does not fit is bundled in a version
#                            that does); bare names are never bundled
#   --exclude PATTERN        never bundle a distribution whose name matches (shell pattern, e.g. 'nvidia-*');
#                            repeatable
#   -c, --constraint FILE    pip constraints for the resolution; repeatable
#   --ours-only              bundle our wheels and their dependencies alone (no GPU stack: enough for the local
#                            backend on the target's own torch)
#   --build REQ              a requirement published only as a source archive: built here into a wheel (it must be
#                            pure Python) and offered to the resolution; repeatable    [antlr4-python3-runtime==4.9.3]
#   --no-deps                bundle exactly the requirements and our wheels, no dependencies
#   --split-mb N             split files larger than N MiB into parts of N MiB (N may be fractional), so that no
#                            file is larger than what a transfer allows
#   --python PY              the interpreter whose pip resolves and downloads; an older pip than 24 is upgraded in a
#                            private environment first                                   [$PYTHON, else python3]
#   -h, --help               this text
#
# The GPU stack (the default requirements): vllm==0.24.0 (its wheel is 266 MiB, pins torch 2.11.0 and links
# libcudart.so.13), verl==0.9.1 with transformers==5.9.0 (verl wants < 5.11), ray[default]==2.60.0, fastapi,
# uvicorn, their dependencies, and our wheels (core, the offline model, the search tools of the hotpotqa recipes).
# hydra-core (verl) needs antlr4-python3-runtime 4.9, which has no wheel: --build makes one here (without it, pip
# would settle for a hydra-core from 2019 that has no such dependency).
# The resolution is pip's own, for the target's Python and platform (--only-binary=:all:): every `--have` pin is
# installed as an empty stand-in package into a scratch environment, so pip keeps what the target has where it fits
# and fetches nothing of it (pass the target's torch there, and nothing of CUDA's wheels is downloaded).
#
# The folder holds the wheels (or their parts, FILE.part-000, -001, ...), MANIFEST (one row per wheel: file, size,
# SHA-256, number of parts; the options in its header) and SHA256SUMS (every file as delivered, `sha256sum -c`
# format). Example, for a target with torch 2.11.0 and Python 3.12, in parts of at most 48 MiB:
#
#   bash scripts/gpu_bundle.sh --out /data/agentr1-gpu --have target-freeze.txt --exclude 'nvidia-*' --split-mb 48
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "gpu_bundle: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

OUT=gpu-bundle
PY_VERSION=3.12
PLATFORMS=()
REQS=()
REQ_FILES=()
OURS=core,agentr1-model-smollm2,agentr1-tools-search
HAVE_FILES=()
EXCLUDES=()
CONSTRAINTS=()
NO_DEPS=0
OURS_ONLY=0
BUILDS=()
BUILDS_GIVEN=0
SPLIT_MB=""
PY=${PYTHON:-python3}
DEFAULT_REQS=("vllm==0.24.0" "verl==0.9.1" "transformers==5.9.0" "ray[default]==2.60.0" "fastapi" "uvicorn")
DEFAULT_BUILDS=("antlr4-python3-runtime==4.9.3")

need_value() { if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (see --help)"; fi; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    -o|--out) need_value "$@"; OUT=$2; shift 2 ;;
    --python-version) need_value "$@"; PY_VERSION=$2; shift 2 ;;
    --platform) need_value "$@"; PLATFORMS+=("$2"); shift 2 ;;
    --only) need_value "$@"; REQS+=("$2"); shift 2 ;;
    -r|--requirements) need_value "$@"; REQ_FILES+=("$2"); shift 2 ;;
    --ours) need_value "$@"; OURS=$2; shift 2 ;;
    --have) need_value "$@"; HAVE_FILES+=("$2"); shift 2 ;;
    --exclude) need_value "$@"; EXCLUDES+=("$2"); shift 2 ;;
    -c|--constraint) need_value "$@"; CONSTRAINTS+=("$2"); shift 2 ;;
    --no-deps) NO_DEPS=1; shift ;;
    --ours-only) OURS_ONLY=1; shift ;;
    --build) need_value "$@"; BUILDS+=("$2"); BUILDS_GIVEN=1; shift 2 ;;
    --split-mb) need_value "$@"; SPLIT_MB=$2; shift 2 ;;
    --python) need_value "$@"; PY=$2; shift 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# -- checks, before anything is downloaded --------------------------------------------------------------------------
[[ "$PY_VERSION" =~ ^3\.[0-9]+$ ]] || die "--python-version must look like 3.12, got '$PY_VERSION'"
SPLIT_BYTES=0
if [ -n "$SPLIT_MB" ]; then
  [[ "$SPLIT_MB" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--split-mb must be a positive number of MiB, got '$SPLIT_MB'"
  SPLIT_BYTES=$(awk -v mb="$SPLIT_MB" 'BEGIN { printf "%d", mb * 1048576 }')
  [ "$SPLIT_BYTES" -ge 1024 ] || die "--split-mb $SPLIT_MB is below 1 KiB per part"
fi
for f in "${REQ_FILES[@]}" "${HAVE_FILES[@]}" "${CONSTRAINTS[@]}"; do
  [ -f "$f" ] || die "no such file: $f"
done
command -v "$PY" >/dev/null 2>&1 || die "no Python interpreter '$PY' (set --python or PYTHON)"
"$PY" -c 'import venv' 2>/dev/null || die "$PY cannot create virtual environments (the venv module is missing)"
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
  die "$OUT exists and is not empty: name a new folder with --out"
fi
if [ "${#PLATFORMS[@]}" -eq 0 ]; then
  PLATFORMS=(manylinux1_x86_64 manylinux2010_x86_64 manylinux2014_x86_64)
  for n in $(seq 5 39); do PLATFORMS+=("manylinux_2_${n}_x86_64"); done
fi
if [ "$OURS_ONLY" -eq 1 ]; then
  if [ "${#REQS[@]}" -gt 0 ] || [ "${#REQ_FILES[@]}" -gt 0 ]; then
    die "--ours-only takes no --only or --requirements"
  fi
  [ "$OURS" != none ] || die "--ours-only with --ours none leaves nothing to bundle"
elif [ "${#REQS[@]}" -eq 0 ] && [ "${#REQ_FILES[@]}" -eq 0 ]; then
  REQS=("${DEFAULT_REQS[@]}")
  [ "$BUILDS_GIVEN" -eq 1 ] || BUILDS=("${DEFAULT_BUILDS[@]}")
fi

OUR_DIRS=()
case "$OURS" in
  none) ;;
  all) OUR_DIRS=("$ROOT")
       for d in "$ROOT"/plugins/*/; do [ -f "$d/pyproject.toml" ] && OUR_DIRS+=("${d%/}"); done ;;
  *) IFS=, read -r -a names <<< "$OURS"
     for name in "${names[@]}"; do
       if [ "$name" = core ]; then OUR_DIRS+=("$ROOT")
       elif [ -f "$ROOT/plugins/$name/pyproject.toml" ]; then OUR_DIRS+=("$ROOT/plugins/$name")
       else die "--ours: no distribution '$name' (core or a folder under plugins/)"
       fi
     done ;;
esac

HOST_VERSION=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$HOST_VERSION" != "$PY_VERSION" ]; then
  echo "gpu_bundle: warning: $PY is Python $HOST_VERSION; pip reads environment markers (python_version > ...) for" \
    "$HOST_VERSION, not $PY_VERSION: --python with a Python $PY_VERSION resolves exactly what the target needs" >&2
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# -- a pip that can resolve for another platform (pip >= 24: --dry-run --report with --platform) -------------------
PIP_PY=$PY
if ! "$PY" -c 'import sys; from pip import __version__ as v; sys.exit(int(v.split(".")[0]) < 24)' 2>/dev/null; then
  echo "gpu_bundle: the pip of $PY is older than 24; upgrading it in a private environment"
  "$PY" -m venv "$WORK/pip"
  "$WORK/pip/bin/python" -m pip install -q --upgrade "pip>=24"
  PIP_PY=$WORK/pip/bin/python
fi
TARGET=(--only-binary=:all: --python-version "$PY_VERSION" --implementation cp)
for p in "${PLATFORMS[@]}"; do TARGET+=(--platform "$p"); done
REQ_ARGS=()
for r in "${REQS[@]}"; do REQ_ARGS+=("$r"); done
for f in "${REQ_FILES[@]}"; do REQ_ARGS+=(-r "$f"); done
CONSTRAINT_ARGS=()
for f in "${CONSTRAINTS[@]}"; do CONSTRAINT_ARGS+=(-c "$f"); done
t0=$SECONDS

# -- our distributions, built from this checkout ----------------------------------------------------------------------
OUR_WHEELS=()
if [ "${#OUR_DIRS[@]}" -gt 0 ]; then
  echo "gpu_bundle: building ${#OUR_DIRS[@]} wheel(s) of this checkout"
  "$PIP_PY" -m pip wheel -q --no-deps -w "$WORK/ours" "${OUR_DIRS[@]}"
  for w in "$WORK"/ours/*.whl; do cp "$w" "$OUT/"; OUR_WHEELS+=("$OUT/$(basename "$w")"); done
fi

# -- source-only requirements, built here into wheels --------------------------------------------------------------
if [ "${#BUILDS[@]}" -gt 0 ]; then
  echo "gpu_bundle: building ${#BUILDS[@]} wheel(s) from source archives: ${BUILDS[*]}"
  "$PIP_PY" -m pip wheel -q --no-deps --no-binary :all: -w "$WORK/built" "${BUILDS[@]}"
  for w in "$WORK"/built/*.whl; do
    case "$w" in
      *-none-any.whl) cp "$w" "$OUT/" ;;
      *) die "$(basename "$w") is not pure Python: it cannot be built here for another platform" ;;
    esac
  done
fi

# -- the resolution: which wheels, in which versions ---------------------------------------------------------------
if [ "$NO_DEPS" -eq 1 ]; then
  if [ "${#REQ_ARGS[@]}" -gt 0 ]; then
    echo "gpu_bundle: downloading the requirements alone (--no-deps)"
    "$PIP_PY" -m pip download -q --no-deps "${TARGET[@]}" "${CONSTRAINT_ARGS[@]}" -d "$OUT" "${REQ_ARGS[@]}"
  fi
else
  # What the target has: one empty stand-in wheel per pinned line, installed into a scratch environment.
  "$PY" -m venv --without-pip "$WORK/have-env"
  "$PIP_PY" - "$WORK/stubs" "$WORK/skip-names" "${HAVE_FILES[@]}" <<'EOF'
import base64, hashlib, re, sys, zipfile
from pathlib import Path
stubs, skip_file, have_files = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
stubs.mkdir(parents=True, exist_ok=True)
skip = []
for path in have_files:
    for raw in Path(path).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        pinned = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*([A-Za-z0-9.+!_-]+)", line)
        if not pinned:  # a bare name, or `name @ url`: never bundled, nothing to stand in for it
            name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
            if not name:
                sys.exit(f"gpu_bundle: cannot read the line '{raw}' of {path}")
            skip.append(name.group(0))
            continue
        name, version = pinned.group(1), pinned.group(3)
        stem = re.sub(r"[-_.]+", "_", name).lower()
        info = f"{stem}-{version}.dist-info"
        files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                 f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpu_bundle\nRoot-Is-Purelib: true\n"
                                  "Tag: py3-none-any\n"}
        record = []
        for member, text in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(text.encode())}")
        files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
        with zipfile.ZipFile(stubs / f"{stem}-{version}-py3-none-any.whl", "w") as wheel:
            for member, text in files.items():
                wheel.writestr(member, text)
skip_file.write_text("".join(f"{n}\n" for n in skip))
EOF
  shopt -s nullglob
  stubs=("$WORK"/stubs/*.whl)
  shopt -u nullglob
  if [ "${#stubs[@]}" -gt 0 ]; then
    "$PIP_PY" -m pip --python "$WORK/have-env/bin/python" install -q --no-index --no-deps "${stubs[@]}"
  fi
  echo "gpu_bundle: resolving for Python $PY_VERSION (${#stubs[@]} packages of the target kept where they fit)"
  FIND_OURS=(--find-links "$OUT")
  "$PIP_PY" -m pip --python "$WORK/have-env/bin/python" install -q --dry-run --report "$WORK/report.json" \
    "${TARGET[@]}" "${CONSTRAINT_ARGS[@]}" "${FIND_OURS[@]}" "${REQ_ARGS[@]}" "${OUR_WHEELS[@]}" \
    || die "pip could not resolve the stack for Python $PY_VERSION (its message is above)"
  # The download list: resolved, not ours, not kept from the target, not excluded; pinned with the resolved hash.
  "$PIP_PY" - "$WORK/report.json" "$WORK/skip-names" "$WORK/download.txt" "$OUT" "${EXCLUDES[@]}" <<'EOF'
import fnmatch, json, re, sys
from pathlib import Path
report, skip_file, out_file, bundle, patterns = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
skip = {norm(n) for n in Path(skip_file).read_text().split()}
lines, left_out = [], []
for item in json.loads(Path(report).read_text())["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    url = item["download_info"]["url"]
    if url.startswith("file://") and Path(url[len("file://"):]).parent == Path(bundle):
        continue  # one of our wheels, already in the folder
    if norm(name) in skip or any(fnmatch.fnmatch(norm(name), norm(p)) for p in patterns):
        left_out.append(f"{name}=={version}")
        continue
    sha = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
    lines.append(f"{name}=={version}" + (f" --hash=sha256:{sha}" if sha else ""))
if left_out:
    print(f"gpu_bundle: left out ({len(left_out)}, --have or --exclude): {' '.join(sorted(left_out))}")
Path(out_file).write_text("".join(f"{line}\n" for line in lines))
if lines and any("--hash" not in line for line in lines):  # pip wants all or none
    Path(out_file).write_text("".join(f"{line.split()[0]}\n" for line in lines))
EOF
  n=$(wc -l < "$WORK/download.txt")
  echo "gpu_bundle: downloading $n wheel(s)"
  if [ "$n" -gt 0 ]; then
    "$PIP_PY" -m pip download -q --no-deps "${TARGET[@]}" -d "$OUT" -r "$WORK/download.txt"
  fi
fi

# -- MANIFEST (whole files), parts, SHA256SUMS (files as delivered) --------------------------------------------------
shopt -s nullglob
wheels=("$OUT"/*.whl)
shopt -u nullglob
[ "${#wheels[@]}" -gt 0 ] || die "nothing was bundled (every requirement is on the target or excluded)"
{
  echo "# agentr1 offline bundle, written by scripts/gpu_bundle.sh; install with scripts/gpu_install.sh FOLDER"
  echo "# created: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# python-version: $PY_VERSION"
  echo "# platforms: ${PLATFORMS[*]}"
  echo "# requirements: ${REQS[*]} ${REQ_FILES[*]}"
  echo "# ours: $OURS"
  echo "# have: ${HAVE_FILES[*]}"
  echo "# exclude: ${EXCLUDES[*]}"
  echo "# no-deps: $NO_DEPS"
  echo "# split-bytes: $SPLIT_BYTES"
  echo "# columns: file size sha256 parts (0: the file itself; N: FILE.part-000 .. FILE.part-<N-1>, joined in order)"
} > "$OUT/MANIFEST"
total=0
for w in "${wheels[@]}"; do
  file=$(basename "$w")
  size=$(stat -c %s "$w")
  sum=$(sha256sum "$w" | cut -d' ' -f1)
  parts=0
  if [ "$SPLIT_BYTES" -gt 0 ] && [ "$size" -gt "$SPLIT_BYTES" ]; then
    split -b "$SPLIT_BYTES" -d -a 3 "$w" "$w.part-"
    rm "$w"
    parts=$(find "$OUT" -maxdepth 1 -name "$file.part-*" | wc -l)
  fi
  echo "$file $size $sum $parts" >> "$OUT/MANIFEST"
  total=$((total + size))
done
(cd "$OUT" && find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | xargs sha256sum > "$WORK/SHA256SUMS")
mv "$WORK/SHA256SUMS" "$OUT/SHA256SUMS"
files=$(wc -l < "$OUT/SHA256SUMS")
echo "gpu_bundle: ${#wheels[@]} wheels, $((total / 1048576)) MiB, $files files in $OUT ($((SECONDS - t0)) s)"
