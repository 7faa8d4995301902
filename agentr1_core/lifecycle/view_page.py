"""``agentr1-core view RUN_DIR|REPORT [--out FILE.html] [--serve [--port N]]``: a run (or an eval report) as one
self-contained HTML page.

The page is one file that opens from disk: its CSS and script are inline (``view_page.html``, ``view_page.js``,
shipped as package data), it loads nothing from the network, and the run's data (``lifecycle.view.build_view``)
sits in a ``<script type="application/json">`` block, with every ``<``, ``>`` and ``&`` written as a JSON escape so
that no model or tool output can close the block. The script puts every text of the run into the page as text,
never as markup. The page states its own size in bytes (``<meta name="file-bytes">``, exact) and its episode count.
Lines of the run's files that could not be read are printed as warnings (one line a file) and listed on the page.

``--serve`` writes the file, then serves it on 127.0.0.1 only (another machine cannot reach it; the port is
printed) until Ctrl-C. It writes nothing but the page: default ``RUN_DIR/view.html``, or ``<report>.html`` next to
an eval report.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from agentr1_core.lifecycle.view import build_view, finite

HERE = Path(__file__).resolve().parent
BYTES_WIDTH = 12  # the file-bytes placeholder: filled in with the page's size, padded to the same width


def embed_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: ``<``, ``>``, ``&`` and the two JavaScript line
    separators are escaped (``</script>`` and ``<!--`` in a model's output stay data). JSON has no NaN or Infinity:
    a non-finite float is written as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:  # a non-finite float that did not come from a file read by view.loads
        text = json.dumps(finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def render_page(data: dict[str, Any]) -> bytes:
    """The page for ``build_view``'s data, as UTF-8 bytes."""
    template = (HERE / "view_page.html").read_text(encoding="utf-8")
    script = (HERE / "view_page.js").read_text(encoding="utf-8")
    if "</script" in script.lower():
        raise ValueError("view_page.js must not contain '</script'")
    placeholder = "0" * BYTES_WIDTH
    fill = {"TITLE": html.escape(str(data.get("title", "run"))), "FILE_BYTES": placeholder, "SCRIPT": script,
            "DATA": embed_json(data)}
    page = re.sub(r"\{\{(TITLE|FILE_BYTES|SCRIPT|DATA)\}\}", lambda m: fill[m[1]], template)  # one pass
    raw = page.encode("utf-8")
    size = str(len(raw)).rjust(BYTES_WIDTH)  # same width, so the size stays what it says
    return raw.replace(f'content="{placeholder}"'.encode(), f'content="{size}"'.encode(), 1)


def default_out(source: str | Path) -> Path:
    source = Path(source)
    if source.is_dir():
        return source / "view.html"
    name = source.name.removesuffix(".episodes.jsonl").removesuffix(".json").removesuffix(".jsonl")
    return source.with_name(name + ".html")


def write_view(source: str | Path, out: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Build the page of ``source`` and write it (atomically) to ``out``; returns the path and the data."""
    data = build_view(source)
    out = Path(out) if out else default_out(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.part")
    tmp.write_bytes(render_page(data))
    tmp.replace(out)
    return out, data


def serve(page: Path, port: int = 0) -> None:
    """Serve ``page`` at ``http://127.0.0.1:PORT/`` until interrupted (loopback only; nothing else is served)."""
    from urllib.parse import quote

    from agentr1_core.http_service import Page, make_server

    html_page = Page(page.read_bytes())
    server = make_server(pages={path: html_page for path in ("/", "/index.html", f"/{quote(page.name)}")}, port=port)
    print(f"[view] serving {page} at {server.url}/ (Ctrl-C stops)", flush=True)
    server.serve_forever()


def cmd_view(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out, data = write_view(args.source, args.out)
    size = out.stat().st_size
    for warning in data["warnings"]:  # lines of its files that could not be read; the page lists them too
        print(f"[view] warning: {warning}", file=sys.stderr, flush=True)
    print(f"[view] {len(data['episodes'])} episodes, {len(data['tasks'])} held-out tasks, "
          f"{len(data['stages'])} validation stages -> {out} ({size / 1024:.0f} KB, {time.perf_counter() - t0:.1f}s)",
          flush=True)
    if args.serve:
        serve(out, args.port)
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="RUN_DIR_OR_REPORT",
                        help="a run directory, or an eval report (<report>.json or <report>.episodes.jsonl)")
    parser.add_argument("--out", default=None, help="HTML path (default RUN_DIR/view.html, or <report>.html)")
    parser.add_argument("--serve", action="store_true", help="also serve the page on 127.0.0.1 until Ctrl-C")
    parser.add_argument("--port", type=int, default=0, help="port for --serve (default: a free one)")
    parser.set_defaults(func=cmd_view)
