"""The HTML report, opened in a real headless Chromium: it draws, and draws what the JSON says.

The page renders itself from the JSON embedded in it and marks the <html>
element ``data-rendered="ok"`` (or ``"error: ..."``).  Chromium's ``--dump-dom``
gives the DOM after the script ran, so the checks below read what a user's
browser would show: the table rows, one card per runtime report, and in each
card's timeline one mark per recorded event.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests import servers

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    servers.missing("Chromium is not installed (Debian: apt-get install chromium)")


def rendered_dom(chromium: str, page, tmp_path) -> str:
    result = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                             "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_report_page_draws_the_table_the_reports_and_their_races(chromium, demo_run, tmp_path):
    _, data, report_dir = demo_run
    dom = rendered_dom(chromium, report_dir / "report.html", tmp_path)
    assert 'data-rendered="ok"' in dom, re.findall(r'data-rendered="[^"]*"', dom)
    assert f'data-reports="{len(data["reports"])}"' in dom
    variants = sum(len(c["variants"]) for c in data["classes"])
    assert len(re.findall(r'<tr class="(?:racy|fixed)" data-class=', dom)) == variants
    cards = re.findall(r'<section class="report" data-code="(TXN\d+)">(.*?)</section>', dom, re.S)
    assert [code for code, _ in cards] == [r["code"] for r in data["reports"]]
    for (code, card), report in zip(cards, data["reports"]):
        drawn = len(re.findall(r'<g class="event"', card))
        recorded = sum(len(lane["events"]) for lane in report["timeline"])
        assert drawn == recorded > 0, code
        assert "endpoints.py:" in card
    findings = re.findall(r'<tr data-code="(TXN\d+)">', dom)
    assert findings == [f["code"] for f in data["findings"]]


def test_a_broken_report_says_so_instead_of_showing_an_empty_page(chromium, demo_run, tmp_path):
    """The check above can fail: the same page with its data damaged is marked as an error."""
    _, _, report_dir = demo_run
    html = (report_dir / "report.html").read_text()
    broken = tmp_path / "broken.html"
    damaged = html.replace('"classes": [', '"classes": 7, "x": [', 1)
    assert damaged != html
    broken.write_text(damaged)
    dom = rendered_dom(chromium, broken, tmp_path)
    assert 'data-rendered="error:' in dom
    assert "This report could not be drawn" in dom


def test_embedded_data_is_the_json_report(demo_run):
    _, data, report_dir = demo_run
    html = (report_dir / "report.html").read_text()
    embedded = re.search(r'<script type="application/json" id="txnsafety-data">(.*?)</script>', html, re.S)
    assert embedded and json.loads(embedded.group(1)) == data


def test_markup_in_the_data_stays_text(chromium, demo_run, tmp_path):
    """Messages quote code: ``<!--<script>`` or ``</script>`` in them must neither break nor inject."""
    from txnsafety.demo.html import render

    _, data, _ = demo_run
    hostile = "x <!--<script> y </script><img src=x onerror=alert(1)> z"
    data = json.loads(json.dumps(data))
    data["findings"][0]["message"] = hostile
    page = tmp_path / "hostile.html"
    page.write_text(render(data))
    dom = rendered_dom(chromium, page, tmp_path)
    assert 'data-rendered="ok"' in dom
    assert "&lt;!--&lt;script&gt; y &lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; z" in dom
    assert "<img" not in dom
