"""The dashboard in a real browser: Playwright driving Debian's chromium (installed by make)."""

import shutil
import subprocess
import sys
import time

import httpx
import pytest

from cheetah.core.ports import free_port
from tests.dashboard.conftest import AUTH, TOKEN

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
sync_api = pytest.importorskip("playwright.sync_api")
# Playwright's waits (30 s; 5 s for `expect`) and the server's start only guard hangs here: a
# busy machine runs chromium and the dashboard slowly, and a broken page still fails (what
# the test waits for never comes).
WAIT_MS = 120_000


@pytest.fixture
def dashboard(runs_dir, tmp_path, snapshot_root):
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cheetah.cli", "dashboard", "--runs", str(runs_dir),
         "--port", str(port), "--jobs-dir", str(tmp_path / "jobs"),
         "--token-file", str(token_file), "--snapshot-root", str(snapshot_root)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        try:
            if httpx.get(url + "/api/runs", headers=AUTH, timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, "dashboard did not start"
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=60)  # a hang guard


def test_runs_fleet_and_jobs_pages_render_in_chromium(dashboard, snapshot_root):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox"], timeout=WAIT_MS
        )
        page = browser.new_page()
        page.set_default_timeout(WAIT_MS)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{dashboard}/#token={TOKEN}")  # the page sends it on every /api call
        page.wait_for_selector("#timeline rect.rollout")
        assert page.locator("#runs-list li").first.inner_text().startswith("demo")
        assert page.locator("#curves polyline.curve").count() == 3
        assert page.locator("#learning circle.point").count() == 2
        assert "3.00 turns" in page.locator("#learning").text_content()
        assert page.locator("#timeline rect.rollout").count() == 6
        assert "after 0.250" in page.locator("#run-summary").inner_text()
        phases = page.locator("#time-breakdown tbody tr")
        assert phases.first.inner_text().split("\t")[:2] == ["rl:waiting_for_rollouts", "90.0"]
        assert phases.count() == 3  # two phases and "other"
        page.locator("#rollouts tr[data-rollout='5']").click()
        page.wait_for_selector("#trajectory .msg")
        assert "fix task 5" in page.locator("#trajectory").inner_text()

        page.locator("nav button[data-tab='fleet']").click()
        page.wait_for_selector("#fleet tbody td")
        assert "no env servers configured" in page.locator("#fleet").inner_text()

        page.locator("nav button[data-tab='jobs']").click()
        page.fill("#job-form input[name=query]", "do something")
        page.fill("#job-form input[name=repo]", str(snapshot_root / "missing"))
        page.locator("#job-form button").click()
        # A locator wait, not wait_for_function: the page's CSP forbids the eval that a
        # string predicate needs once Playwright has to poll it (it does on a busy machine).
        sync_api.expect(page.locator("#job-error")).to_contain_text(
            "not a directory", timeout=WAIT_MS
        )
        assert errors == []
        browser.close()
