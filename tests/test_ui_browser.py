"""What a new user sees: a real browser (headless Chromium, the Debian package, driven by Playwright) opens the
address that `arena ui STUDY` prints after `arena run`, and finds the study's runs grouped by arm with a drawn
tail-reward chart first, not MLflow's empty GenAI overview.

Without Chromium or Playwright the test skips, saying which is missing; under CI (the environment variable CI
set, as `.ci/run` runs) it fails instead, so that CI never skips it silently. ARENA_UI_SCREENSHOT=PATH also
writes the screenshot there (docs/images/arena-ui.png is made so)."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from arena.cli import main

CHROMIUM = ("chromium", "chromium-browser")
STUDY = {
    "name": "first_sight",
    "task": {"name": "noisy_arithmetic", "levels": [1, 2]},
    "train": {"prompts_per_step": 2},
    "evaluation": {"prompts": 8, "samples": 2, "points": 3, "max_new_tokens": 8, "alphas": [0.5], "primary_alpha": 0.5},
    "budget": {"unit": "samples", "amount": 16},
    "seeds": [0, 1],
    "controls": [],
    "arms": {
        "block_grpo": {"method": "block_grpo", "options": {"lr": 1e-4, "group_size": 4, "max_new_tokens": 8}},
        "es": {"method": "es", "options": {"population": 4, "prompts_per_member": 2, "max_new_tokens": 8,
                                           "sigma": 0.01, "alpha": 0.01}},
    },
}
QUESTION = "Question: does block-GRPO lift the tail more than ES on two seeds?"


def browser() -> str:
    """The system Chromium and Playwright, or a skip (a failure under CI) naming what is missing."""
    missing = []
    executable = next(filter(None, map(shutil.which, CHROMIUM)), None)
    if executable is None:
        missing.append("no chromium executable on PATH (Debian: apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the python package playwright is not installed (pip install -e '.[dev]')")
    if missing:
        reason = "browser test: " + "; ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI is set: this test must run there; .ci/run installs both)")
        pytest.skip(reason)
    return executable


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_served(url: str, server: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, f"arena ui exited with {server.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"arena ui did not answer at {url} within {seconds:.0f} s")


@pytest.mark.slow
def test_arena_ui_opens_on_the_arms_tail_reward_curves(tmp_path, monkeypatch):
    executable = browser()
    from playwright.sync_api import sync_playwright

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = tmp_path / "first_sight.yaml"
    study.write_text(f"# {QUESTION}\n#\n# A tiny study for the browser test.\n" + yaml.safe_dump(STUDY))
    assert main(["run", str(study), "--jobs", "1"]) == 0

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "arena", "ui", str(study), "--port", str(port)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        first = server.stdout.readline()
        found = re.search(r"open (http://127\.0\.0\.1:\d+/\S+)", first)
        assert found, f"arena ui printed no address: {first!r}"
        url = found.group(1)
        assert "workflowType=machine_learning" in url and "viewStateShareKey=arena" in url
        wait_until_served(f"http://127.0.0.1:{port}/health", server)
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            page = chromium.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(url)
            card = page.locator("[data-testid=experiment-view-compare-runs-card]").first
            card.get_by_text("eval/tail_reward", exact=True).wait_for(timeout=60_000)  # the first chart
            page.wait_for_function("""card => [...card.querySelectorAll('path.js-line')]
                                      .filter(p => (p.getAttribute('d') || '').length > 10).length >= 2""",
                                   arg=card.element_handle(), timeout=30_000)  # drawn: one line per arm
            time.sleep(1)  # let the other charts settle for the screenshot
            screenshot = tmp_path / "arena-ui.png"
            page.screenshot(path=str(screenshot))
            if os.environ.get("ARENA_UI_SCREENSHOT"):
                shutil.copy(screenshot, os.environ["ARENA_UI_SCREENSHOT"])
            legend, body = card.inner_text(), page.inner_text("body")
            chromium.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the uvicorn worker it started
        server.wait(timeout=30)
        server.stdout.close()

    assert "block_grpo (eval/tail_reward)" in legend and "es (eval/tail_reward)" in legend  # grouped by arm
    for run in ("block_grpo/seed0", "block_grpo/seed1", "es/seed0", "es/seed1"):
        assert run in body  # the study's runs, listed in their groups
    assert "Group by: arena.arm" in body and QUESTION in body  # the view and the study's question
    assert "No data available" not in body  # not the GenAI overview
    assert screenshot.stat().st_size > 10_000


def test_without_chromium_the_browser_test_skips_but_fails_under_ci(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no chromium executable on PATH"):
        browser()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        browser()
