"""An episode's calls as a tree: which earlier call each call continues, or which one it branched from.

A harness does not always grow one history. It may compact it (the prompt drops middle turns and adds a summary),
start a subagent with a fresh context, or run calls in parallel from one prefix. ``link_calls`` reads the calls'
token ids only (the prompt ids sent to the engine and the response ids it returned; nothing is re-tokenised) and
links each call, in arrival order:

* a **continuation**: the latest earlier call whose ``prompt_ids + response_ids`` is a prefix of this call's prompt
  ids (the longest such sequence; among equal ones, the latest) is its ``parent``, on the same ``branch``;
* a **new branch** otherwise: ``branch_of`` is the earlier call sharing the longest common token prefix with this
  call's prompt (among equal ones, the latest) and ``shared_prefix_tokens`` that prefix's length (the system prompt
  alone is often all that is shared; it can be 0);
* a **fork**: a call that continues a call whose branch already went on (two calls sent in parallel from the same
  reply) starts a new branch too, with ``branch_of`` that call and ``shared_prefix_tokens`` its whole prompt and
  response. The first continuation to arrive keeps the branch.

The first call is the root of branch 0; branches are numbered in the order they start. A later call of a branch
attaches to its latest call that it extends, so the main agent's next call after a subagent's answer continues the
main branch, not the subagent's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Link", "common_prefix", "link_calls", "link_info"]

CHUNK = 256  # ids compared per slice while looking for the first difference


@dataclass(frozen=True)
class Link:
    """Where one call sits in its episode's tree."""

    parent: int | None  # the earlier call this one continues on the same branch; None when it starts a branch
    branch: int  # 0 for the first call's branch, then 1, 2, ... in the order branches start
    branch_of: int | None = None  # for a branch start after the first call: the call it branched from
    shared_prefix_tokens: int | None = None  # for a branch start after the first call: ids shared with branch_of


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading ids ``a`` and ``b`` share (compared slice by slice, then id by id)."""
    n = min(len(a), len(b))
    start = 0
    while start < n:
        end = min(start + CHUNK, n)
        if a[start:end] != b[start:end]:
            return next(i for i in range(start, end) if a[i] != b[i])
        start = end
    return n


def link_calls(calls: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[Link]:
    """The ``Link`` of every call, given each call's ``(prompt_ids, response_ids)`` in arrival order."""
    seqs: list[list[int]] = []
    links: list[Link] = []
    tips: list[int] = []  # per branch, its latest call
    for k, (prompt, response) in enumerate(calls):
        prompt = list(prompt)
        link = _link(k, prompt, seqs, links, tips)
        if link.branch == len(tips):
            tips.append(k)
        else:
            tips[link.branch] = k
        links.append(link)
        seqs.append(prompt + list(response))
    return links


def _link(k: int, prompt: list[int], seqs: list[list[int]], links: list[Link], tips: list[int]) -> Link:
    if k == 0:
        return Link(parent=None, branch=0)
    # the longest (then latest) earlier sequence that is a prefix of the prompt: in a chain the first one tried
    candidates = sorted((j for j in range(k) if len(seqs[j]) <= len(prompt)), key=lambda i: (len(seqs[i]), i),
                        reverse=True)
    j = next((j for j in candidates if common_prefix(prompt, seqs[j]) == len(seqs[j])), None)
    if j is not None:
        if tips[links[j].branch] == j:
            return Link(parent=j, branch=links[j].branch)
        return Link(parent=None, branch=len(tips), branch_of=j, shared_prefix_tokens=len(seqs[j]))  # a fork
    shared = [common_prefix(prompt, seqs[j]) for j in range(k)]
    j = max(range(k), key=lambda i: (shared[i], i))
    return Link(parent=None, branch=len(tips), branch_of=j, shared_prefix_tokens=shared[j])


def link_info(link: Link) -> dict[str, Any]:
    """The keys a step's ``info`` gets: ``parent`` and ``branch`` always, ``branch_of`` and
    ``shared_prefix_tokens`` on a branch start after the first call."""
    info: dict[str, Any] = {"parent": link.parent, "branch": link.branch}
    if link.branch_of is not None:
        info["branch_of"] = link.branch_of
        info["shared_prefix_tokens"] = link.shared_prefix_tokens
    return info
