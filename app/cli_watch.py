"""``podscope watch``: capture every worker on a schedule and when their step heartbeats slow
down, keep the last K sessions, and say after each capture who the culprit is and what changed.

    podscope watch --cluster runs/demo/cluster.json --logdir runs/job --every 5m
    podscope watch --now --logdir runs/job --reason "after the refresh"  # ask the watcher

Exit codes: 0 stopped (Ctrl-C); 2 bad usage or the logdir is already watched.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from podscope.app.terminal import say

if TYPE_CHECKING:
    from podscope.collectors.capture import CaptureResult
    from podscope.collectors.watch import WatchedCapture

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(text: str) -> float:
    """``300``, ``300s``, ``5m``, ``1.5h``, ``1d`` in seconds.

    Raises:
        click.BadParameter: anything else.
    """
    m = _DURATION.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise click.BadParameter(f"{text!r} is not a duration such as 300, 90s, 5m or 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _when(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s))


@click.command("watch")
@click.argument("addresses", required=False)
@click.option(
    "--cluster",
    type=click.Path(path_type=Path),
    help="An engine cluster manifest (cluster.json), read again before every poll.",
)
@click.option(
    "--logdir",
    type=click.Path(path_type=Path),
    default=Path("runs/captures"),
    envvar="PODSCOPE_LOGDIR",
    help="Sessions go to LOGDIR/plugins/profile/ (TensorBoard's layout).",
)
@click.option("--every", default="5m", help="A scheduled capture this often (0: none).")
@click.option("--duration-ms", type=int, default=2000, help="Each capture's window.")
@click.option("--keep", type=int, default=100, help="The watcher's sessions kept.")
@click.option("--max-gb", type=float, default=10.0, help="…and at most this many GB of them.")
@click.option("--poll-s", type=float, default=2.0, help="How often heartbeats are read.")
@click.option(
    "--rise-pct",
    type=float,
    default=30.0,
    help="Trigger: a worker's step time this much above its rolling median…",
)
@click.option("--rise-steps", type=int, default=5, help="…for this many steps in a row.")
@click.option("--baseline-steps", type=int, default=50, help="The rolling median's steps.")
@click.option(
    "--spread-pct",
    type=float,
    default=50.0,
    help="Trigger: the workers' step times spread this far apart (0: off).",
)
@click.option("--cooldown", default="2m", help="No trigger this long after a triggered capture.")
@click.option("--no-triggers", is_flag=True, help="Scheduled and requested captures only.")
@click.option("--token", envvar="PODSCOPE_TOKEN", help="The agents' shared token.")
@click.option("--now", is_flag=True, help="Ask the watcher of LOGDIR to capture now, then exit.")
@click.option("--reason", default="", help="With --now: why (kept as the session's label).")
def watch_command(
    addresses: str | None,
    cluster: Path | None,
    logdir: Path,
    every: str,
    duration_ms: int,
    keep: int,
    max_gb: float,
    poll_s: float,
    rise_pct: float,
    rise_steps: int,
    baseline_steps: int,
    spread_pct: float,
    cooldown: str,
    no_triggers: bool,
    token: str | None,
    now: bool,
    reason: str,
) -> None:
    """Watch a long job: capture every worker every --every and whenever a worker's step
    heartbeats (podscope.agent.step(n) in the training loop) slow down; one capture at a time,
    the last --keep sessions kept. ADDRESSES: host:port[,host:port…] of the workers' agents
    (or --cluster). Ctrl-C stops it; the sessions stay."""
    from podscope.collectors import watch
    from podscope.collectors.capture import CaptureOptions
    from podscope.collectors.errors import CaptureError

    if now:
        _ask(logdir, reason)
        return
    from podscope.app.targets import targets_from

    try:
        targets_from(addresses, cluster)  # bad addresses fail now, not at the first poll
        every_s = seconds(every) if every.strip() not in ("0", "off") else None
        triggers = (
            None
            if no_triggers
            else watch.Triggers(
                rise_pct=rise_pct,
                rise_steps=rise_steps,
                baseline_steps=baseline_steps,
                min_baseline=min(20, baseline_steps),
                spread_pct=spread_pct or None,
                cooldown_s=seconds(cooldown),
            )
        )
        opts = watch.WatchOptions(
            CaptureOptions(logdir=logdir, duration_ms=duration_ms, token=token),
            every_s=every_s,
            keep=keep,
            max_bytes=int(max_gb * 1e9),
            poll_s=poll_s,
            triggers=triggers,
        )
    except (CaptureError, watch.WatchError, click.BadParameter) as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    historian = _historian(logdir)

    def on_capture(result: CaptureResult, watched: WatchedCapture) -> None:
        ok = sum(s == "ok" for s in watched.statuses.values())
        lost = {w: s for w, s in watched.statuses.items() if s != "ok"}
        say(
            f"{_when(watched.started_unix_s)}  {watched.trigger.detail}: {result.session}, "
            f"{ok}/{len(watched.statuses)} workers"
            + (f" (not captured: {', '.join(f'{w} {s}' for w, s in lost.items())})" if lost else "")
            + (f"; deleted {len(watched.deleted)} old" if watched.deleted else "")
        )
        historian.add(result.session)

    watcher = watch.Watcher(lambda: targets_from(addresses, cluster), opts, on_capture)
    say(
        f"watching {logdir}: "
        + (f"a capture every {every}" if every_s else "no schedule")
        + (
            f", triggers: step time +{rise_pct:g}% for {rise_steps} steps"
            + (f", spread {spread_pct:g}%" if spread_pct else "")
            if triggers
            else ", no triggers"
        )
        + f"; keeping {keep} sessions. Ctrl-C stops."
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        watcher.start()
    except watch.WatchError as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    try:
        while not stop.wait(0.5) and watcher.running:
            pass
    except KeyboardInterrupt:
        pass
    watcher.stop()
    historian.wait(120)
    said = f" ({watcher.stopped_by} asked)" if watcher.stopped_by else ""
    say(f"stopped{said}; {len(watcher.captures)} capture(s) this run, sessions kept in {logdir}")


def _historian(logdir: Path) -> Any:
    """The history indexer: each new capture's verdict and what changed, said as it comes."""
    from podscope.analyzers.history import named, what_changed
    from podscope.app.history import Historian

    def said(entry: dict[str, Any]) -> None:
        earlier = [
            e for e in historian.index.entries() if e["start_unix_s"] < entry["start_unix_s"]
        ]
        culprits = ", ".join(named(entry, w) for w in entry["culprits"]) or "no culprit"
        top = (entry.get("top") or {}).get("title", "no finding")
        say(f"    {entry['session']}: {culprits}; top finding: {top}")
        for change in what_changed(earlier[-1], entry) if earlier else []:
            say(f"    changed: {change.title}")

    historian = Historian(logdir, on_summary=said)
    return historian


def _ask(logdir: Path, reason: str) -> None:
    from podscope.collectors import watch
    from podscope.trace_parsers import layout

    try:
        watch.request_capture(logdir, reason)
    except (layout.LayoutError, OSError) as e:
        say(f"podscope: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    status = watch.read_status(logdir)
    if status and status.get("running") and time.time() - status.get("updated_unix_s", 0) < 60:
        say(f"asked the watcher of {logdir} (pid {status.get('pid')}) to capture now")
    else:
        say(
            f"asked for a capture in {logdir}, but no watcher has written there in the last "
            "minute: it is taken when `podscope watch` runs on this logdir"
        )
