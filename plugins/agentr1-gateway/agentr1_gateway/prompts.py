"""A request's prompt: its chat template rendered to text, a cheap bound on its length, and its token ids.

``prompt_ids`` of core's ``render_prompt`` is the chat template rendered to text and that text encoded without added
special tokens; the gateway does the two halves apart (``render`` then ``encode``, the same ids) so that it can look
at the text's length in between. The gateway runs both off the event loop.

The bound: no token of a tokenizer stands for more than ``most_chars_per_token`` characters of the text it encodes,
so a text of more than ``max_tokens * most_chars_per_token`` characters has more than ``max_tokens`` tokens, and is
refused without being encoded. That holds when the tokenizer never drops or merges characters of its input:

* a BPE model that can write every input (a byte-level pre-tokenizer, or ``byte_fallback``): each token is a piece of
  the normalised text, at most as long as the longest entry of the vocabulary (added tokens included; a byte-level
  entry has one symbol per byte, and a character is at least one byte);
* a normaliser that only keeps or adds characters (none, NFD/NFKD, lowercasing, ``Prepend``, a ``Replace`` by a
  string at least as long) or composes them (NFC/NFKC: one character of the output stands for at most
  ``COMPOSITION`` of the input, which multiplies the bound), and a pre-tokenizer that only splits (byte-level,
  digits, punctuation, ``Metaspace``, a ``Split`` that keeps what it splits on);
* no added token that swallows the whitespace beside it (``lstrip``/``rstrip``).

For any other tokenizer (whitespace-dropping pre-tokenizers, ``Strip``/``StripAccents``/BERT/SentencePiece
normalisers, Unigram and WordPiece models, slow tokenizers) there is no sound bound from the length: ``char_limit`` is
None and every prompt is encoded (off the loop; the request body's size cap bounds the work).
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

from agentr1_gateway.chat import BadRequest

COMPOSITION = 4  # the most code points NFC/NFKC compose into one (a canonical decomposition has at most 4)
_KEEPING_NORMALIZERS = {"NFD", "NFKD", "Lowercase", "Prepend", "ByteLevel", "Sequence"}
_COMPOSING_NORMALIZERS = {"NFC", "NFKC"}
_SPLITTING_PRE_TOKENIZERS = {"ByteLevel", "Digits", "Punctuation", "Metaspace", "UnicodeScripts", "Split", "Sequence"}

_cache: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def render(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The prompt text of ``messages`` (chat template, generation prompt added); ``BadRequest`` when the model's
    template refuses them (some templates raise on a role order they do not support)."""
    from jinja2 import TemplateError

    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except TemplateError as exc:
        raise BadRequest(f"the model's chat template refused these messages: {exc}", "messages") from None


def encode(tokenizer: Any, text: str) -> list[int]:
    """The token ids of a rendered prompt: what ``apply_chat_template(..., tokenize=True)`` gives."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def char_limit(tokenizer: Any, max_tokens: int) -> int | None:
    """The most characters a prompt of at most ``max_tokens`` tokens can have; None when the tokenizer gives no
    sound bound (see the module docstring)."""
    most = most_chars_per_token(tokenizer)
    return None if most is None else max_tokens * most


def most_chars_per_token(tokenizer: Any) -> int | None:
    """The most input characters one token of ``tokenizer`` can stand for, or None (cached per tokenizer)."""
    try:
        with _cache_lock:
            if tokenizer in _cache:
                return _cache[tokenizer]
    except TypeError:  # not weakly referenceable: measured every time
        return _measure(tokenizer)
    most = _measure(tokenizer)
    with _cache_lock:
        _cache[tokenizer] = most
    return most


def _measure(tokenizer: Any) -> int | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.model).__name__ != "BPE":
        return None
    pre = _state(backend.pre_tokenizer)
    if not (_types(pre) & {"ByteLevel"} or getattr(backend.model, "byte_fallback", False)):
        return None
    if not all(_splits_only(node) for node in _nodes(pre)):
        return None
    factor = 1
    for node in _nodes(_state(backend.normalizer)):
        if node.get("type") in _COMPOSING_NORMALIZERS:
            factor = COMPOSITION
        elif not _keeps_characters(node):
            return None
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    if any(getattr(token, "lstrip", False) or getattr(token, "rstrip", False) for token in added.values()):
        return None
    vocab = tokenizer.get_vocab()
    return factor * max(max(map(len, vocab)), max((len(str(t)) for t in added.values()), default=1))


def _state(component: Any) -> dict[str, Any] | None:
    """A tokenizer component's own JSON (its type and options), or None."""
    if component is None:
        return None
    return json.loads(component.__getstate__())


def _nodes(state: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The component and, for a ``Sequence``, every member, flattened."""
    if state is None:
        return []
    members = state.get("normalizers") or state.get("pretokenizers") or []
    return [state] + [node for member in members for node in _nodes(member)]


def _types(state: dict[str, Any] | None) -> set[str]:
    return {node.get("type", "") for node in _nodes(state)}


def _splits_only(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind not in _SPLITTING_PRE_TOKENIZERS:
        return False
    return kind != "Split" or node.get("behavior") != "Removed"


def _keeps_characters(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind in _KEEPING_NORMALIZERS:
        return True
    if kind == "Replace":
        pattern = (node.get("pattern") or {}).get("String")
        return isinstance(pattern, str) and len(node.get("content") or "") >= len(pattern)
    return False
