"""Synthesizes a large XSpace with the structure of a TF 2.x CPU capture (for the benchmarks).

Per step: a ``train`` marker (``step_num``, ``_r``) on the Python thread wrapping the eager call
chain, and on each executor thread ``ExecutorState::Process`` → TF op (``name:Type``) →
``ThreadpoolListener::Record``, with the stats TF writes (group_id, id, iter_num, shape).
The bytes are encoded directly (protobuf wire format) so that millions of events take seconds.
"""

from __future__ import annotations

from pathlib import Path

OP_TYPES = [
    "MatMul",
    "BiasAdd",
    "Relu",
    "Mul",
    "AddV2",
    "Sum",
    "ReadVariableOp",
    "AssignSubVariableOp",
]
START_NS = 1_796_000_000_000_000_000


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _v(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _b(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _stat_int(meta: int, value: int) -> bytes:
    return _b(4, _v(1, meta) + _v(4, value))


def _stat_str(meta: int, value: bytes) -> bytes:
    return _b(4, _v(1, meta) + _b(5, value))


def _event(meta: int, off_ps: int, dur_ps: int, stats: bytes = b"") -> bytes:
    return _b(4, _v(1, meta) + _v(2, off_ps) + _v(3, dur_ps) + stats)


def _map_entry(field: int, key: int, value: bytes) -> bytes:
    return _b(field, _v(1, key) + _b(2, value))


def synth_xspace(
    steps: int,
    ops_per_step: int = 100,
    threads: int = 2,
    op_us: int = 20,
    pace_op_us: int | None = None,
    devices: int = 0,
) -> bytes:
    """A serialized XSpace of ``steps * (3 * ops_per_step + 2)`` timed events, each op
    ``op_us`` long (a slower host: longer ops). With ``pace_op_us``, a synchronous worker: each
    step ends with an all-reduce (one more event) from the worker's arrival to the moment the
    slowest worker of the job (ops of ``pace_op_us``) arrives, as a data-parallel job waits.
    With ``devices``, as many GPUs (``/device:GPU:<d>``), each running ``KERNELS`` kernels a
    step over the host's ops and, synchronous, an NCCL all-reduce kernel while the host waits."""
    ev_names = ["train", "EagerExecute", "ExecutorState::Process", "ThreadpoolListener::Record"]
    ev_names += [
        f"layer_{i // len(OP_TYPES)}/{t}:{t}"
        for i, t in enumerate(OP_TYPES * (ops_per_step // 8 + 1))
    ][:ops_per_step]
    ev_names.append("allreduce/CollectiveReduceV2:CollectiveReduceV2")
    stat_names = ["step_num", "_r", "group_id", "id", "iter_num", "shape"]
    sm = {n: i + 1 for i, n in enumerate(stat_names)}
    em = {n: i + 1 for i, n in enumerate(ev_names)}
    op_ps = op_us * 1_000_000
    pace_ps = (pace_op_us or op_us) * 1_000_000
    work_ps = -(-ops_per_step // threads) * op_ps  # the ops, threads side by side
    step_ps = -(-ops_per_step // threads) * pace_ps + 500_000_000
    python, compute = bytearray(), [bytearray() for _ in range(threads)]
    shapes = [_stat_str(sm["shape"], f"({32 * (i % 4 + 1)},{64})".encode()) for i in range(4)]
    for s in range(steps):
        t0 = s * step_ps
        python += _event(
            em["train"],
            t0,
            step_ps - 100_000,
            _stat_int(sm["step_num"], s) + _stat_int(sm["_r"], 1),
        )
        python += _event(em["EagerExecute"], t0 + 50_000, step_ps - 300_000)
        gid = _stat_int(sm["group_id"], s)
        for k in range(ops_per_step):
            th = k % threads
            off = t0 + 200_000 + (k // threads) * op_ps
            line = compute[th]
            line += _event(
                em["ExecutorState::Process"],
                off,
                op_ps - 2_000_000,
                gid + _stat_int(sm["id"], s * ops_per_step + k) + _stat_int(sm["iter_num"], 0),
            )
            line += _event(
                em[ev_names[4 + k]], off + 1_000_000, op_ps - 5_000_000, gid + shapes[k % 4]
            )
            line += _event(em["ThreadpoolListener::Record"], off + 1_500_000, 0)
        if pace_op_us is not None:
            arrive = t0 + 200_000 + work_ps
            done = t0 + step_ps - 200_000_000  # every worker's all-reduce ends together
            compute[0] += _event(em[ev_names[-1]], arrive, done - arrive, gid)
    lines = _b(3, _v(1, 1) + _b(2, b"python") + _v(3, 1000) + bytes(python))
    gpus = b"".join(
        _gpu_plane(d, steps, step_ps, work_ps, pace_op_us is not None) for d in range(devices)
    )
    for th, body in enumerate(compute):
        lines += _b(
            3,
            _v(1, 100 + th) + _b(2, f"tf_Compute/{100 + th}".encode()) + _v(3, 1000) + bytes(body),
        )
    meta = b"".join(_map_entry(4, i, _v(1, i) + _b(2, n.encode())) for n, i in em.items())
    meta += b"".join(_map_entry(5, i, _v(1, i) + _b(2, n.encode())) for n, i in sm.items())
    host = _b(1, _v(1, 0) + _b(2, b"/host:CPU") + lines + meta)
    env_stats = _map_entry(5, 1, _v(1, 1) + _b(2, b"profile_start_time"))
    env = _b(
        1, _v(1, 1) + _b(2, b"Task Environment") + env_stats + _b(6, _v(1, 1) + _v(3, START_NS))
    )
    return host + gpus + env + _b(4, b"localhost")


#: Kernels each synthetic GPU runs per step (``synth_xspace``).
KERNELS = 8


def _gpu_plane(device: int, steps: int, step_ps: int, work_ps: int, synchronous: bool) -> bytes:
    """One GPU's plane: per step, ``KERNELS`` GEMM kernels over the host's ops and, in a
    synchronous job, an NCCL all-reduce kernel from the host's arrival to the step's end (its
    wait for the slowest worker), on one stream."""
    names = {1: b"volta_sgemm_128x64_nn", 2: b"ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    kernel_ps = work_ps // KERNELS
    body = bytearray()
    for s in range(steps):
        t0 = s * step_ps + 200_000
        for k in range(KERNELS):
            body += _event(1, t0 + k * kernel_ps + 1_000_000, kernel_ps - 2_000_000)
        if synchronous:
            arrive = t0 + work_ps
            done = s * step_ps + step_ps - 200_000_000
            body += _event(2, arrive + 1_000_000, done - arrive - 1_000_000)
    line = _b(3, _v(1, 7) + _b(2, b"Stream #7") + _v(3, 1000) + bytes(body))
    meta = b"".join(_map_entry(4, i, _v(1, i) + _b(2, n)) for i, n in names.items())
    return _b(1, _v(1, 2 + device) + _b(2, f"/device:GPU:{device}".encode()) + line + meta)


def events_in(
    steps: int, ops_per_step: int = 100, synchronous: bool = False, devices: int = 0
) -> int:
    return steps * (3 * ops_per_step + 2 + synchronous + devices * (KERNELS + synchronous))


def ensure_capture(root: Path, steps: int, ops_per_step: int = 100) -> Path:
    """Writes (once) ``root/synthetic-<steps>/plugins/profile/bench/localhost_6000.xplane.pb``."""
    path = (
        root
        / f"synthetic-{steps}x{ops_per_step}"
        / "plugins"
        / "profile"
        / "bench"
        / "localhost_6000.xplane.pb"
    )
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(synth_xspace(steps, ops_per_step))
        tmp.replace(path)
    return path


def pod_host(i: int, per_rack: int = 32, racks_per_slice: int = 4) -> str:
    """The i-th host's file label, named as pods name them: ``s<slice>-r<rack>-h<host>_8470``."""
    rack, host = divmod(i, per_rack)
    return f"s{rack // racks_per_slice}-r{rack:02d}-h{host:03d}_8470"


def pod_session(
    root: Path,
    hosts: int,
    steps: int = 60,
    ops_per_step: int = 100,
    slow: dict[int, int] | None = None,
    devices: int = 0,
) -> Path:
    """Writes (once) a synchronous job of ``hosts`` synthetic CPU workers (``synth_xspace``;
    60 steps x 100 ops and an all-reduce: 18 k events each), hosts in ``slow`` (index → op µs)
    slower than the rest (20 µs ops) and the others waiting for them in the all-reduce, under
    ``root/pod-<hosts>.../plugins/profile/pod/``; the session folder. Hosts are named as pods
    name them (``pod_host``); with ``devices``, each host has as many GPUs
    (``synth_xspace``)."""
    slow = slow or {}
    tag = "-".join(f"{i}x{us}" for i, us in sorted(slow.items()))
    gpus = f"x{devices}gpu" if devices else ""
    folder = root / f"pod-{hosts}{gpus}x{steps}x{ops_per_step}{'-' + tag if tag else ''}"
    session = folder / "plugins" / "profile" / "pod"
    done = session.parent / ".pod-complete"
    if done.exists():
        return session
    session.mkdir(parents=True, exist_ok=True)
    pace = max([20, *slow.values()])
    data = {
        us: synth_xspace(steps, ops_per_step, op_us=us, pace_op_us=pace, devices=devices)
        for us in {20, *slow.values()}
    }
    for i in range(hosts):
        (session / f"{pod_host(i)}.xplane.pb").write_bytes(data[slow.get(i, 20)])
    done.touch()
    return session
