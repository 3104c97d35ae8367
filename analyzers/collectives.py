"""Collectives matched across workers: who arrived last, who waited, and how long the
collective itself took.

    >>> ev = collective_events(frames.events)          # per worker: its collective calls
    >>> inst, part = match_collectives(ev, aligned)    # one row per instance / participant
    >>> collective_summary(part, pod)                  # per worker: last-arrival share, wait

Send/recv transfers (ParameterServerStrategy's variable reads and gradient pushes) are
point-to-point: each worker's time in them per step is reported, not matched.

A collective's participants are the workers (host collectives: MultiWorkerMirroredStrategy's
``CollectiveReduceV2`` & co.) or the devices (NCCL kernels, XLA ``all-reduce`` on GPU/TPU
planes) that run it. The *k*-th call of one collective (same op name, or same kernel name)
in an aligned step is one instance on every participant: the same graph runs the same
collectives in the same order on every worker.

Per instance: the arrival skew (last start − first start), the last arriver, each
participant's wait (from its start to the last arrival, at most its duration) and the
latency (the shortest duration among participants: what the collective costs when nobody
waits). Where the event carries a size (``bytes_accessed``), algorithm bandwidth = bytes /
latency and NCCL's bus bandwidth (× 2(n−1)/n for all-reduce, × (n−1)/n for all-gather and
reduce-scatter).

A session traced on one worker only (PodScope's safe plan for MultiWorkerMirroredStrategy on
TF 2.20/2.21 traces the chief's ops alone) has one participant per host instance: skew and
waits are then not measured here; ``analyzers.attribution`` estimates them from step starts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.analyzers._match import isin, matches

#: Host TF ops that are collectives (their op type), and device kernels / HLO ops by name.
HOST_COLLECTIVE = r"^(?:Collective\w*|NcclAllReduce|NcclReduce|NcclBroadcast)$"
#: PyTorch's gloo collectives by name: the span of gloo's thread (``gloo:all_reduce``) runs from
#: the call (DDP's reducer, or the loop's own ``dist.all_reduce``) to its completion, the wait for
#: the last rank included. (Its NCCL collectives are the GPU's ``ncclKernel_*`` kernels.)
TORCH_GLOO = r"gloo:"
#: Point-to-point transfers (ParameterServerStrategy's variable reads and gradient sends, and
#: any cross-device copy): timed per worker, not matched (their two ends have different names).
SEND_RECV = r"^_(?:Host)?(?:Send|Recv)$"
#: Device collectives by name: NCCL/RCCL kernels, XLA ops (a TPU op's name is its HLO text,
#: ``%all-reduce.3 = f32[…] all-reduce(…)``; a GPU kernel's its HLO name).
DEVICE_COLLECTIVE = (
    r"(?i)^%?(?:nccl\w*|rccl\w*|all-reduce|all-gather|reduce-scatter|all-to-all|"
    r"collective-permute|ragged-all-to-all)"
)
EVENT_COLUMNS = ["worker", "device", "key", "kind", "start_ns", "dur_ns", "bytes"]


def _kind(name: str) -> str:
    n = name.lower().replace("-", "").replace("_", "")
    for word, kind in (
        ("allreduce", "all-reduce"),
        ("collectivereduce", "all-reduce"),
        ("reducescatter", "reduce-scatter"),
        ("allgather", "all-gather"),
        ("gather", "all-gather"),
        ("bcast", "broadcast"),
        ("broadcast", "broadcast"),
        ("alltoall", "all-to-all"),
        ("permute", "collective-permute"),
    ):
        if word in n:
            return kind
    return "collective"


def algorithm(name: str) -> str:
    """NCCL's algorithm and protocol from a kernel name (``…_RING_LL_Sum_f32`` → ``RING/LL``),
    empty when the name does not say."""
    up = name.upper()
    algo = next((a for a in ("RING", "TREE", "COLLNET", "NVLS") if a in up), "")
    proto = next((p for p in ("LL128", "LL", "SIMPLE") if f"_{p}" in up or f"{p}_" in up), "")
    return "/".join(x for x in (algo, proto) if x)


def collective_events(events: pd.DataFrame) -> pd.DataFrame:
    """Every collective call of every worker: host collective ops, device collectives, and
    host send/recv transfers (kind ``send/recv``).

    Returns:
        Columns ``EVENT_COLUMNS``: ``device`` is ``host`` for a host op, else the plane;
        ``key`` the op name (host) or kernel / HLO name (device); ``bytes`` the event's
        ``bytes_accessed`` (NaN when unknown). Sorted by worker, device, start.
    """
    on_device = matches(events["plane"], "/device:", how="startswith")
    p2p = ~on_device & matches(events["op_type"], SEND_RECV, how="match")
    gloo = ~on_device & matches(events["name"], TORCH_GLOO, how="match")
    host = ~on_device & matches(events["op_type"], HOST_COLLECTIVE, how="match") | p2p | gloo
    # A TPU's async op line repeats its ops' starts: its op line alone counts them.
    tpu_async = matches(events["plane"], "/device:TPU", how="startswith") & ~isin(
        events["line"], {"XLA Ops"}
    )
    device = on_device & ~tpu_async & matches(events["name"], DEVICE_COLLECTIVE, how="match")
    ev = events[host | device]
    is_host = host[host | device]
    key = np.where(
        is_host & ~gloo[host | device], ev["op_name"].astype(str), ev["name"].astype(str)
    )
    out = pd.DataFrame(
        {
            "worker": ev["worker"].astype(str).to_numpy(),
            "device": np.where(is_host, "host", ev["plane"].astype(str)),
            "key": key,
            "kind": [
                "send/recv" if is_p2p else _kind(str(k) + " " + str(t))
                for k, t, is_p2p in zip(
                    key, ev["op_type"].astype(str), p2p[host | device], strict=True
                )
            ],
            "start_ns": ev["start_ns"].to_numpy(np.int64),
            "dur_ns": ev["dur_ps"].to_numpy(np.int64) // 1000,
            "bytes": pd.to_numeric(ev["bytes_accessed"], errors="coerce").to_numpy(np.float64),
        },
        columns=EVENT_COLUMNS,
    )
    return out.sort_values(["worker", "device", "start_ns"], ignore_index=True)


def _in_steps(coll: pd.DataFrame, aligned: pd.DataFrame) -> pd.DataFrame:
    """``coll`` with the aligned step each call starts in (calls outside every step dropped),
    in ``coll``'s order within each worker, workers sorted. Every worker at once: the steps
    and the calls in one order by (worker, time), each call taking the last step started at or
    before it in its worker (a loop over a pod's 1,024 workers took 0.9 s a call)."""
    if aligned.empty:
        return coll.assign(step=pd.Series(dtype="int64"))
    # worker codes by a hash lookup (a dict lookup per call's worker string was 0.2 s of
    # 133 k calls)
    names = pd.Index(sorted(aligned["worker"].astype(str).unique()))
    st = aligned.assign(_w=names.get_indexer(aligned["worker"].astype(str)))
    st = st.sort_values(["_w", "start_ns"], kind="stable")
    c_w = names.get_indexer(coll["worker"].astype(str))
    calls = coll[c_w >= 0]
    c_w = c_w[c_w >= 0].astype(np.int64)
    s_w = st["_w"].to_numpy(np.int64)
    s_start = st["start_ns"].to_numpy(np.int64)
    t = calls["start_ns"].to_numpy(np.int64)
    # one sequence by (worker, time), steps before calls at one instant (side="right")
    w_all = np.concatenate([s_w, c_w])
    t_all = np.concatenate([s_start, t])
    kind = np.concatenate([np.zeros(len(s_w), np.int8), np.ones(len(t), np.int8)])
    order = np.lexsort((kind, t_all, w_all))
    pos = np.where(kind[order] == 0, order, -1)  # a step's row in ``st``
    last = np.maximum.accumulate(pos) if len(pos) else pos
    k = np.full(len(t), -1, dtype=np.int64)
    is_call = kind[order] == 1
    k[order[is_call] - len(s_w)] = last[is_call]
    ok = k >= 0
    ok[ok] = s_w[k[ok]] == c_w[ok]  # the step is the call's own worker's
    ok[ok] = t[ok] < st["end_ns"].to_numpy(np.int64)[k[ok]]
    steps = st["step"].to_numpy()
    out = calls[ok].assign(step=steps[k[ok]])
    out = out.assign(_w=c_w[ok]).sort_values("_w", kind="stable")  # workers sorted, as before
    return out.drop(columns="_w").reset_index(drop=True)


def match_collectives(
    coll: pd.DataFrame, aligned: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Instances of each collective across participants.

    Args:
        coll: ``collective_events`` output.
        aligned: aligned steps (``SessionAnalysis.aligned``: worker, step, start_ns, end_ns).

    Returns:
        ``(instances, participants)``, of the collectives (send/recv transfers are
        point-to-point: not matched). ``instances``: ``key, kind, step, occurrence,
        participants, skew_ns, last_arriver, latency_ns, max_dur_ns, bytes, algorithm,
        algbw_gbps, busbw_gbps`` (skew and last arriver missing with one participant).
        ``participants``: ``key, step, occurrence, worker, device, start_ns, dur_ns, wait_ns,
        last`` (``last``: this participant arrived last, with at least two participants).
    """
    p = _in_steps(coll[coll["kind"] != "send/recv"], aligned)
    p["occurrence"] = p.groupby(["worker", "device", "key", "step"]).cumcount()
    inst_keys = ["key", "step", "occurrence"]
    g = p.groupby(inst_keys, sort=True)
    p["participants"] = g["worker"].transform("size")
    last_start = g["start_ns"].transform("max")
    p["wait_ns"] = np.clip(last_start - p["start_ns"], 0, p["dur_ns"])
    p["last"] = (p["start_ns"] == last_start) & (p["participants"] > 1)
    inst = g.agg(
        kind=("kind", "first"),
        participants=("worker", "size"),
        first_ns=("start_ns", "min"),
        last_ns=("start_ns", "max"),
        latency_ns=("dur_ns", "min"),
        max_dur_ns=("dur_ns", "max"),
        bytes=("bytes", "max"),
    ).reset_index()
    last = p[p["last"]].drop_duplicates(inst_keys).set_index(inst_keys)
    last = last["worker"] + np.where(last["device"] == "host", "", " " + last["device"])
    inst["last_arriver"] = inst.set_index(inst_keys).index.map(last).astype(object)
    single = inst["participants"] < 2
    inst["skew_ns"] = (inst["last_ns"] - inst["first_ns"]).astype("Float64").mask(single)
    inst.loc[single, "last_arriver"] = None
    inst["algorithm"] = inst["key"].map(algorithm)
    n = inst["participants"].astype(float)
    factor = np.select(
        [inst["kind"] == "all-reduce", inst["kind"].isin(["all-gather", "reduce-scatter"])],
        [2 * (n - 1) / n, (n - 1) / n],
        1.0,
    )
    algbw = inst["bytes"] / inst["latency_ns"].where(inst["latency_ns"] > 0)  # bytes/ns = GB/s
    inst["algbw_gbps"] = algbw
    inst["busbw_gbps"] = algbw * factor
    inst = inst.drop(columns=["first_ns", "last_ns"])
    cols = [*inst_keys, "worker", "device", "start_ns", "dur_ns", "wait_ns", "last"]
    return inst, p[cols].sort_values([*inst_keys, "start_ns"], ignore_index=True)


def collective_summary(
    participants: pd.DataFrame, pod: pd.DataFrame, calls: pd.DataFrame
) -> pd.DataFrame:
    """Per worker: collective calls, time in them, waits and last arrivals, and time in
    send/recv transfers.

    Args:
        participants: ``match_collectives``'s participants.
        pod: ``analyzers.pod.pod_view`` (steps and step times per worker).
        calls: ``collective_events`` (its send/recv rows are timed here).

    Returns:
        Columns ``worker, calls, measured (calls with ≥ 2 participants), collective_ms_per_step,
        wait_ms_per_step, wait_share (of its step time), arrived_last_share (of measured
        calls), transfer_ms_per_step, transfer_share (time in measured collectives after the
        last participant arrived: the collective itself), send_recv_ms_per_step``; waits,
        transfers and shares missing where nothing was measured.
    """
    cols = [
        "worker",
        "calls",
        "measured",
        "collective_ms_per_step",
        "wait_ms_per_step",
        "wait_share",
        "arrived_last_share",
        "transfer_ms_per_step",
        "transfer_share",
        "send_recv_ms_per_step",
    ]
    p2p = _in_steps(
        calls[calls["kind"] == "send/recv"], pod[["worker", "step", "start_ns", "end_ns"]]
    )
    if participants.empty and p2p.empty:
        return pd.DataFrame(columns=cols)
    steps = pod.groupby(pod["worker"].astype(str))["step_time_ns"].agg(["size", "sum"])
    n = participants.groupby(["key", "step", "occurrence"])["worker"].transform("size")
    part = participants.assign(measured=n > 1)
    g = part.groupby("worker")
    out = g.agg(calls=("dur_ns", "size"), measured=("measured", "sum"), dur=("dur_ns", "sum"))
    workers = sorted(set(out.index) | set(p2p["worker"]))
    out = out.reindex(workers).fillna(0).rename_axis("worker").reset_index()
    out[["calls", "measured"]] = out[["calls", "measured"]].astype("int64")
    m = part[part["measured"]].groupby("worker")
    wait = m["wait_ns"].sum().reindex(out["worker"]).to_numpy()
    moving = (m["dur_ns"].sum() - m["wait_ns"].sum()).reindex(out["worker"]).to_numpy()
    last = m["last"].mean().reindex(out["worker"]).to_numpy()
    n_steps = out["worker"].map(steps["size"]).astype(float)
    out["collective_ms_per_step"] = out["dur"] / n_steps / 1e6
    out["wait_ms_per_step"] = wait / n_steps.to_numpy() / 1e6
    out["wait_share"] = wait / out["worker"].map(steps["sum"]).astype(float).to_numpy()
    out["arrived_last_share"] = last
    out["transfer_ms_per_step"] = moving / n_steps.to_numpy() / 1e6
    out["transfer_share"] = moving / out["worker"].map(steps["sum"]).astype(float).to_numpy()
    out["send_recv_ms_per_step"] = (
        out["worker"].map(p2p.groupby("worker")["dur_ns"].sum()).fillna(0.0) / n_steps / 1e6
    )
    return out[cols]
