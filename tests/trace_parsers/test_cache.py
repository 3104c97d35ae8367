"""Frame cache: warm loads equal cold parses; any change of the file invalidates."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from pyarrow import feather

from podscope.trace_parsers import load
from tests.conftest import SHARED_TRACES, real_xplanes
from tests.xspace_builder import SpaceBuilder


def capture(n: int) -> bytes:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "python")
    for i in range(n):
        # Stats on some events only: nullable and categorical columns with gaps round-trip.
        extra = {"step_num": i, "tf_op": f"dense_{i % 3}/MatMul:MatMul"} if i % 2 else {}
        p.event(line, "train", i * 1000, 900, shape="(1,2)", **extra)
    b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
    return b.bytes()


def test_warm_load_equals_cold_parse(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(20))
    cold = load(path, cache_dir=cache_dir)
    assert len([p for p in cache_dir.iterdir() if p.name != "hashes"]) == 1
    warm = load(path, cache_dir=cache_dir)
    for (name, a), (_, b) in zip(cold.frames(), warm.frames(), strict=True):
        pd.testing.assert_frame_equal(a, b, obj=name)  # empty frames included


def test_a_second_writer_of_the_same_entry_is_not_an_error(tmp_path: Path, cache_dir: Path) -> None:
    """Workers of one session that hard-link one file parse it at once and both store it:
    the second store finds the entry in place, which is no reason to warn."""
    import warnings

    from podscope.trace_parsers.cache import FrameCache

    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(20))
    frames = load(path, cache=False)
    store = FrameCache(cache_dir)
    key = store.key(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.put(key, frames)
        store.put(key, frames)
    pd.testing.assert_frame_equal(load(path, cache_dir=cache_dir).events, frames.events)


def test_warm_load_equals_cold_parse_on_real_captures(tmp_path: Path, cache_dir: Path) -> None:
    """Every frame, value for value, on the real GPU/ROCm/TPU samples (the warm path builds
    columns straight on the memory-mapped Arrow buffers)."""
    paths = real_xplanes()
    if not paths:
        pytest.skip(f"no XPlane samples under {SHARED_TRACES}")
    for path in paths:
        cold = load(path, cache_dir=cache_dir)
        warm = load(path, cache_dir=cache_dir)
        for (name, a), (_, b) in zip(cold.frames(), warm.frames(), strict=True):
            pd.testing.assert_frame_equal(a, b, obj=f"{path.name}: {name}", check_exact=True)


def test_changed_content_with_same_size_and_mtime_is_reparsed(
    tmp_path: Path, cache_dir: Path
) -> None:
    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(20))
    st = path.stat()
    assert len(load(path, cache_dir=cache_dir).events) == 20
    data = bytearray(path.read_bytes())
    data[data.index(b"train")] = ord("T")  # same size
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "Train" in load(path, cache_dir=cache_dir).events["name"].tolist()


def test_warm_frames_are_writable_and_writes_stay_out_of_the_cache(
    tmp_path: Path, cache_dir: Path
) -> None:
    """Warm frames are views of a copy-on-write mapping: in-place edits work as on a fresh
    parse (a read-only mapping raised "assignment destination is read-only") and never reach
    the cache file."""
    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(6))
    cold = load(path, cache_dir=cache_dir)
    warm = load(path, cache_dir=cache_dir).events
    edits = {"start_ns": 7, "step_num": 99, "is_eager": True, "name": "train", "line_id": 1}
    for col, value in edits.items():
        warm.loc[0, col] = value
    warm.loc[warm["step_num"].isna(), "step_num"] = -1
    assert warm.loc[0, list(edits)].tolist() == list(edits.values())
    assert (warm["step_num"] >= -1).all()
    again = load(path, cache_dir=cache_dir).events
    pd.testing.assert_frame_equal(again, cold.events)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_warm_frames_hold_no_file_descriptors(tmp_path: Path, cache_dir: Path) -> None:
    """Mappings outlive their files' descriptors: frames kept from many warm loads must not
    exhaust the process's descriptors (Python's mmap keeps one per mapping)."""
    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(6))
    load(path, cache_dir=cache_dir)
    before = len(os.listdir("/proc/self/fd"))
    kept = [load(path, cache_dir=cache_dir) for _ in range(30)]
    assert len(os.listdir("/proc/self/fd")) - before < 5
    assert all(k.events["start_ns"].equals(kept[0].events["start_ns"]) for k in kept)


def test_damaged_cache_entry_is_a_miss(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(5))
    load(path, cache_dir=cache_dir)
    entry = next(p for p in cache_dir.iterdir() if p.name != "hashes")
    (entry / "events.arrow").write_bytes(b"not arrow")
    assert len(load(path, cache_dir=cache_dir).events) == 5
    # An entry of another layout (here: Arrow's own pandas conversion) is a miss too.
    events = load(path, cache_dir=cache_dir).events
    feather.write_feather(pa.Table.from_pandas(events), entry / "events.arrow")
    assert len(load(path, cache_dir=cache_dir).events) == 5
    (entry / "stats.arrow").write_bytes(b"")
    assert len(load(path, cache_dir=cache_dir).events) == 5


def test_unwritable_cache_still_parses(tmp_path: Path) -> None:
    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(5))
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    with pytest.warns(UserWarning, match="parse cache not written"):
        assert len(load(path, cache_dir=blocker / "cache").events) == 5


FUZZ_CACHE = r"""
import random, shutil, sys
from pathlib import Path
import pandas as pd
from podscope.trace_parsers.cache import FrameCache
from podscope.trace_parsers.xplane import parse_xplane
from tests.analyzers.test_breakdown import worker_trace

root, n = Path(sys.argv[1]), int(sys.argv[2])
store = FrameCache(root / "cache")
frames = parse_xplane(worker_trace("w", 20, gpu=True), worker="w")
rng = random.Random(7)
outcomes = {"miss": 0, "hit": 0}
for trial in range(n):
    store.put("k", frames)
    files = sorted((root / "cache" / "k").iterdir())
    f = rng.choice(files)
    data = bytearray(f.read_bytes())
    if rng.random() < 0.2:  # truncated (a new file: entries are never truncated in place)
        data = data[: rng.randrange(len(data))]
    else:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    f.unlink()
    f.write_bytes(bytes(data))
    got = store.get("k")
    if got is None:
        outcomes["miss"] += 1
        assert not (root / "cache" / "k").exists(), "a bad entry must be dropped"
    else:  # a hit is only possible when the damage left the bytes that count intact
        outcomes["hit"] += 1
        for (name, a), (_, b) in zip(frames.frames(), got.frames(), strict=True):
            pd.testing.assert_frame_equal(a, b, obj=name)
    shutil.rmtree(root / "cache" / "k", ignore_errors=True)
print(outcomes)
"""


def test_corrupted_cache_entries_are_misses_never_crashes(tmp_path: Path) -> None:
    """Flipped bits or truncations in cache files (200 in make test, PODSCOPE_FUZZ_N in make
    fuzz): each read is a dropped entry (a miss) or frames equal to the parse; the process
    never dies of SIGBUS/SIGSEGV and no exception escapes (run in a child process, which a
    crash would kill). The old layout (no digests) returned wrong frames for 22.5 % of 120
    corruptions."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    n = int(os.environ.get("PODSCOPE_FUZZ_N", "200"))
    r = subprocess.run(
        [sys.executable, "-c", FUZZ_CACHE, str(tmp_path), str(n)],
        capture_output=True,
        text=True,
        timeout=300 + n // 2,
        cwd=repo,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "'miss'" in r.stdout


def test_a_cache_folder_others_can_write_is_not_used(tmp_path: Path) -> None:
    """Anyone who can write into the cache can plant an entry with matching digests."""
    from podscope.trace_parsers.cache import FrameCache

    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(5))
    cache = tmp_path / "cache"
    load(path, cache_dir=cache)
    assert cache.stat().st_mode & 0o777 == 0o700
    os.chmod(cache, 0o777)  # ours: tightened again on the next use
    assert len(load(path, cache_dir=cache).events) == 5
    assert cache.stat().st_mode & 0o777 == 0o700
    store = FrameCache(cache)
    key = store.key(path)
    assert store.get(key) is not None
    if os.getuid() == 0:  # root can hand the folder to another user
        os.chown(cache, 12345, 12345)
        assert not store.private() and store.get(key) is None


def test_an_entry_moved_under_another_key_is_a_miss(tmp_path: Path, cache_dir: Path) -> None:
    """Two files' entries swapped (folders renamed into each other's names): each load parses
    its own file again, never serving the other's frames."""
    a, b = tmp_path / "a.xplane.pb", tmp_path / "b.xplane.pb"
    a.write_bytes(capture(3))
    b.write_bytes(capture(7))
    load(a, cache_dir=cache_dir)
    load(b, cache_dir=cache_dir)
    ea, eb = (p for p in sorted(cache_dir.iterdir()) if p.name != "hashes")
    ea.rename(tmp_path / "swap")
    eb.rename(ea)
    (tmp_path / "swap").rename(eb)
    assert len(load(a, cache_dir=cache_dir).events) == 3
    assert len(load(b, cache_dir=cache_dir).events) == 7


def test_the_same_content_at_two_paths_keeps_each_its_source(
    tmp_path: Path, cache_dir: Path
) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    for folder in ("x", "y"):
        (tmp_path / folder / "w.xplane.pb").write_bytes(capture(3))
        os.utime(tmp_path / folder / "w.xplane.pb", ns=(1_700_000_000 * 10**9,) * 2)  # same
    for folder in ("x", "y", "x", "y"):
        frames = load(tmp_path / folder / "w.xplane.pb", cache_dir=cache_dir)
        assert set(frames.workers["file"].astype(str)) == {str(tmp_path / folder / "w.xplane.pb")}


TRUNCATE = r"""
import os, sys
from pathlib import Path
from podscope.trace_parsers import load
path, cache = Path(sys.argv[1]), Path(sys.argv[2])
cold = load(path, cache_dir=cache)
warm = load(path, cache_dir=cache)  # from the cache
for f in cache.rglob("*.arrow"):
    os.truncate(f, 0)  # what a cleaner, or another user of a shared disk, may do
total = int(warm.events["start_ns"].sum()) + int(warm.events["dur_ps"].sum())
assert total == int(cold.events["start_ns"].sum()) + int(cold.events["dur_ps"].sum())
assert len(load(path, cache_dir=cache).events) == len(cold.events)  # a miss, parsed again
print("ok")
"""


def test_a_truncated_cache_file_never_kills_a_reader(tmp_path: Path, cache_dir: Path) -> None:
    """Frames read from the cache, then every cache file truncated to nothing: the frames are
    still whole (a mapping of the files died of SIGBUS here), and the next load is a miss.
    Run in a child process, which a crash would kill."""
    import subprocess
    import sys

    path = tmp_path / "h_1.xplane.pb"
    path.write_bytes(capture(5000))
    repo = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-c", TRUNCATE, str(path), str(cache_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_a_shared_sticky_cache_folder_holds_a_private_folder_per_user() -> None:
    """A container's /cache: root's, mode 1777. Another user caches in its own folder there
    (in a forked child that becomes uid 10001)."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="podscope-shared-"))
    try:
        os.chmod(top, 0o755)
        shared = top / "cache"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        path = top / "h_1.xplane.pb"
        path.write_bytes(capture(5))
        os.chmod(path, 0o644)
        pid = os.fork()
        if pid == 0:  # the child: uid 10001, two loads, exit code 0 when both worked
            code = 1
            try:
                os.setgid(10001)
                os.setuid(10001)
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # "parse cache not written" fails it
                    load(path, cache_dir=shared)
                    load(path, cache_dir=shared)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        mine = shared / "uid-10001"
        assert mine.stat().st_uid == 10001 and mine.stat().st_mode & 0o777 == 0o700
        assert [p for p in mine.iterdir() if p.name != "hashes"]  # an entry, written and reused
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_cache_is_capped_and_the_least_recently_used_entries_go_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its cap the cache drops the entries read or written longest ago, parsed frames
    and derived ones alike, down to ``PRUNE_TO`` of the cap; a dropped entry is a miss."""
    from podscope.trace_parsers import cache as cache_module
    from podscope.trace_parsers.cache import FrameCache

    root = tmp_path / "cache"
    paths = []
    for i in range(4):
        paths.append(tmp_path / f"h_{i}.xplane.pb")
        paths[-1].write_bytes(capture(200 + i))
        load(paths[-1], cache_dir=root)
    store = FrameCache(root)
    entries = sorted(p for p in root.iterdir() if p.name.startswith(tuple("0123456789")))
    assert len(entries) == 4
    derived = root / "derived" / "session-x"
    derived.mkdir(parents=True)
    (derived / "steps.arrow").write_bytes(b"\0" * 10_000)
    one = sum(f.stat().st_size for f in entries[0].iterdir())
    by_path = {store.key(p): p for p in paths}
    for age, entry in enumerate([derived, *entries]):  # derived oldest, then h_0 … h_3
        os.utime(entry, (1_000_000 + age, 1_000_000 + age))
    assert store.get(store.key(paths[0])) is not None  # read now: the most recent
    capped = FrameCache(root, max_bytes=int(one * 2.6))
    assert capped.prune(force=True) == 3  # derived, then h_1 and h_2: under 0.8 of the cap
    kept = {by_path[p.name].name for p in root.iterdir() if p.name in by_path}
    assert kept == {"h_0.xplane.pb", "h_3.xplane.pb"} and not derived.exists()
    assert capped.prune(force=True) == 0  # within the cap now
    monkeypatch.setattr(cache_module, "PRUNE_EVERY_S", 3600.0)
    assert FrameCache(root, max_bytes=1).prune() == 0  # once a minute per process, unforced
    assert FrameCache.default_max_bytes({}) == cache_module.DEFAULT_MAX_BYTES
    assert FrameCache.default_max_bytes({"PODSCOPE_CACHE_MAX_GB": "0.5"}) == 1 << 29
    with pytest.raises(ValueError, match="PODSCOPE_CACHE_MAX_GB"):
        FrameCache.default_max_bytes({"PODSCOPE_CACHE_MAX_GB": "-1"})
