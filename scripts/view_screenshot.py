"""Screenshot of ``agentr1-core view`` for the docs: the page of a real run in headless Chromium, its sections
stacked into one PNG (curves, validation stages, the held-out tasks that went from failure to success, and one of
those episodes with its last prompt open).

Usage: .venv/bin/python scripts/view_screenshot.py RUN_DIR [OUT.png]   (default docs/img/view.png)
Needs chromium, chromium-driver and selenium (the test extra), like the page's tests.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

from PIL import Image
from selenium.webdriver.support.ui import Select, WebDriverWait

from agentr1_core.lifecycle.view_page import write_view
from agentr1_core.testing.browser import open_browser

SECTIONS = (("header", 0), ("#curves-section", 0), ("#validation-section", 0), ("#tasks-section", 520),
            ("#episode-section", 1000))  # (selector, most pixels kept; 0: all)


def shoot(run_dir: str, out: str = "docs/img/view.png", width: int = 1180) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        page, view = write_view(run_dir, Path(tmp) / "view.html")
        driver = open_browser(width, 1000)
        try:
            driver.get(page.as_uri())
            WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
            Select(driver.find_element("id", "task-change")).select_by_value("up")  # fail -> success
            cells = driver.find_elements("css selector", "#tasks tr.task-row td.cell:last-child")
            (cells[0] if cells else driver.find_element("css selector", "#episodes tr.ep-row")).click()
            driver.execute_script("var d = document.querySelectorAll('#episode details.prompt-box');"
                                  "if (d.length) d[d.length - 1].open = true;")  # the last prompt: the env's changes
            height = driver.execute_script("return document.body.scrollHeight")
            driver.set_window_size(width, min(height + 120, 8000))
            driver.execute_script("window.scrollTo(0, 0)")
            parts = []
            for selector, keep in SECTIONS:
                image = Image.open(io.BytesIO(driver.find_element("css selector", selector).screenshot_as_png))
                parts.append(image.crop((0, 0, image.width, min(image.height, keep or image.height))))
        finally:
            driver.quit()
    sheet = Image.new("RGB", (max(p.width for p in parts), sum(p.height for p in parts)), "white")
    y = 0
    for part in parts:
        sheet.paste(part, (0, y))
        y += part.height
    sheet = sheet.convert("P", palette=Image.Palette.ADAPTIVE, colors=128)
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out_path, optimize=True)
    print(f"{out_path}: {sheet.width}x{sheet.height}, {out_path.stat().st_size / 1024:.0f} KB "
          f"({len(view['episodes'])} episodes, {len(view['tasks'])} tasks)")
    return out_path


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    shoot(*sys.argv[1:])
