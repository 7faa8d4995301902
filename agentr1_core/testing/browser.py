"""Headless Chromium for page tests and screenshots (``agentr1-core view``), through selenium and the system's
``chromedriver``: nothing is downloaded, no browser build of selenium's own is used.

``find_browser()`` says where Chromium and its driver are (``None`` when either is missing or selenium is not
installed); ``open_browser()`` starts one (width x height window, headless) and ``png_colors`` counts the distinct
colours of a PNG screenshot (a blank or failed render has one or two). Imports nothing heavy until called.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver", "/usr/lib/chromium/chromedriver")


def find_browser() -> tuple[str, str] | None:
    """``(browser, driver)`` paths (``AGENTR1_CHROMIUM`` / ``AGENTR1_CHROMEDRIVER`` first), or ``None``."""
    if importlib.util.find_spec("selenium") is None:
        return None
    browser = os.environ.get("AGENTR1_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    driver = os.environ.get("AGENTR1_CHROMEDRIVER") or next(filter(None, map(shutil.which, DRIVERS)), None)
    return (browser, driver) if browser and driver else None


def open_browser(width: int = 1280, height: int = 900) -> Any:
    """A headless Chromium (selenium ``WebDriver``); the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_browser()
    if found is None:
        raise RuntimeError("headless Chromium needs selenium, chromium and chromedriver "
                           "(apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars", "--force-device-scale-factor=1",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(found[1]), options=options)


def png_colors(png: bytes, limit: int = 100_000) -> int:
    """Distinct colours of a PNG screenshot, counted up to ``limit`` (Pillow, which matplotlib brings)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        found = image.convert("RGB").getcolors(maxcolors=limit)
    return limit if found is None else len(found)
