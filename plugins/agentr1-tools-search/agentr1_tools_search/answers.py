"""Answer scoring with the official HotpotQA normalisation: exact match and token F1, max over gold aliases.

normalise = lower-case, delete punctuation, replace the articles a/an/the by a space, collapse whitespace. For F1, a
prediction or gold of ``yes``/``no``/``noanswer`` scores 0 unless both are equal. ``extract_answer`` reads the last
``<answer>...</answer>`` of a model turn. No I/O here.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in SPECIAL or ref in SPECIAL) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def as_answers(gold: Any) -> list[str]:
    """Gold answers as a list of strings (a string, a list, or a dict with ``target``/``aliases``)."""
    if gold is None:
        return []
    if isinstance(gold, str):
        return [gold]
    if isinstance(gold, dict):
        return as_answers(gold.get("target")) + as_answers(gold.get("aliases"))
    if isinstance(gold, Iterable):
        return [str(g) for g in gold if g is not None]
    return [str(gold)]


def best_score(prediction: str, gold: Any, metric=exact_match) -> float:
    """``metric`` of ``prediction`` against each gold alias; the maximum (0 when there is no gold)."""
    return max((metric(prediction, g) for g in as_answers(gold)), default=0.0)


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` in ``text``, stripped; None when there is none."""
    found = ANSWER_TAG.findall(text or "")
    return found[-1].strip() if found else None
