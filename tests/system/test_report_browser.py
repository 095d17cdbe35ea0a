"""The page `commbench report` writes, opened in a real browser: Debian's Chromium, headless, driven by
selenium through Debian's chromedriver (both installed by `launchers/setup.sh --dev` as root; the
test skips with the reason where they are missing). The page must load without console errors,
every figure must render with a non-zero size, and its tables must hold the results files' numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import commbench

from commbench.commands.report import number

FIX = Path(__file__).parent.parent / "fixtures"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    WHY = None if CHROMIUM and DRIVER else "Debian's chromium and chromium-driver are not installed " \
                                              "(launchers/setup.sh --dev installs them as root)"
except ImportError as exc:
    WHY = f"selenium is not importable ({exc}): launchers/setup.sh --dev"

pytestmark = [pytest.mark.skipif(WHY is not None, reason=WHY or ""), pytest.mark.slow]



@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    # no network here: Chromium's own background connections would fail (and log) at every start
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-quic", f"--user-data-dir={profile}", "--window-size=1280,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def rows(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("type") == "row"]


def test_report_page_loads_renders_every_figure_and_holds_the_numbers(tmp_path, browser):
    cluster = tmp_path / "cluster.jsonl"
    r = commbench("cluster", "--np", "4", "-t", "tcp", "--bw-size", "64K", "-W", "8", "--bw-time", "0.1",
                  "-i", "200", "-x", "20", "--cuts", "2", "-o", str(cluster), timeout=240)
    assert r.code == 0, r.err
    files = [FIX / "latency_tcp.jsonl", FIX / "bandwidth_tcp.jsonl", FIX / "allreduce.jsonl", FIX / "ps.jsonl",
             FIX / "train.jsonl", FIX / "predict.jsonl", cluster]
    out = tmp_path / "report"
    r = commbench("report", *map(str, files), "-o", str(out))
    assert r.code == 0, r.err
    pngs = sorted(out.glob("*.png"))
    browser.get((out / "report.html").as_uri())
    assert browser.title == "commbench report"

    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors

    images = browser.execute_script(
        "return [...document.images].map(i => ({alt: i.alt, complete: i.complete, w: i.naturalWidth, "
        "h: i.naturalHeight, shown: i.getBoundingClientRect().width}))")
    assert len(images) == len(pngs) >= 6, (images, pngs)  # every figure the report made is on the page
    for img in images:
        assert img["complete"] and img["w"] > 100 and img["h"] > 100 and img["shown"] > 100, img

    cells = {c.text.strip() for c in browser.find_elements(By.CSS_SELECTOR, "td, th")}
    for r_ in rows(FIX / "latency_tcp.jsonl"):  # p2p-latency's table: p50 per size and series
        assert number(float(r_["p50_us"])) in cells, (r_["size"], r_["p50_us"])
    for r_ in rows(FIX / "bandwidth_tcp.jsonl"):
        assert number(float(r_["mb_s"])) in cells, (r_["size"], r_["mb_s"])
    for r_ in rows(FIX / "allreduce.jsonl"):
        assert number(float(r_["busbw"])) in cells, (r_["size"], r_["busbw"])
    pairs = [x for x in rows(cluster) if x["test"] == "pairwise"]
    assert len(pairs) == 6
    heat = browser.find_elements(By.XPATH, "//img[contains(@alt, 'Cluster over tcp')]")
    assert heat, [i["alt"] for i in images]  # the cluster's heatmaps are on the page, its transport named
    heads = [h.text for h in browser.find_elements(By.TAG_NAME, "h2") if h.text.startswith("Cluster over tcp")]
    assert heads and all(": " in h for h in heads), heads  # the verdict in the heading (or "no findings")
    assert not cells & {"nan", "NaN", "None"}, "a NaN or None cell"
    browser.set_window_size(1400, 900)
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= 1400, width  # the page within a 1,400-pixel window
    commands = [c.text for c in browser.find_elements(By.TAG_NAME, "code")]
    assert any("cluster --np 4" in c for c in commands), commands
