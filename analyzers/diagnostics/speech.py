"""Findings in the capture's own terms: which rules apply to which framework and device, why
not where they do not, and the words for devices and advice.

A rule about one framework's or vendor's feature (TensorFlow's eager ops, tf.data, NVIDIA's
Tensor Cores and TF32) does not apply to a capture of another: such a finding is not
applicable with a reason that speaks of what the capture is (``SCOPES``). The words of the rest
follow the capture: a TPU's findings speak of TPUs, a JAX capture's advice is JAX's
(``base.JAX_ADVICE``), and a capture without accelerators speaks of none.

    >>> audience(analysis)  # "tensorflow", "jax", "tpu" (JAX on TPUs), "android" or "pytorch"
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import Any

from podscope.analyzers.attribution import BEFORE_CALL
from podscope.analyzers.session import SessionAnalysis

#: Each analysis's audience, asked by every rule: taken once (its plane test was 8 ms a rule
#: on a pod's thousands of device planes).
_AUDIENCES: weakref.WeakKeyDictionary[SessionAnalysis, str] = weakref.WeakKeyDictionary()


def audience(a: SessionAnalysis) -> str:
    """What wrote the capture, as the findings address it: ``android``, ``pytorch``, ``tpu``
    (a TPU capture of XLA programs), ``jax`` (XLA programs without TensorFlow ops), else
    ``tensorflow``."""
    kind = _AUDIENCES.get(a)
    if kind is None:
        kind = _AUDIENCES[a] = _audience(a)
    return kind


def _audience(a: SessionAnalysis) -> str:
    kind = a.trace_kind
    if kind in ("android", "pytorch"):
        return kind
    tf_ops = bool(a.worker_events["host_tf_ops"].sum())
    if a.meta.planes["plane"].astype(str).str.startswith("/device:TPU").any():
        return "tensorflow" if tf_ops else "tpu"
    xla = kind == "jax" or bool((a.methods["method"] == "xla_program").any())
    return "jax" if xla else "tensorflow"


def _vendors(a: SessionAnalysis) -> set[str]:
    s = a.meta.plane_stats
    return {str(v).lower() for v in s.loc[s["key"] == "device_vendor", "str_value"].dropna()}


_INPUT_PIPELINE = {
    "jax": "a TensorFlow input-pipeline check: JAX feeds its programs from Python between "
    "executions (the device idle check measures what the devices wait for it)",
    "tpu": "a TensorFlow input-pipeline check: this TPU capture runs JAX programs fed from "
    "Python (the device idle check measures what the devices wait for it)",
    "android": "an Android trace has no training input pipeline",
}
_NO_TF_DATA = {
    "jax": "no tf.data input pipeline: JAX feeds its programs from Python between executions "
    "(the device-idle finding measures what the devices wait for it)",
    "pytorch": "no tf.data input pipeline: a PyTorch rank's DataLoader shows in its step "
    "breakdown (podscope steps) and the input-bound finding",
    "android": "an Android trace has no training input pipeline",
    "tensorflow": "no tf.data iterator events: TensorFlow records them at host_tracer_level "
    "≥ 2 (these workers were traced with less, or with the Python tracer only)",
}


def no_input_pipeline(a: SessionAnalysis) -> str:
    """Why a capture shows no tf.data iterators, in its framework's terms."""
    kind = audience(a)
    return _NO_TF_DATA["jax" if kind == "tpu" else kind]


_TF_OPS = {
    "jax": "a TensorFlow op check: JAX compiles whole programs with XLA, so no op runs alone",
    "tpu": "a TensorFlow op check: this TPU capture runs compiled XLA programs",
    "android": "an Android trace has no TensorFlow ops: see the TFLite page for its ops",
}


def _nvidia_only(a: SessionAnalysis, kind: str) -> str | None:
    """NVIDIA's matrix units and float32 modes: for NVIDIA GPUs (or GPUs of no stated vendor)."""
    if kind == "tpu":
        return "a check of another vendor's matrix units: this TPU's take bfloat16, which the mixed-precision check judges"
    if kind == "android":
        return "an Android trace has no accelerator kernels to judge"
    if "amd" in _vendors(a):
        return "a check of NVIDIA's matrix units: these are AMD GPUs, whose matrix cores the mixed-precision check judges"
    return None


def _only(kinds: set[str], reasons: dict[str, str]) -> Callable[[SessionAnalysis, str], str | None]:
    """Applies to ``kinds`` only; elsewhere the reason for that kind."""
    return lambda a, kind: (
        None if kind in kinds else reasons.get(kind, f"not a check for a {kind} capture")
    )


#: rule id → (analysis, audience) → None where the rule applies, else why not.
SCOPES: dict[str, Callable[[SessionAnalysis, str], str | None]] = {
    "tensor_cores": _nvidia_only,
    "tf32": _nvidia_only,
    "eager": _only({"tensorflow"}, _TF_OPS),
    "ops_on_host": _only({"tensorflow"}, _TF_OPS),
    "slow_iterator": _only({"tensorflow"}, _INPUT_PIPELINE),
    "no_prefetch": _only({"tensorflow"}, _INPUT_PIPELINE),
    "input_stage": _only({"tensorflow"}, _INPUT_PIPELINE),
    "ps_imbalance": _only(
        {"tensorflow"},
        {
            "jax": "a TensorFlow parameter-server check: this JAX job has no parameter servers",
            "tpu": "a TensorFlow parameter-server check: this TPU job has no parameter servers",
            "android": "an Android trace has no parameter servers",
        },
    ),
    "torch_matmul_precision": _only(
        {"pytorch"},
        {
            "tensorflow": "PyTorch's check; a TensorFlow capture's precision is the "
            "mixed-precision check's",
            "jax": "PyTorch's check; a JAX capture's precision is the mixed-precision check's",
            "tpu": "PyTorch's check; a TPU capture's precision is the mixed-precision check's",
            "android": "an Android trace has no training matmuls",
        },
    ),
    "host_sync": _only(
        {"pytorch"},
        {
            "tensorflow": "PyTorch's check for now: a TensorFlow capture's host waits are the "
            "output-bound and step-gap checks'",
            "jax": "PyTorch's check for now: a JAX capture's host waits are the device idle "
            "check's",
            "tpu": "PyTorch's check for now: a TPU capture's host waits are the device idle "
            "check's",
            "android": "an Android trace has no training steps that wait for a GPU",
        },
    ),
    "launch_bound": _only(
        {"pytorch"},
        {
            "tensorflow": "PyTorch's check for now (HTA's launch statistics): a TensorFlow "
            "capture's launch overhead is the kernel-launch check's",
            "jax": "PyTorch's check for now: a JAX capture's launch overhead is the device idle "
            "check's",
            "tpu": "PyTorch's check for now: a TPU runs whole programs, not launched kernels",
            "android": "an Android trace has no training kernels",
        },
    ),
    "blocking_copies": _only(
        {"pytorch"},
        {
            "tensorflow": "PyTorch's check for now: a TensorFlow capture's copies are the "
            "host-device copies check's",
            "jax": "PyTorch's check for now: a JAX capture's copies are the host-device copies "
            "check's",
            "tpu": "PyTorch's check for now: a TPU capture's copies are the host offload check's",
            "android": "an Android trace has no training copies",
        },
    ),
    "memory_leak": _only(
        {"tensorflow", "jax", "tpu"},
        {"android": "an Android trace has no allocator events of a training job"},
    ),
}

#: Words that name another framework's or vendor's feature, by audience: a finding of such a
#: capture never says them (tests check every finding of the shared samples).
FOREIGN_WORDS = {
    "jax": (
        "tf.data",
        "tf.function",
        "Keras",
        "keras",
        "TF_",
        "host_tracer_level",
        "Tensor Core",
        "TF32",
    ),
    "tpu": (
        "GPU",
        "Tensor Core",
        "TF32",
        "tf.data",
        "tf.function",
        "Keras",
        "keras",
        "TF_",
        "host_tracer_level",
    ),
    "android": (
        "GPU",
        "Tensor Core",
        "TF32",
        "tf.data",
        "tf.function",
        "Keras",
        "keras",
        "TF_",
        "host_tracer_level",
    ),
}
_DEVICE_WORDS = {
    "tpu": ((r"\bGPUs\b", "TPUs"), (r"\bGPU\b", "TPU")),
    "android": ((r"\bGPUs\b", "accelerators"), (r"\bGPU\b", "accelerator")),
}

#: What a training process is called: a PyTorch job's are ranks (the word alone: a worker's
#: name, ``worker-0`` or ``/job:worker``, stays as it is).
_ALONE = r"(?<![\w./:-]){}(?![\w/-]|[.:]\w)"
_PROCESS_WORDS = {
    "pytorch": tuple(
        (_ALONE.format(word), rank)
        for word, rank in (
            ("workers", "ranks"),
            ("Workers", "Ranks"),
            ("worker", "rank"),
            ("Worker", "Rank"),
        )
    )
}


#: Titles of rules named after one vendor's feature, where that vendor's words do not belong.
NEUTRAL_TITLES = {
    "tensor_cores": "Matrix units unused by eligible ops",
    "tf32": "Float32 matmuls at full precision",
    "eager": "Ops run one by one, uncompiled (eager execution)",
    "slow_iterator": "Each batch waits for a slow input pipeline",
}


#: The rules that judge PyTorch captures: checked on the engine's DDP runs (``make verify``'s
#: PyTorch matrix: a slow rank, a slow DataLoader, a slow all-reduce) and on the shared GPU
#: traces, their advice in PyTorch's terms (``base.PYTORCH_ADVICE``, ``PYTORCH_TITLES``).
PYTORCH_RULES = frozenset(
    {
        "straggler",
        "straggler_cause",
        "collective_wait",
        "slow_collective",
        "collectives",
        "input_bound",
        "cpu_only",
        "torch_matmul_precision",
        "host_sync",
        "launch_bound",
        "blocking_copies",
    }
)

#: Why the other rules do not judge a PyTorch capture yet: their thresholds were set on
#: TensorFlow and JAX runs and their advice names those frameworks' features; a PyTorch user
#: told to use tf.function or a LossScaleOptimizer is misled, so none speaks until it is
#: checked on PyTorch runs.
PYTORCH_NOT_YET = (
    "not yet checked on PyTorch captures (its advice is TensorFlow's and JAX's): the GPU "
    "(PyTorch) page and `podscope gpu` give Holistic Trace Analysis' numbers"
)

#: Titles in PyTorch's words, where a rule's own names another framework's feature.
PYTORCH_TITLES = {
    "input_bound": "DataLoader-bound: steps wait for the DataLoader",
    "collectives": "Time in communication (DDP's all-reduce, collectives)",
}


def scope_reason(a: SessionAnalysis, rule_id: str) -> str | None:
    """Why ``rule_id`` does not apply to this capture's framework or device, else None."""
    kind = audience(a)
    if kind == "pytorch":
        return None if rule_id in PYTORCH_RULES else PYTORCH_NOT_YET
    check = SCOPES.get(rule_id)
    return check(a, kind) if check else None


def in_its_terms(a: SessionAnalysis, finding: dict[str, Any]) -> dict[str, Any]:
    """The finding's texts with device words of the capture's devices (a TPU's findings speak
    of TPUs; a capture without accelerators, of accelerators)."""
    kind = audience(a)
    if kind in FOREIGN_WORDS and finding.get("rule_id") in NEUTRAL_TITLES:
        finding["title"] = NEUTRAL_TITLES[finding["rule_id"]]
    if kind == "pytorch" and finding.get("rule_id") in PYTORCH_TITLES:
        finding["title"] = PYTORCH_TITLES[finding["rule_id"]]
    words: tuple[tuple[str, str], ...] = (
        _DEVICE_WORDS["android"] if not a.has_device else _DEVICE_WORDS.get(kind, ())
    ) + _PROCESS_WORDS.get(kind, ())
    if not words:
        return finding
    for key in ("title", "reason", "recommendation"):
        text = finding.get(key)
        if isinstance(text, str):
            for pattern, word in words:
                text = re.sub(pattern, word, text)
            finding[key] = text
    return finding


#: A culprit's cause (``worker_causes``: a component of its lateness) in words, and what to do.
_CAUSES = {
    "late start": (
        "late start",
        "it starts its steps late: work between its steps (host load, callbacks, a slow input "
        "fetch before the step) — compare its timeline before the step with a victim's.",
    ),
    BEFORE_CALL: (
        BEFORE_CALL,
        "it calls its step function late: work in its step before the call (Keras "
        "on_train_batch_begin callbacks, checkpoints, summaries, logging, a loop's Python) — "
        "move that work off the step, run it every N steps, or on one worker asynchronously; "
        "its Timeline shows the step before the train function call.",
    ),
    "host_compute": (
        "host_compute",
        "its own ops take longer: compare its op table with the others' (Ops page).",
    ),
    "input": ("input", "it waits for its input: see its input pipeline below."),
    "device_compute": (
        "device_compute",
        "its device computes longer: compare its kernels / XLA ops with a victim's (Ops page, "
        "per device), and check that device for throttling or other jobs.",
    ),
    "device_idle": (
        "device_idle",
        "its device waits for its host between steps (Python, input or a blocking fetch before "
        "each call): look at its host threads before each step on the Timeline.",
    ),
}
#: The same in PyTorch's words (its categories: ``analyzers.torch_view``).
_TORCH_CAUSES = {
    "late start": (
        "late start",
        "it starts its steps late: work between its steps on that rank alone (logging, "
        "checkpoints, evaluation, a slow first batch) — compare its Timeline before the step "
        "with another rank's.",
    ),
    "host_compute": (
        "its CPU ops",
        "its own ops take longer: compare its op table with another rank's (Ops page) and look "
        "for other load on its host (its CPU threads: torch.get_num_threads()).",
    ),
    "all_others": (
        "Python between its ops",
        "time in its step that no op or DataLoader explains: Python on that rank (logging, "
        "metrics, data conversion) — look at its Timeline between the ops.",
    ),
    "input": (
        "its DataLoader",
        "it waits for its DataLoader: load in background processes (num_workers), with "
        "pin_memory=True and persistent_workers=True, and check that rank's storage and host "
        "load.",
    ),
    "device_compute": (
        "its GPU compute",
        "its GPU computes longer: compare its kernels with another rank's (Ops page, per GPU), "
        "and check that GPU's clocks and other processes on it (nvidia-smi).",
    ),
    "kernel_launch": (
        "its kernel launches",
        "its host launches kernels more slowly: look for other load on its CPU, and launch "
        "fewer kernels (torch.compile, CUDA graphs).",
    ),
}
_MIXED = "no single component explains it: compare its timeline with a victim's."


def cause_words(cause: str, torch: bool) -> tuple[str, str]:
    """A culprit's cause, named and advised in its framework's words."""
    said, advice = (_TORCH_CAUSES if torch else _CAUSES).get(cause, (cause, _MIXED))
    return said, advice
