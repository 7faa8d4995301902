#!/usr/bin/env bash
# Install a folder written by scripts/gpu_bundle.sh, with no package index: check every file against SHA256SUMS,
# join the split wheels and check each against MANIFEST, then install them with pip --no-index.
#
# Usage: bash scripts/gpu_install.sh FOLDER [--target DIR | --venv DIR] [options]
#
#   --target DIR             install into DIR (pip --target, no dependency resolution: the bundle is already a
#                            resolved set); use it with PYTHONPATH=DIR next to the target's own packages (torch)
#   --venv DIR               install into the virtual environment DIR, created first if it does not exist
#   --system-site-packages   a created --venv also sees the packages of the Python that creates it (its torch)
#   --no-deps                install the wheels as they are, without pip checking their dependencies (always so
#                            with --target)
#   --check-only             check and join, install nothing
#   --python PY              the Python that installs (or creates the --venv)                [$PYTHON, else python3]
#   -h, --help               this text
#
# Without --target or --venv the wheels go into PY's own environment. pip reads nothing but FOLDER: its
# configuration files and index settings (PIP_INDEX_URL, PIP_FIND_LINKS, ...) are ignored.
#
# Exit codes: 0 installed; 2 bad arguments, a missing file or part, or a checksum mismatch (nothing is installed
# then); pip's own code when pip fails.
set -euo pipefail

die() { echo "gpu_install: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

FOLDER=""
TARGET=""
VENV=""
SYSTEM_SITE=0
NO_DEPS=0
CHECK_ONLY=0
PY=${PYTHON:-python3}

need_value() { if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (see --help)"; fi; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --target) need_value "$@"; TARGET=$2; shift 2 ;;
    --venv) need_value "$@"; VENV=$2; shift 2 ;;
    --system-site-packages) SYSTEM_SITE=1; shift ;;
    --no-deps) NO_DEPS=1; shift ;;
    --check-only) CHECK_ONLY=1; shift ;;
    --python) need_value "$@"; PY=$2; shift 2 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$FOLDER" ] || die "one FOLDER only (got '$FOLDER' and '$1')"; FOLDER=$1; shift ;;
  esac
done
[ -n "$FOLDER" ] || die "no FOLDER given (see --help)"
[ -d "$FOLDER" ] || die "no such folder: $FOLDER"
[ -z "$TARGET" ] || [ -z "$VENV" ] || die "--target and --venv exclude each other"
[ -f "$FOLDER/SHA256SUMS" ] || die "$FOLDER has no SHA256SUMS: not a folder written by scripts/gpu_bundle.sh"
[ -f "$FOLDER/MANIFEST" ] || die "$FOLDER has no MANIFEST: not a folder written by scripts/gpu_bundle.sh"
FOLDER=$(cd "$FOLDER" && pwd)

# -- every file as delivered -------------------------------------------------------------------------------------------
missing=()
bad=()
checked=0
while read -r sum file; do
  [ -n "${sum:-}" ] || continue
  file=${file#\*}
  if [ ! -f "$FOLDER/$file" ]; then missing+=("$file"); continue; fi
  [ "$(sha256sum "$FOLDER/$file" | cut -d' ' -f1)" = "$sum" ] || bad+=("$file")
  checked=$((checked + 1))
done < "$FOLDER/SHA256SUMS"
grep -q ' MANIFEST$' "$FOLDER/SHA256SUMS" || die "SHA256SUMS does not list MANIFEST"
if [ "${#missing[@]}" -gt 0 ] || [ "${#bad[@]}" -gt 0 ]; then
  for f in "${missing[@]}"; do echo "gpu_install: missing: $f" >&2; done
  for f in "${bad[@]}"; do echo "gpu_install: checksum mismatch: $f" >&2; done
  die "$FOLDER is incomplete or damaged (${#missing[@]} missing, ${#bad[@]} damaged of" \
    "$((checked + ${#missing[@]})) files); copy those again"
fi

# -- join the parts; every wheel checked against MANIFEST -------------------------------------------------------------
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/wheels"
wheels=()
while read -r file size sum parts; do
  case "$file" in ''|'#'*) continue ;; esac
  [[ "$parts" =~ ^[0-9]+$ ]] || die "MANIFEST: cannot read the row of $file"
  if [ "$parts" -eq 0 ]; then
    [ -f "$FOLDER/$file" ] || die "missing: $file (listed in MANIFEST)"
    ln -s "$FOLDER/$file" "$WORK/wheels/$file"
  else
    for ((i = 0; i < parts; i++)); do
      part=$(printf '%s.part-%03d' "$file" "$i")
      [ -f "$FOLDER/$part" ] || die "missing: $part (part $((i + 1)) of $parts of $file)"
      cat "$FOLDER/$part" >> "$WORK/wheels/$file"
    done
  fi
  got=$(sha256sum "$WORK/wheels/$file" | cut -d' ' -f1)
  [ "$got" = "$sum" ] || die "checksum mismatch: $file (joined from $parts parts) is not the file that was bundled"
  [ "$(stat -L -c %s "$WORK/wheels/$file")" = "$size" ] || die "size mismatch: $file"
  wheels+=("$WORK/wheels/$file")
done < "$FOLDER/MANIFEST"
[ "${#wheels[@]}" -gt 0 ] || die "MANIFEST lists no wheel"
echo "gpu_install: $checked files and ${#wheels[@]} wheels checked"
[ "$CHECK_ONLY" -eq 0 ] || exit 0

# -- install, from the folder alone -----------------------------------------------------------------------------------
if [ -n "$VENV" ] && [ ! -x "$VENV/bin/python" ]; then
  command -v "$PY" >/dev/null 2>&1 || die "no Python interpreter '$PY' to create $VENV (set --python or PYTHON)"
  flags=()
  [ "$SYSTEM_SITE" -eq 0 ] || flags=(--system-site-packages)
  "$PY" -m venv "${flags[@]}" "$VENV"
fi
[ -z "$VENV" ] || PY=$VENV/bin/python
command -v "$PY" >/dev/null 2>&1 || die "no Python interpreter '$PY' (set --python or PYTHON)"
PIP=(env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_FIND_LINKS -u PIP_NO_INDEX -u PIP_CONSTRAINT
     -u PIP_REQUIREMENT PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
     "$PY" -m pip install --no-index --find-links "$WORK/wheels" --no-cache-dir)
if [ -n "$TARGET" ]; then
  mkdir -p "$TARGET"
  "${PIP[@]}" -q --no-deps --upgrade --target "$TARGET" "${wheels[@]}"
  echo "gpu_install: ${#wheels[@]} wheels installed into $TARGET (use it with PYTHONPATH=$TARGET)"
else
  [ "$NO_DEPS" -eq 0 ] || PIP+=(--no-deps)
  "${PIP[@]}" -q "${wheels[@]}"
  echo "gpu_install: ${#wheels[@]} wheels installed for $PY"
fi
