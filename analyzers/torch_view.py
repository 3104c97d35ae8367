"""A PyTorch rank's step in the categories its users know (HTA's and PyTorch's words), from
the step breakdown (``analyzers.breakdown``: each instant of a step to its highest-priority
activity, XProf's model) and the collectives' matched waits (``analyzers.collectives``).

    >>> torch_categories(analysis.breakdown, analysis.collective_participants)

Per worker × device × step, the categories partition the step (they sum to its time):

* ``gpu_compute``: kernels (``device_compute``);
* ``comm_wait``: in a collective before its last participant arrived (the rank waits for a
  late one: its matched wait, at most its communication time);
* ``comm_transfer``: the rest of its communication (``device_collectives``: NCCL/RCCL kernels
  not hidden under compute, or gloo's all-reduce on a CPU rank);
* ``memcpy``: copies, either way, and memsets (``device_to_device``, ``output``, host→device
  copies, ``host_offload``);
* ``cpu_python``: the host's own work (CPU ops, launches, compilation) and, on a CPU rank, the
  time no event covers (Python between the ops: torch.profiler records no Python by default);
* ``dataloader``: the loop waiting in ``next()`` of its DataLoader (``input`` less host→device
  copies);
* ``gpu_idle``: on a GPU, the time with nothing traced running (HTA's idle).
"""

from __future__ import annotations

import pandas as pd

#: Column → name, in the order the Pod Viewer stacks them.
TORCH_CATEGORIES = {
    "gpu_compute": "GPU compute",
    "comm_wait": "Communication: wait",
    "comm_transfer": "Communication: transfer",
    "memcpy": "Memcpy",
    "cpu_python": "CPU and Python",
    "dataloader": "DataLoader",
    "gpu_idle": "GPU idle",
}
TORCH_COLUMNS = [f"{c}_ns" for c in TORCH_CATEGORIES]
HOST = "/host:CPU"


def _ns(rows: pd.DataFrame, *cols: str) -> pd.Series:
    return sum((rows[c].astype("Float64").fillna(0) for c in cols), pd.Series(0.0, rows.index))


def torch_categories(rows: pd.DataFrame, participants: pd.DataFrame | None = None) -> pd.DataFrame:
    """``rows`` (breakdown rows: worker, device, step, ``<category>_ns``, ``host_to_device_ns``)
    in PyTorch's categories.

    Args:
        rows: ``step_breakdown`` rows, or ``step_rows`` (means: then no step, no waits).
        participants: ``match_collectives``'s participants (worker, device — ``host`` for a
            host collective —, step, wait_ns); None: waits unknown, all communication is
            transfer.

    Returns:
        ``rows``' worker, device, step (where given), step_time_ns, split, and
        ``TORCH_COLUMNS`` (NA where the row is not split).
    """
    keys = [c for c in ("worker", "device", "step") if c in rows]
    out = rows[[*keys, "step_time_ns", "split"]].copy()
    on_gpu = rows["device"].astype(str) != HOST
    comm = _ns(rows, "device_collectives_ns")
    wait = pd.Series(0.0, rows.index)
    if participants is not None and len(participants) and "step" in rows:
        p = participants.assign(
            worker=participants["worker"].astype(str),
            device=participants["device"].astype(str).replace("host", HOST),
        )
        summed = p.groupby(["worker", "device", "step"])["wait_ns"].sum()
        index = pd.MultiIndex.from_arrays(
            [rows["worker"].astype(str), rows["device"].astype(str), rows["step"]]
        )
        wait = pd.Series(summed.reindex(index).fillna(0).to_numpy(float), rows.index)
    wait = wait.clip(upper=comm)
    h2d = _ns(rows, "host_to_device_ns") if "host_to_device_ns" in rows else 0.0
    others = _ns(rows, "all_others_ns", "device_idle_ns")
    out["gpu_compute_ns"] = _ns(rows, "device_compute_ns")
    out["comm_wait_ns"] = wait
    out["comm_transfer_ns"] = comm - wait
    out["memcpy_ns"] = _ns(rows, "device_to_device_ns", "output_ns", "host_offload_ns") + h2d
    out["cpu_python_ns"] = _ns(rows, "host_compute_ns", "kernel_launch_ns", "compilation_ns") + (
        others.where(~on_gpu, 0.0)
    )
    out["dataloader_ns"] = _ns(rows, "input_ns") - h2d
    out["gpu_idle_ns"] = others.where(on_gpu, 0.0)
    split = rows["split"].astype(bool)
    for col in TORCH_COLUMNS:
        out[col] = out[col].round().astype("Int64").mask(~split)
    return out.reset_index(drop=True)
