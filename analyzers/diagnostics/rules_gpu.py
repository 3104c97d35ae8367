"""Rules that need device planes: Tensor Cores, mixed precision, TF32, copies, launches, memory."""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.analyzers._match import isin, matches
from podscope.analyzers.diagnostics.base import (
    DEVICE,
    STEPS,
    Severity,
    Thresholds,
    Verdict,
    rule,
    severity_of,
    skip,
)
from podscope.analyzers.hlo_stats import host_copies
from podscope.analyzers.ops import TENSOR_CORE_ELIGIBLE
from podscope.analyzers.rule_inputs import ALLREDUCE, COPY, DEVICE_PLANE
from podscope.analyzers.session import SessionAnalysis

COMPUTE_HEAVY = frozenset(
    TENSOR_CORE_ELIGIBLE | {"Conv2D", "MatMul", "BiasAdd", "Softmax", "FusedBatchNormV3"}
)


def _device_events(inp: SessionAnalysis) -> pd.DataFrame:
    """The GPU/TPU events rules read (copies, all-reduces: ``rule_events``)."""
    ev = inp.rule_events
    return ev[matches(ev["plane"], DEVICE_PLANE, how="match")]


def _busy_devices(inp: SessionAnalysis) -> int:
    """GPUs/TPUs (over workers) that ran any work event (``SessionAnalysis.devices``)."""
    return int((~inp.devices["idle"]).sum())


def _plane_stat(inp: SessionAnalysis, key: str) -> pd.Series:
    s = inp.meta.plane_stats
    s = s[s["key"] == key]
    return pd.Series(
        s["int_value"].astype("Float64").to_numpy(),
        index=s["worker"].astype(str) + " " + s["plane"].astype(str),
    )


@rule("tensor_cores", "Tensor Cores unused by eligible ops", needs=(DEVICE,), levels="tensor_cores")
def tensor_cores(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    k = inp.kernels
    eligible = k[k["tc_eligible"].astype(bool)]
    if eligible.empty:
        return skip("no Tensor-Core-eligible op (Conv2D, MatMul, …) on the device")
    value = float(
        eligible.loc[~eligible["tensor_core"].astype(bool), "self_ps"].sum()
        / eligible["self_ps"].sum()
    )
    worst = eligible[~eligible["tensor_core"].astype(bool)].nlargest(5, "self_ps")
    return Verdict(
        severity_of(value, t.tensor_cores),
        value=value,
        expression="(lambda k: k[~k.tensor_core & k.tc_eligible].self_ps.sum() / k[k.tc_eligible].self_ps.sum())(prepare(frames).kernels)",
        evidence={
            "kernels_without_tensor_cores_us": dict(
                zip(worst["kernel"], (worst["self_ps"] / 1e6).round(1), strict=True)
            )
        },
        recommendation="Use mixed precision (mixed_float16) and dimensions that are multiples of 8 so cuDNN/cuBLAS "
        "pick Tensor Core kernels (names with h884, h1688, 16816, hmma…).",
        at_stake_ns=value
        * float(eligible["self_ps"].sum())
        / 1000
        / max(1, inp.capture_steps["step"].nunique()),
        page="/ops?by=kernel",
    )


@rule(
    "mixed_precision",
    "Mixed precision off (16-bit share of device compute below 10 %)",
    levels="half_precision_share",
)
def mixed_precision(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The share of device compute in 16-bit types: on XLA devices, of the XLA ops' self time,
    by the element types each instruction reads and writes (``compute_dtype``: a bf16 matmul
    accumulating in f32 is 16-bit compute); elsewhere, of the steps' device compute, by the
    kernels' names."""
    ops = xla_compute(inp)
    if not inp.has_device and ops.empty:
        return skip(
            "CPU-only trace: a rule for accelerator devices (on CPU, mixed precision rarely speeds up training)"
        )
    if len(ops) and inp.has_device and not _matrix_ops(ops).any():
        top = ops.groupby("hlo_op", observed=True)["self_ps"].sum().nlargest(3)
        return skip(
            "no matmul or convolution in the device's compute (its largest ops: "
            + ", ".join(str(op) for op in top.index)
            + "): 16-bit types pay off on the matrix units; these ops are bound by memory"
        )
    if len(ops):
        total = float(ops["self_ps"].sum())
        half = ops["compute_dtype"].isin(["bf16", "f16"]).to_numpy()
        value = float(ops.loc[half, "self_ps"].sum()) / total if total else 0.0
        top = ops.groupby(["hlo_op", "compute_dtype"], observed=True)["self_ps"].sum().nlargest(5)
        evidence = {
            "half_precision_share": round(value, 4),
            "by_type_us": (ops.groupby("compute_dtype", observed=True)["self_ps"].sum() / 1e6)
            .round(1)
            .to_dict(),
            "largest_ops_us": {f"{op} ({dt})": round(v / 1e6, 1) for (op, dt), v in top.items()},
        }
        expression = "(lambda o: o[o.compute_dtype.isin(['bf16', 'f16'])].self_ps.sum() / o.self_ps.sum())(__import__('podscope.analyzers.diagnostics.rules_gpu', fromlist=['x']).xla_compute(prepare(frames)))"
    else:
        b = inp.split
        if b.empty or float(b["device_compute_ns"].astype(float).sum()) == 0:
            return skip("no device compute inside steps")
        value = float(
            b["device_compute_16_ns"].astype(float).sum()
            / b["device_compute_ns"].astype(float).sum()
        )
        evidence = {"half_precision_share": round(value, 4)}
        expression = "(lambda b: b.device_compute_16_ns.sum() / b.device_compute_ns.sum())(prepare(frames).split)"
    off = value < t.half_precision_share
    if not inp.has_device:  # XLA:CPU: the precision is a fact, not a problem
        return Verdict(
            Severity.NONE,
            title=f"XLA:CPU computes {'in 16-bit' if not off else 'in float32'}: {value:.0%} of "
            "its XLA compute in bf16/f16 (on a CPU, bfloat16 pays off only with AMX or "
            "AVX512-BF16 units)",
            value=value,
            expression=expression,
            evidence=evidence,
        )
    return Verdict(
        Severity.MODERATE if off else Severity.NONE,
        # passed, the title must not read "Mixed precision off"
        title=None if off else f"Mixed precision on: {value:.0%} of device compute in 16-bit",
        value=value,
        expression=expression,
        evidence=evidence,
        recommendation="tf.keras.mixed_precision.set_global_policy('mixed_float16') (or 'mixed_bfloat16' on "
        "TPU/Ampere+), with a LossScaleOptimizer in custom loops.",
    )


#: XLA categories that move data or synchronise rather than compute.
_NOT_COMPUTE = frozenset(
    {
        "copy-start",
        "copy-done",
        "data formatting",
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "send",
        "recv",
        "send-done",
        "recv-done",
    }
)


#: XLA ops that run on matrix units: dots, convolutions and the library calls that do them
#: (cuBLAS/hipBLASLt GEMMs, cuDNN/MIOpen convolutions), by category or instruction name.
_MATRIX = r"(?i)\b(?:dot|convolution)\b|gemm|matmul|conv|cublas|cudnn|einsum"


def _matrix_ops(ops: pd.DataFrame) -> pd.Series:
    """Which of ``xla_compute``'s ops run on matrix units."""
    return ops["category"].astype(str).str.contains(_MATRIX) | ops["hlo_op"].astype(
        str
    ).str.contains(_MATRIX)


def xla_compute(inp: SessionAnalysis) -> pd.DataFrame:
    """The XLA ops on GPUs and TPUs (on a CPU-only capture, its XLA:CPU thunks) that compute
    in floating point (not copies, layout changes or collectives): ``worker, device, hlo_op,
    category, compute_dtype, self_ps``."""
    ops = inp.xla_ops
    if ops.empty:
        return pd.DataFrame(
            columns=["worker", "device", "hlo_op", "category", "compute_dtype", "self_ps"]
        )
    on_device = ops["device"].astype(str).str.match(DEVICE_PLANE).to_numpy()
    if not inp.has_device:  # XLA:CPU: the thunks are the compute
        on_device = np.ones(len(ops), dtype=bool)
    category = ops["category"].astype(str)
    dtype = ops["compute_dtype"].astype(str)
    floating = dtype.str.match(r"^(?:bf16|f\d|c\d)").to_numpy()
    keep = on_device & ~category.isin(_NOT_COMPUTE).to_numpy() & floating
    return ops.loc[keep, ["worker", "device", "hlo_op", "category", "compute_dtype", "self_ps"]]


@rule("tf32", "TF32 disabled on an Ampere-or-newer GPU", needs=(DEVICE,), levels="tf32_fp32_share")
def tf32(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    s = inp.meta.plane_stats
    vendors = set(s.loc[s["key"] == "device_vendor", "str_value"].dropna().astype(str))
    if vendors - {"Nvidia", "NVIDIA"}:  # AMD's gfx9 reports major 9: not an NVIDIA Ampere
        return skip(f"TF32 is an NVIDIA Ampere+ mode; these GPUs are {', '.join(sorted(vendors))}")
    cc = _plane_stat(inp, "compute_cap_major").dropna()
    if cc.empty:
        return skip("the trace does not record the GPUs' compute capability")
    if float(cc.max()) < 8:
        return skip(f"compute capability {int(cc.max())}.x: TF32 needs Ampere (8.0) or newer")
    k = inp.kernels
    gemm = k[matches(k["kernel"].astype("category"), r"(?i)gemm|conv")]
    fp32 = gemm[
        matches(gemm["kernel"].astype("category"), r"(?i)sgemm|fp32|f32f32")
        & ~matches(gemm["kernel"].astype("category"), r"(?i)tf32|1688|884|16816|xmma")
    ]
    value = float(fp32["self_ps"].sum() / gemm["self_ps"].sum()) if gemm["self_ps"].sum() else 0.0
    return Verdict(
        Severity.MODERATE if value >= t.tf32_fp32_share else Severity.NONE,
        value=value,
        expression="(lambda g: g[g.kernel.str.contains('(?i)sgemm|fp32|f32f32') & ~g.kernel.str.contains('(?i)tf32|1688|884|16816|xmma')].self_ps.sum() / g.self_ps.sum())(prepare(frames).kernels.pipe(lambda k: k[k.kernel.str.contains('(?i)gemm|conv')]))",
        evidence={"fp32_gemm_kernels": fp32["kernel"].head(5).tolist()},
        recommendation="TF 2.4+ enables TF32 by default; something turned it off: "
        "tf.config.experimental.enable_tensor_float_32_execution(True).",
    )


def _host_copies(inp: SessionAnalysis) -> pd.DataFrame:
    """The XLA copies that end in or leave host memory (memory space 5): one per copy-done
    (or copy), not its start."""
    ops = inp.xla_ops
    if ops.empty:
        return ops
    return ops[host_copies(ops) & (ops["category"].astype(str) != "copy-start").to_numpy()]


@rule(
    "host_device_copies",
    "Host↔device copies every step",
    needs=(DEVICE, STEPS),
    levels="copies_per_step",
)
def copies(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    d = _device_events(inp)
    cp = d[matches(d["name"], COPY)]
    steps = max(1, inp.capture_steps["step"].nunique())
    offload = _host_copies(inp)  # XLA copies to and from host memory are such copies too
    b = inp.split
    if len(offload) and "host_offload_ns" in b and b["host_offload_ns"].astype(float).any():
        if cp.empty:  # the host-offload finding judges them, by the time the steps wait
            return skip(
                f"its {len(offload):,} host↔device copies are XLA host-offload copies (memory "
                "space 5), which the host-offload finding judges by the time the steps wait"
            )
        offload = offload.iloc[:0]  # counted there, not here
    value = (len(cp) + len(offload)) / steps / max(1, _busy_devices(inp))
    share = (
        float(cp["dur_ps"].sum() / 1000 / (inp.step_time_ns * steps)) if inp.step_time_ns else 0.0
    )
    return Verdict(
        severity_of(value, t.copies_per_step),
        value=float(value),
        unit="per_step",
        expression="(lambda i: (lambda d: d.name.astype(str).str.contains('(?i)memcpy(?:HtoD|DtoH|H2D|D2H)').sum() / max(1, i.capture_steps.step.nunique()) / max(1, (~i.devices.idle).sum()))(i.rule_events[i.rule_events.plane.astype(str).str.match('/device:(?:GPU|TPU)')]))(prepare(frames))",
        evidence={
            "copies": len(cp),
            "xla_host_memory_copies": len(offload),
            "per_step_per_device": round(float(value), 1),
            "share_of_step": round(share, 4),
            "by_kind": cp["name"].astype(str).value_counts().to_dict(),
        },
        recommendation="Keep tensors on the device: avoid .numpy()/Python values in the step, place ops on the GPU, "
        "and prefetch input to the device (tf.data.experimental.prefetch_to_device).",
        page="/timeline?q=Memcpy",
    )


@rule(
    "ops_on_host",
    "Compute ops placed on the host of a GPU worker",
    needs=(DEVICE,),
    levels="ops_on_host",
)
def ops_on_host(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    ops = inp.op_summary
    host_ops = ops[~ops["on_device"] & isin(ops["op_type"], COMPUTE_HEAVY)]
    value = float(host_ops["self_ps"].sum() / max(1, ops["self_ps"].sum()))
    return Verdict(
        Severity.MODERATE if value >= t.ops_on_host else Severity.NONE,
        value=value,
        expression="(lambda o: o[~o.plane.astype(str).str.startswith('/device:') & o.op_type.astype(str).isin(__import__('podscope.analyzers.diagnostics.rules_gpu', fromlist=['x']).COMPUTE_HEAVY)].op_self_ps.sum() / o.op_self_ps.sum())(prepare(frames).ops)",
        evidence={
            "executions_on_the_host": host_ops.groupby("op_name")["n"]
            .sum()
            .nlargest(5)
            .astype(int)
            .to_dict()
        },
        recommendation="Check device placement (tf.debugging.set_log_device_placement(True)): ops without a GPU "
        "kernel or with int32 inputs run on the CPU and add copies.",
        page="/ops",
    )


@rule(
    "allreduce_count",
    "Many all-reduces per GPU per step",
    needs=(DEVICE, STEPS),
    levels="allreduce_per_step",
)
def allreduce_count(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    d = _device_events(inp)
    coll = d[matches(d["name"], ALLREDUCE)]
    if coll.empty:
        return skip("no all-reduce on the devices")
    steps = inp.capture_steps["step"].nunique()
    busy = _busy_devices(inp)
    value = len(coll) / steps / max(1, busy)
    return Verdict(
        Severity.MODERATE if value > t.allreduce_per_step else Severity.NONE,
        value=float(value),
        unit="per_step",
        expression="(lambda i: (lambda d: d.name.astype(str).str.contains('(?i)^nccl.*all-?reduce|all-?reduce').sum() / i.capture_steps.step.nunique() / (~i.devices.idle).sum())(i.rule_events[i.rule_events.plane.astype(str).str.match('/device:(?:GPU|TPU)')]))(prepare(frames))",
        evidence={
            "allreduce_kernels": len(coll),
            "steps": int(steps),
            "busy_devices": busy,
        },
        recommendation="Pack gradients into fewer all-reduces (tf.distribute's CommunicationOptions("
        "bytes_per_pack=…)); each all-reduce pays latency.",
        page="/timeline?q=nccl",
    )


#: Steps with two GPUs at work together that launch skew needs before it judges.
MIN_SKEW_STEPS = 3


@rule(
    "launch_skew",
    "Launch skew between the GPUs of one worker",
    needs=(DEVICE, STEPS),
    levels="launch_skew",
)
def launch_skew(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """Per aligned step and worker, how long the last GPU to start waited for its work after
    the first one started, over the step period (start to start): its lateness, counted only
    while it was idle (a GPU still busy with the previous step's work did not wait for a
    launch; XLA executions that run back to back show no launch skew however their starts
    spread). A step whose GPUs start further apart than a whole period did not run on them
    together (grouped steps of different GPUs): it is not launch skew, and is left out,
    never clipped. In XLA program steps only the devices that run the step's program count
    (a device that only stages copies for it is not launched late); fewer than
    ``MIN_SKEW_STEPS`` steps measured are too few to judge."""
    s = inp.aligned
    if _busy_devices(inp) < 2:
        return skip("needs at least two busy GPUs")
    firsts = inp.device_firsts
    b = inp.split
    xla = b[b["method"] == "xla_program"]
    if len(xla):
        runs = set(zip(xla["worker"].astype(str), xla["device"].astype(str), strict=True))
        keep = [(w, p) in runs for w, p in zip(firsts["worker"], firsts["plane"], strict=True)]
        firsts = firsts[keep]
        if xla.groupby("worker")["device"].nunique().max() < 2:
            return skip("one device runs the step's program on each worker: no launch to skew")
    # every worker at once (a loop over a pod's 1,024 workers took 4.3 s)
    key = [firsts["worker"].astype(str), firsts["step_start_ns"]]
    first = firsts[(firsts.groupby(key)["plane"].transform("nunique") >= 2).to_numpy()]
    key = [first["worker"].astype(str), first["step_start_ns"]]
    late = first["first_ns"] - first.groupby(key)["first_ns"].transform("min")
    # A device that starts late but was busy until then (the previous step's work ran
    # long) did not wait for dispatch: only its idle time before the step counts.
    waited = np.minimum(late, first["idle_before_ns"].astype("int64"))
    spread, wait = late.groupby(key).max(), waited.groupby(key).max()
    # Relative to the step period (start to start), robust to steps that end before their
    # kernels: the median of a worker's start-to-start times, or its one step's length.
    worker = s["worker"].astype(str)
    period = (
        s["start_ns"]
        .groupby(worker)
        .diff()
        .groupby(worker)
        .median()
        .fillna((s["end_ns"] - s["start_ns"]).groupby(worker).first().astype(float))
    )
    period = period.reindex(spread.index.get_level_values(0)).to_numpy(dtype=float)
    ok = period > 0  # a worker without aligned steps or period is not judged
    names = spread.index.get_level_values(0).to_numpy()[ok]
    share = spread.to_numpy(dtype=float)[ok] / period[ok]
    keep = share < 1
    waits = wait.to_numpy(dtype=float)[ok][keep] / period[ok][keep]
    measured = list(zip(names[keep], waits, strict=True))
    raw = list(share[keep])
    apart = list(zip(names[~keep], share[~keep] * period[ok][~keep], strict=True))
    if not measured:
        if apart:
            return skip(
                f"the GPUs started their step {max(v for _, v in apart) / 1e6:.1f} ms apart, "
                "more than a step: they did not run the same step together, so launch skew "
                "cannot be measured (see the device imbalance finding)"
            )
        return skip("no step with work on two GPUs of one worker")
    if len(measured) < MIN_SKEW_STEPS:
        return skip(
            f"{len(measured)} step(s) with two GPUs of one worker at work together: too few to "
            f"judge (at least {MIN_SKEW_STEPS})"
        )
    by_worker = pd.DataFrame(measured, columns=["worker", "share"]).groupby("worker")["share"]
    value = float(by_worker.mean().max())
    private = inp.meta.lines["line"].astype(str).str.startswith("tf_gpu_private").any()
    return Verdict(
        severity_of(value, t.launch_skew),
        value=value,
        expression="(see analyzers/diagnostics/rules_gpu.py: per step, the latest device's start after the first device's, counted while it was idle, over the median step period; steps spread over more than a period left out)",
        evidence={
            "mean_skew_share_by_worker": by_worker.mean().round(4).to_dict(),
            "mean_start_spread_share": round(float(np.mean(raw)), 4),
            "steps_measured": len(measured),
            "steps_left_out_gpus_apart": len(apart),
            "gpu_private_threads": bool(private),
        },
        recommendation=(
            "The GPUs already have private launch threads (tf_gpu_private_*): reduce other host "
            "work competing for cores (tf.data threads, other processes), or run one process per GPU."
            if private
            else "Host threads contend when launching for several GPUs: TF_GPU_THREAD_MODE=gpu_private, "
            "fewer host threads for tf.data, or one process per GPU."
        ),
    )


def device_memory(inp: SessionAnalysis) -> pd.DataFrame:
    """Per worker and device allocator: its peak in use (``memory_report``, as the memory page
    and XProf show it) and its capacity: what the allocator itself states (bytes in use plus
    bytes available, at most; a TPU's runtime and TF's BFC allocators say it), else the
    device plane's ``memory_size``. Host allocators are left out."""
    mem, report = inp.memory, inp.memory_report
    cols = ["worker", "allocator", "peak_bytes", "capacity_bytes", "capacity_from"]
    if mem.empty or report.empty:
        return pd.DataFrame(columns=cols)
    cap = (
        (mem["bytes_in_use"].astype(float) + mem["bytes_available"].astype(float))
        .groupby([mem["worker"], mem["allocator"]])
        .max()
    )
    out = report[["worker", "allocator", "peak_bytes"]].copy()
    out["capacity_bytes"] = cap.reindex(
        pd.MultiIndex.from_frame(out[["worker", "allocator"]])
    ).to_numpy()
    out["capacity_from"] = np.where(out["capacity_bytes"].notna(), "allocator", "device plane")
    size = _plane_stat(inp, "memory_size").dropna()
    if len(size):
        by_worker = size.groupby(size.index.str.split(" ").str[0]).max()
        plane = out["worker"].map(by_worker).astype(float)
        out["capacity_bytes"] = out["capacity_bytes"].fillna(plane)
    device = ~out["allocator"].astype(str).str.contains("host", case=False)
    return out[device & out["capacity_bytes"].gt(0)][cols].reset_index(drop=True)


@rule("memory", "Device memory close to capacity", needs=(DEVICE,), levels="memory_use")
def memory(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    dm = device_memory(inp)
    if dm.empty:
        return skip(
            "no device allocator events in the trace (the runtime records them when memory "
            "profiling is on), so the peak is unknown"
        )
    share = dm["peak_bytes"].astype(float) / dm["capacity_bytes"].astype(float)
    worst = dm.loc[share.idxmax()]
    value = float(share.max())
    return Verdict(
        severity_of(value, t.memory_use),
        value=value,
        expression="float((lambda d: (d.peak_bytes / d.capacity_bytes).max())(__import__('podscope.analyzers.diagnostics.rules_gpu', fromlist=['x']).device_memory(prepare(frames))))",
        evidence={
            "peak_bytes": {f"{r.worker} {r.allocator}": int(r.peak_bytes) for r in dm.itertuples()},
            "capacity_bytes": int(worst["capacity_bytes"]),
            "capacity_from": str(worst["capacity_from"]),
        },
        recommendation="Near the limit, TF fragments and may OOM: smaller batch, mixed precision, gradient "
        "checkpointing; see the peak breakdown on the Ops page.",
        page="/ops",
    )


#: PyTorch's matmuls and convolutions, by their kernels' names: GEMMs (cuBLAS/CUTLASS
#: ``…gemm…`` — not fbgemm's own embedding and quantization kernels —, ROCm's Tensile
#: ``Cijk_…``) and cuDNN's convolutions. (The CPU op that launched a kernel does not say: an
#: ``aten::addmm`` launches its bias copy too.)
_MATMUL_KERNEL = r"(?i)(?<!fb)gemm|Cijk_|conv(?!ert)|winograd|fprop|dgrad|wgrad"
#: 16-bit inputs, by the kernel's name: cuBLAS's h884/h1688/h16816 and hgemm, bf16/f16 in
#: CUTLASS's and cuDNN's names, c10::Half/c10::BFloat16 templates, Tensile's H/B data types.
_HALF_KERNEL = (
    r"(?i)h884|h1688|h16816|hgemm|hmma|bf16|fp16|f16_|_f16|half|bfloat16|"
    r"(?-i:Cijk_\w*?_(?:HB|BB|HH|HS|BS|HHS|BBS|BSS|HSS)_)"
)


@rule(
    "torch_matmul_precision",
    "Matmuls in 32-bit floats (no AMP/bf16)",
    needs=(DEVICE,),
    levels="half_precision_share",
)
def torch_matmul_precision(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The share of the GPUs' matmul and convolution kernel time (``_MATMUL_KERNEL``) in
    16-bit inputs, by the kernels' names; a finding when below ``half_precision_share`` and the matmuls are at least
    a tenth of the kernels' time (else precision is not what the step waits for)."""
    k = inp.kernels
    if k.empty:
        return skip(
            "no GPU kernel with its launch dimensions in the trace (the kernel table, which "
            "this check reads, lists those; this trace's kernels have no grid and block)"
        )
    mm = k[k["kernel"].astype(str).str.contains(_MATMUL_KERNEL)]
    if mm.empty:
        return skip("no matmul or convolution kernels on the GPUs")
    half = mm["kernel"].astype(str).str.contains(_HALF_KERNEL)
    total = float(mm["self_ps"].sum())
    value = float(mm.loc[half, "self_ps"].sum()) / total
    weight = total / float(k["self_ps"].sum())
    off = value < t.half_precision_share and weight >= 0.1
    slowest = mm[~half].nlargest(5, "self_ps")
    return Verdict(
        Severity.MODERATE if off else Severity.NONE,
        title=None if off else f"Matmuls in 16-bit: {value:.0%} of their kernel time",
        value=value,
        expression="(lambda r, k: (lambda m: m[m.kernel.astype(str).str.contains(r._HALF_KERNEL)].self_ps.sum() / m.self_ps.sum())(k[k.kernel.astype(str).str.contains(r._MATMUL_KERNEL)]))(__import__('podscope.analyzers.diagnostics.rules_gpu', fromlist=['x']), prepare(frames).kernels)",
        evidence={
            "matmul_share_of_kernel_time": round(weight, 4),
            "matmul_kernel_ms": round(total / 1e9, 3),
            "largest_32_bit_matmul_kernels_ms": dict(
                zip(
                    slowest["kernel"].astype(str).str.slice(0, 120),
                    (slowest["self_ps"] / 1e9).round(3),
                    strict=True,
                )
            ),
        },
        recommendation="Run the forward pass and the loss under torch.autocast(device_type='cuda', "
        "dtype=torch.bfloat16) (Ampere and newer; float16 with torch.amp.GradScaler on older "
        "GPUs): matmuls and convolutions then take 16-bit inputs on the Tensor Cores, at half "
        "the memory traffic; where float32 must stay, torch.backends.cuda.matmul.allow_tf32 = "
        "True (or torch.set_float32_matmul_precision('high')) lets Ampere use TF32.",
        at_stake_ns=0.5 * total / 1000 / max(1, inp.capture_steps["step"].nunique())
        if off
        else 0.0,
        page="/ops?by=kernel",
    )


@rule("host_sync", "Host syncs idle the GPU", needs=(DEVICE, STEPS), levels="host_sync")
def host_sync(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The GPUs' idle time right after the host waited for them (``rule_inputs.host_syncs``:
    ``.item()``, a synchronize, a synchronous copy; the GPU is empty when it returns and idles
    until the host enqueues more), for the syncs inside the steps, as a share of step time."""
    syncs = inp.host_syncs
    steps = inp.aligned
    if steps.empty:
        return skip("no steps")
    inside = np.zeros(len(syncs), dtype=bool)
    for worker, st in steps.groupby(steps["worker"].astype(str)):
        mine = (syncs["worker"].astype(str) == worker).to_numpy()
        s = syncs.loc[mine, "start_ns"].to_numpy(np.int64)
        lo, hi = (
            np.sort(st["start_ns"].to_numpy(np.int64)),
            np.sort(st["end_ns"].to_numpy(np.int64)),
        )
        k = np.searchsorted(lo, s, side="right") - 1
        inside[np.flatnonzero(mine)] = (k >= 0) & (s < hi[np.clip(k, 0, None)])
    mine = syncs[inside]
    total = float((steps["end_ns"] - steps["start_ns"]).sum())
    idle = float(mine["idle_after_ns"].sum())
    value = idle / total if total else 0.0
    n_steps = max(1, len(steps))
    by_name = mine.groupby("name")["idle_after_ns"].agg(["size", "sum"])
    return Verdict(
        severity_of(value, t.host_sync),
        value=value,
        expression="(lambda a: __import__('podscope.analyzers.diagnostics.rules_gpu', fromlist=['x']).host_sync(a, __import__('podscope.analyzers.diagnostics.base', fromlist=['x']).Thresholds()).value)(prepare(frames))",
        evidence={
            "syncs_per_step": round(len(mine) / n_steps, 2),
            "gpu_idle_after_ms_per_step": round(idle / n_steps / 1e6, 3),
            "host_wait_ms_per_step": round(float(mine["dur_ns"].sum()) / n_steps / 1e6, 3),
            "idle_after_ms_by_call": (by_name["sum"] / 1e6).round(3).to_dict(),
            "calls_by_name": by_name["size"].astype(int).to_dict(),
        },
        recommendation="The host waits for the GPU each step (.item(), .tolist(), .cpu() or "
        "printing a tensor, torch.cuda.synchronize(), a copy from unpinned memory) and the GPU "
        "then idles until the host has enqueued more: log losses and metrics every N steps "
        "(or accumulate them on the GPU), keep tensor values on the device, copy with "
        "pin_memory=True and .to(device, non_blocking=True), and leave synchronize() to "
        "timing code.",
        at_stake_ns=idle / n_steps,
        page="/timeline?q=Synchronize",
    )


#: A GPU is launch-bound when at least this share of its kernels run shorter than the call
#: that launched them (HTA's launch statistics): the host cannot launch faster than they end.
SHORT_LAUNCH_SHARE = 0.5


@rule(
    "launch_bound",
    "Launch-bound: small kernels wait for their launches",
    needs=(DEVICE,),
    levels="launch_bound",
)
def launch_bound(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The share of a rank's GPU span with nothing running while it waits for the host (HTA's
    temporal idle share × host wait's share of the streams' idle time), where most of its
    kernels (``SHORT_LAUNCH_SHARE``) run shorter than their launch calls: the worst rank."""
    s = inp.launch_summary
    s = s[s["launches"] > 0]
    if s.empty:
        return skip(
            "no kernel launch paired with its GPU event (HTA's launch statistics read "
            "cudaLaunchKernel and its kin)"
        )
    s = s.assign(
        value=s["idle_share"] * s["host_wait_share"],
        short=s["short_launches"] / s["launches"],
    )
    top = s.loc[s["value"].idxmax()]
    value, short = float(top["value"]), float(top["short"])
    bound = short >= SHORT_LAUNCH_SHARE
    return Verdict(
        severity_of(value, t.launch_bound) if bound else Severity.NONE,
        value=value,
        expression="(lambda s: float((s.idle_share * s.host_wait_share)[s.launches > 0].max()))(prepare(frames).launch_summary)",
        evidence={
            "rank": str(top["worker"]),
            "gpu_idle_share": round(float(top["idle_share"]), 4),
            "host_wait_share_of_idle": round(float(top["host_wait_share"]), 4),
            "kernels_shorter_than_their_launch": f"{int(top['short_launches'])} of {int(top['launches'])}",
            "short_share": round(short, 3),
            "launch_bound_from_short_share": SHORT_LAUNCH_SHARE,
        },
        recommendation="The GPU runs kernels faster than the host launches them and waits for it "
        "most of the time: launch fewer, larger kernels — compile the model (torch.compile, "
        "mode='reduce-overhead' adds CUDA graphs), capture the step in a CUDA graph "
        "(torch.cuda.graphs / make_graphed_callables), use fused optimizers "
        "(torch.optim.AdamW(fused=True) or foreach=True), larger batches; `podscope gpu "
        "--view launches` lists each launch."
        if bound
        else "Most kernels run longer than their launches: the GPU is not waiting for launch "
        "overhead (a host-side wait has other causes: the host-sync and DataLoader checks).",
        at_stake_ns=value * inp.step_time_ns if bound else 0.0,
        page="/gpu?view=launches",
    )


@rule(
    "blocking_copies",
    "Host-to-device copies from pageable memory block the host",
    needs=(DEVICE,),
    levels="blocking_copies",
)
def blocking_copies(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The host's time in host-to-device copies from pageable memory (it returns only when the
    data is on the GPU), as a share of the rank's GPU span (``gpu_views.launch_summary``): the
    worst rank."""
    s = inp.launch_summary
    s = s[s["span_us"] > 0]
    if s.empty:
        return skip("no GPU activity HTA's views can time")
    share = s["pageable_copy_host_us"] / s["span_us"]
    top = s.loc[share.idxmax()]
    value = float(share.max())
    return Verdict(
        severity_of(value, t.blocking_copies),
        value=value,
        expression="(lambda s: float((s.pageable_copy_host_us / s.span_us)[s.span_us > 0].max()))(prepare(frames).launch_summary)",
        evidence={
            "rank": str(top["worker"]),
            "pageable_copies": int(top["pageable_copies"]),
            "host_ms_in_them": round(float(top["pageable_copy_host_us"]) / 1000, 3),
            "gpu_span_ms": round(float(top["span_us"]) / 1000, 3),
        },
        recommendation="Copies from pageable memory make the host wait until the data is on "
        "the GPU: load batches into pinned memory (DataLoader(pin_memory=True), or "
        "tensor.pin_memory()) and copy with .to(device, non_blocking=True), so the copy runs "
        "beside the host's next work.",
        at_stake_ns=value * inp.step_time_ns,
        page="/timeline?q=Memcpy",
    )
