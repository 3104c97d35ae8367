"""An install without PodScope's compiled readers (built where no compiler was): importing and
capturing work; parsing stops with one line saying what to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ps_baseline"

#: Runs the CLI as if the three compiled modules had not been built.
WITHOUT_READERS = """
import sys
class NotBuilt:
    def find_spec(self, name, path=None, target=None):
        if name.rsplit(".", 1)[-1] in ("_xplane_fast", "_ftrace_fast", "_kineto_fast", "_column_kernels"):
            raise ImportError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotBuilt())
import podscope, podscope.agent, podscope.collectors.capture  # all import without them
from podscope.app.cli import main
sys.argv = ["podscope", *sys.argv[1:]]
main()
"""


def test_parsing_without_the_compiled_readers_says_what_to_install_in_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_READERS, "stragglers", str(FIXTURE), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if not line.startswith("podscope: session")]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(
        "podscope: error: PodScope's compiled trace readers are not installed"
    )
    assert "pip install --force-reinstall --only-binary podscope podscope" in lines[0]
    assert "Traceback" not in out.stderr
