"""Debian's headless Chromium driven by selenium for the console tests; never a downloaded build.

The tests skip when no chromium is installed, unless ASTRAI_REQUIRE_BROWSER is set (CI sets
it, after `make browser` installs the packages): then a missing browser fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser")
DRIVERS = ("chromedriver",)
WINDOW = (1280, 860)


def _find(names: tuple[str, ...], folders: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
        for folder in folders:
            if Path(folder, name).is_file():
                return str(Path(folder, name))
    return None


def require_browser() -> tuple[str, str]:
    """(chromium, chromedriver), or skip (fail under ASTRAI_REQUIRE_BROWSER) naming what lacks."""
    chromium = _find(BROWSERS, ("/usr/bin", "/usr/lib/chromium"))
    driver = _find(DRIVERS, ("/usr/bin", "/usr/lib/chromium"))
    found = {"chromium": chromium, "chromedriver": driver}
    missing = [name for name, path in found.items() if path is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        reason = f"no {' and no '.join(missing)}: `make browser` and `make install` bring them"
        if os.environ.get("ASTRAI_REQUIRE_BROWSER"):
            pytest.fail(f"ASTRAI_REQUIRE_BROWSER is set but there is {reason}")
        pytest.skip(reason)
    assert chromium is not None and driver is not None
    return chromium, driver


def headless_chromium() -> Iterator[Any]:
    """A selenium driver on the system's chromium and chromedriver (a fixture's body)."""
    chromium, driver_path = require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Both paths given: selenium's driver manager never runs, so nothing is downloaded.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll until `predicate()` is truthy; its value, or a TimeoutException naming `what`."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s, poll_frequency=0.05).until(
        lambda _: predicate(), message=f"waited {timeout_s} s for {what}"
    )


def page_errors(driver: Any) -> list[str]:
    """Errors the page logged (a CSP violation, an exception), not failed network requests,
    which some tests cause on purpose (a 401, a 503)."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
    ]
