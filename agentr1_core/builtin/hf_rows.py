"""The ``hf`` dataset: rows from a Hugging Face ``datasets`` dataset, through a small declared field mapping.

``path`` is a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` (read with
``load_from_disk``), a data file (``.parquet``, ``.jsonl``/``.json``, ``.csv``), a folder of such files, or a dataset
name on the Hugging Face Hub (``load_dataset(path, subset)``; the Hub needs the network or its cache). ``split``
picks a split; it may be left out only when the dataset has one.

Each record becomes a row: its columns as they are, then ``fields`` (``{row key: column}``) copies a column to a row
key, dotted paths on both sides (``reward_model.ground_truth: answer``, ``prompt: conversation.question``); the key
``ground_truth`` stands for ``reward_model.ground_truth``. A field that names a column the dataset does not have is
one error naming every such field, the close column names and all columns, before any row is read. The rows are then
checked like those of any dataset (``agentr1_core.rows``), each named ``<dataset> row N``.

``datasets`` is an optional install (``pip install datasets``; the core's ``datasets`` extra from a checkout);
without it, using this dataset is one config error. Importing this module imports nothing beyond the standard library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentr1_core.errors import ConfigError, one_line, suggest
from agentr1_core.jsonl import FileRows

FIELD_ALIASES = {"ground_truth": "reward_model.ground_truth"}  # short row keys a field mapping may use
FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


class DatasetRows(FileRows):
    """Rows of a dataset, each named ``<dataset> row N`` by the row checks."""

    def where(self, index: int) -> str | None:
        return f"{self.path} row {index + 1}" if 0 <= index < len(self) else None


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise ConfigError("the hf dataset needs the package 'datasets', which is not installed; "
                          "pip install datasets") from None
    return datasets


def _saved_folder(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in ("state.json", "dataset_dict.json"))


def _open(path: str, subset: str) -> Any:
    """The dataset or dataset dict at ``path``, read without the library's progress bars (the
    run's checks print one line per problem, nothing else)."""
    datasets = _import_datasets()
    was_shown = not datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        return _load(datasets, path, subset)
    finally:
        if was_shown:
            datasets.enable_progress_bars()


def _load(datasets: Any, path: str, subset: str) -> Any:
    local = Path(path).expanduser()
    if _saved_folder(local):
        return datasets.load_from_disk(str(local))
    if local.is_file():
        builder = FILE_BUILDERS.get(local.suffix.lower())
        if builder is None:
            raise ConfigError(f"{path}: a data file must be one of {', '.join(FILE_BUILDERS)}")
        return datasets.load_dataset(builder, data_files=str(local))
    if not local.exists() and (path.startswith((".", "/", "~")) or path.count("/") > 1):
        raise ConfigError(f"dataset folder not found: {path}")
    return datasets.load_dataset(str(local) if local.exists() else path, subset or None)  # every split: one is picked


def _one_split(data: Any, label: str, split: str) -> Any:
    if not isinstance(data, dict):  # a Dataset; a DatasetDict is a dict of them
        return data
    splits = list(data)
    if split:
        if split not in splits:
            raise ConfigError(f"{label} has no split {split!r}{suggest(split, splits)}; its splits: "
                              f"{', '.join(splits)}")
        return data[split]
    if len(splits) != 1:
        raise ConfigError(f"{label} has the splits {', '.join(splits)}; name one (split: NAME, or hf:PATH:SPLIT)")
    return data[splits[0]]


def _lookup(record: Any, path: str) -> Any:
    node = record
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _put(row: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = row
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def _mapping(fields: dict[str, Any] | None, columns: list[str], label: str) -> list[tuple[str, str]]:
    """``[(row key, column path)]``; every field that names a missing column is one error, all together."""
    mapping, bad = [], []
    for target, source in (fields or {}).items():
        target, source = FIELD_ALIASES.get(str(target), str(target)), str(source)
        if not target or not source:
            bad.append(f"{target or '?'}={source or '?'} (both sides must be non-empty)")
            continue
        top = source.split(".")[0]
        if top not in columns:
            bad.append(f"{target}={source}{suggest(top, columns)}")
        mapping.append((target, source))
    if bad:
        raise ConfigError(f"fields name columns that {label} does not have: {'; '.join(bad)}; its columns: "
                          f"{', '.join(columns)}")
    return mapping


def load_hf_rows(path: str = "", split: str = "", subset: str = "", fields: dict[str, Any] | None = None,
                 data_source: str = "", limit: int = 0) -> DatasetRows:
    """Rows from the dataset at ``path`` (see the module's docstring); ``data_source`` for rows without one, at most
    ``limit`` rows (0: all)."""
    if not path:
        raise ConfigError("the hf dataset needs a path (a saved dataset folder, a data file or folder, or a Hub name)")
    label = f"hf:{path}" + (f":{split}" if split else "")
    try:
        data = _one_split(_open(path, subset), label, split)
    except ConfigError:
        raise
    except Exception as exc:  # the library's own errors: a missing file, an unknown builder, no network
        raise ConfigError(f"cannot load {label}: {one_line(exc)}") from exc
    columns = list(data.column_names)
    mapping = _mapping(fields, columns, label)
    rows = DatasetRows(label)
    for index, record in enumerate(data):
        if 0 < limit <= index:
            break
        row = dict(record)
        for target, source in mapping:
            _put(row, target, _lookup(record, source))
        if data_source and row.get("data_source") is None:
            row["data_source"] = data_source
        rows.add(row, index + 1)
    return rows
