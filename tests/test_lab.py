"""The notebooks as a researcher sees them: JupyterLab in a real (headless) Chromium.

`make test-lab` (not `make test`: it needs Debian's chromium and Playwright, `pip install -e
'.[browser]'`). JupyterLab starts on a free port with a token; Chromium opens each stage notebook,
parameterized for params/tiny.yaml, runs all its cells through JupyterLab's own "run all"
command on the `diffgrpo` kernel, and checks that every code cell ran without an error, that
the figures are images the browser decoded (non-empty), that the analysis shows its tables, and
that progress shows as widgets. A screenshot of each notebook goes to $LAB_SCREENSHOTS
(`make test-lab` sets it; default outputs/test-lab/). A failure names the notebook and the cell.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from diffgrpo.models.devices import free_port
from diffgrpo.study.notebooks import KERNEL, STAGES

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
#: what each notebook of the tiny study shows at the least: images, HTML tables, progress widgets
EXPECT = {"01_probe": (1, 0, 1), "02_select": (1, 0, 0), "03_train": (1, 0, 1), "04_evaluate": (1, 0, 1),
          "05_analyze": (2, 2, 0)}
CELL_TIMEOUT_S = 900


def _tiny_copy(stage: str, folder: Path) -> Path:
    """The stage notebook with its parameters cell set to the tiny study."""
    book = json.loads((ROOT / "notebooks" / f"{stage}.ipynb").read_text())
    cell = next(c for c in book["cells"] if "parameters" in c["metadata"].get("tags", []))
    source = "".join(cell["source"])
    assert 'params_file = "embedded"' in source, f"notebooks/{stage}.ipynb: its parameters cell sets no params_file"
    cell["source"] = source.replace('params_file = "embedded"', 'params_file = "tiny"')
    out = folder / f"{stage}.ipynb"
    out.write_text(json.dumps(book, indent=1))
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (make test-lab installs it)")
    pytest.importorskip("playwright", reason="pip install -e '.[browser]' (make test-lab installs it)")
    work = tmp_path_factory.mktemp("lab")
    for folder in ("notebooks", "outputs", "settings", "workspaces", "runtime"):
        (work / folder).mkdir()
    for stage in STAGES:
        _tiny_copy(stage, work / "notebooks")
    # every cell in the page (no windowing), so the checks see each cell's output
    tracker = work / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    news = work / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))  # no pop-up over the page
    env = {k: v for k, v in os.environ.items() if k != "DIFFGRPO_PROGRESS"}  # the kernel picks widgets itself
    env.update(DIFFGRPO_PROJECT=str(ROOT), DIFFGRPO_OUTPUTS=str(work / "outputs"), OMP_NUM_THREADS="1",
               JUPYTERLAB_SETTINGS_DIR=str(work / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(work / "runtime"))
    port, token = free_port(), secrets.token_hex(16)
    log = open(work / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={work / 'notebooks'}", "--LabApp.expose_app_in_browser=True"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{url}/api/status?token={token}", server, work / "jupyterlab.log")
        yield {"url": url, "token": token, "work": work}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _wait_for(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited ({server.returncode}) before it answered; its log:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    pytest.fail(f"JupyterLab did not answer {url.split('?')[0]} in {timeout_s:.0f} s; its log:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _screenshots() -> Path:
    out = Path(os.environ.get("LAB_SCREENSHOTS") or ROOT / "outputs" / "test-lab")
    out.mkdir(parents=True, exist_ok=True)
    return out


# the notebook's cells as JupyterLab's model holds them: index, first source line, execution
# count, error outputs (read through the app that --LabApp.expose_app_in_browser puts on window)
PANEL_JS = "[...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === '%s')"
CELLS_JS = """() => {
  const panel = %s;
  const cells = panel.content.model.cells;
  const out = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    const outputs = c.toJSON().outputs || [];
    out.push({index: i, first: c.sharedModel.getSource().split('\\n')[0], count: c.executionCount,
              errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)});
  }
  const kernel = panel.sessionContext.session ? panel.sessionContext.session.kernel : null;
  return {kernel: kernel ? kernel.name : null, status: kernel ? kernel.status : null, cells: out};
}"""


def _failure(stage: str, cells: list[dict]) -> str | None:
    """The first cell that raised or never ran, named by notebook and cell."""
    for c in cells:
        if c["errors"]:
            return f"{stage}.ipynb cell {c['index']} ({c['first']!r}) raised {c['errors'][0]}"
    for c in cells:
        if c["count"] is None:
            return f"{stage}.ipynb cell {c['index']} ({c['first']!r}) did not run"
    return None


@pytest.mark.parametrize("stage", STAGES)  # in order: each stage reads what the one before wrote
def test_each_notebook_runs_in_jupyterlab_and_shows_its_figures(lab, browser, stage):
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    panel = PANEL_JS % f"{stage}.ipynb"
    cells = CELLS_JS % panel
    try:  # a workspace of its own, reset: only this notebook open
        page.goto(f"{lab['url']}/lab/workspaces/{stage}/tree/{stage}.ipynb?reset&token={lab['token']}")
        page.wait_for_function(f"() => {{ const p = window.jupyterapp && {panel}; const s = p && p.sessionContext.session;"
                               " return !!(s && s.kernel && s.kernel.status === 'idle'); }", timeout=180_000)
        assert page.evaluate(cells)["kernel"] == KERNEL, f"{stage}.ipynb did not open on the {KERNEL!r} kernel"
        page.evaluate(f"() => {{ window.jupyterapp.shell.activateById(({panel}).id); "
                      "return window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        # done: every code cell ran (or one raised), and the kernel is idle again
        page.wait_for_function(f"""() => {{ const s = ({cells})();
            return s.status === 'idle' && (s.cells.every(c => c.count !== null) || s.cells.some(c => c.errors.length)); }}""",
                               timeout=CELL_TIMEOUT_S * 1000, polling=2000)
        state = page.evaluate(cells)
        images = page.locator(".jp-OutputArea-output img")
        if images.count():
            images.first.scroll_into_view_if_needed()
        page.screenshot(path=str(_screenshots() / f"{stage}.png"))
        failure = _failure(stage, state["cells"])
        assert failure is None, failure
        sizes = page.evaluate("() => [...document.querySelectorAll('.jp-OutputArea-output img')]"
                              ".map(i => [i.naturalWidth, i.naturalHeight])")
        want_images, want_tables, want_widgets = EXPECT[stage]
        assert len(sizes) >= want_images, f"{stage}.ipynb shows {len(sizes)} figure(s), expected {want_images}"
        assert all(w > 0 and h > 0 for w, h in sizes), f"{stage}.ipynb: a figure did not decode: {sizes}"
        tables = page.locator(".jp-RenderedMarkdown table, .jp-RenderedHTMLCommon table").count()
        assert tables >= want_tables, f"{stage}.ipynb shows {tables} table(s), expected {want_tables}"
        widgets = page.locator(".jp-OutputArea-output .jupyter-widgets[class*='progress']").count()
        assert widgets >= want_widgets, f"{stage}.ipynb shows {widgets} progress widget(s), expected {want_widgets}"
        text = page.locator(".jp-Notebook").inner_text()
        for word in ("Traceback", "TqdmWarning", "IProgress not found"):
            assert word not in text, f"{stage}.ipynb shows {word!r}"
    finally:
        page.close()
