"""The README tour's pictures (docs/images/<page>.png): one per dashboard page, taken in headless
Chromium from `podscope serve` on a logdir of the committed PS fixture and, when present, the
shared samples (the V100 capture, the TPU capture, an Android systrace); the History page on
the committed watched engine run.

    .venv/bin/python docs/screenshots.py        # after make test (playwright, chromium)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.app.helpers import free_port, get_when_up
from tests.app.test_browser import CHROME_ARGS, CHROMIUM, settle

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED = REPO.parent / "shared" / "traces"
OUT = REPO / "docs" / "images"

#: session folder name → files copied into it (under the name after "as", if one is given)
SESSIONS: dict[str, list[Path | tuple[Path, str]]] = {
    "2026_12_01_09_00_00": [*FIXTURES.joinpath("ps_baseline").iterdir()],
    "2026_12_01_09_15_00": [
        *FIXTURES.joinpath("regressions", "slow_allreduce_4_workers").iterdir()
    ],
    "2026_12_01_09_30_00": [
        *FIXTURES.joinpath("regressions", "straggler_judged_by_step_ends").iterdir()
    ],
    "2026_12_01_10_00_00": [
        SHARED / "xplane" / "gpu_tf_multiworker_v100" / "34.83.195.179_6003.xplane.pb"
    ],
    "2026_12_01_11_00_00": [SHARED / "xplane" / "tpu_xprof" / "tpu_inference_2.xplane.pb"],
    "2026_12_01_12_00_00": [
        (SHARED / "android" / "synthetic" / "synthetic_tflite_atrace.txt", "phone.atrace")
    ],
}
#: picture → the page's URL (path and query)
PAGES = {
    "sessions": "/",
    "pod_viewer": "/pod?session=2026_12_01_09_30_00",
    "workers": "/workers?session=2026_12_01_09_00_00",
    "ops": "/ops?session=2026_12_01_10_00_00",
    "diagnostics": "/diagnostics?session=2026_12_01_10_00_00",
    "timeline": "/timeline?session=2026_12_01_09_30_00",
    "xla": "/xla?session=2026_12_01_11_00_00",
    "compare": "/compare?session=2026_12_01_09_30_00&baseline=2026_12_01_09_15_00",
    "tflite": "/android?session=2026_12_01_12_00_00",
    "capture": "/capture",
}
#: pictures of other logdirs: picture → (the logdir copied, the page's URL)
OTHER_LOGDIRS = {"history": (FIXTURES / "watched_straggler", "/history")}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp, "logdir")
        for session, files in SESSIONS.items():
            folder = logdir / "plugins" / "profile" / session
            folder.mkdir(parents=True)
            for entry in files:
                f, name = entry if isinstance(entry, tuple) else (entry, entry.name)
                if f.exists():
                    shutil.copy(f, folder / name)
        shoot(logdir, PAGES, Path(tmp, "cache"))
        for name, (source, url) in OTHER_LOGDIRS.items():
            other = Path(tmp, name)
            shutil.copytree(source, other)
            shoot(other, {name: url}, Path(tmp, "cache"))


def shoot(logdir: Path, pages: dict[str, str], cache: Path) -> None:
    """Serves ``logdir`` and takes each page's picture."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = {**os.environ, "PODSCOPE_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "podscope", "serve", "--logdir", str(logdir)]
    server = subprocess.Popen([*cmd, "--port", str(port)], env=env, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        get_when_up(base + "/healthz", server)
        OUT.mkdir(exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            for name, url in pages.items():
                page.goto(base + url)
                settle(page)
                if name == "history":  # every session summarized, in the background
                    page.wait_for_function(
                        "!document.querySelector('#hist-status')?.innerText"
                        ".includes('summarizing')",
                        timeout=120_000,
                    )
                    settle(page)
                page.wait_for_selector("._dash-loading", state="detached")
                page.screenshot(path=str(OUT / f"{name}.png"))
                print(name, flush=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
