"""How traces from the JAX and TensorFlow profilers (and XProf's converter) say what happened.

Read from real files (tests/fixtures/traces, made by scripts/fixtures/make_profiler_traces.py):

* **Steps**: ``jax.profiler.StepTraceAnnotation`` (and TF's ``tf.profiler.experimental.Trace``
  with ``step_num``) writes an event with ``args.step_num``: that is step ``step_num``.
  Keras has no annotation of its own; its compiled train function
  (``multi_step_on_iterator`` in Keras 3, ``train_function`` before) runs once per step on
  the Python thread, so its k-th call is step k.
* **Devices**: on TPU and GPU each device is a process (``/device:TPU:0``). On CPU the
  virtual devices share the host process; every XLA op event names its device in
  ``args.device_ordinal`` (-1 when XLA runs on the host itself, as under TensorFlow), so
  those ordinals are the chips.
* **Kinds**: an event with ``args.hlo_op`` is an XLA op: a collective when its name is one
  (``all-reduce.6``), else compute. The CPU collectives' rendezvous (``Rendezvous``,
  ``Wait for rendezvous callback``, ``Wait: pending_threads=...``) is collective time.
  ``tf.data``: the consumer's ``IteratorGetNext`` is the step waiting for input; the
  ``Iterator::*`` events on the pipeline's own threads (``tf_data_iterator_resource``,
  ``tf_data_private_threadpool``) are the pipeline working in the background, which costs
  the step nothing unless the consumer waits, so they are not input wait.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["EventHints", "event_hints", "xla_kind", "keras_step_markers", "KERAS_STEP_FUNCTIONS"]

#: Keras' compiled train-step functions, one call per step (Keras 3, then tf.keras 2)
KERAS_STEP_FUNCTIONS = re.compile(r"^(multi_step_on_iterator|one_step_on_iterator|train_function)$")
_COLLECTIVE_OP = re.compile(r"all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|collective[-_]?permute", re.I)
_RENDEZVOUS = re.compile(r"^(Rendezvous|Wait for rendezvous|Wait: pending_threads)")
_INPUT_WORKER_THREAD = re.compile(r"^tf_data_(iterator_resource|private_threadpool)", re.I)
_CONSUMER_WAIT = re.compile(r"^IteratorGetNext", re.I)


class EventHints:
    """Per event, what its ``args`` say: step number, device ordinal, whether it is an XLA op (-1 / False: absent)."""

    __slots__ = ("step_num", "device", "hlo_op")

    def __init__(self) -> None:
        self.step_num: list[int] = []
        self.device: list[int] = []
        self.hlo_op: list[bool] = []

    def add(self, args: object) -> None:
        step, device, hlo = event_hints(args)
        self.step_num.append(step)
        self.device.append(device)
        self.hlo_op.append(hlo)


def _int(value: object) -> int:
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return -1


def event_hints(args: object) -> tuple[int, int, bool]:
    """``(step_num, device_ordinal, is_xla_op)`` of one event's ``args`` (-1 / False when absent or malformed)."""
    if not isinstance(args, Mapping):
        return -1, -1, False
    step = _int(args.get("step_num")) if "step_num" in args else -1
    device = _int(args.get("device_ordinal")) if "device_ordinal" in args else -1
    return max(step, -1), max(device, -1), bool(args.get("hlo_op"))


def xla_kind(name: str, thread: str, hlo_op: bool) -> str | None:
    """The kind the profiler rules give an event, or None to leave it to the generic rules."""
    if hlo_op:
        return "collective" if _COLLECTIVE_OP.search(name) else "compute"
    if _RENDEZVOUS.match(name):
        return "collective"
    if _CONSUMER_WAIT.match(name):
        return "input_wait"
    if _INPUT_WORKER_THREAD.match(thread):
        return "other"
    return None


def keras_step_markers(names: Sequence[str], threads: Sequence[str], ts_us: Sequence[float]) -> np.ndarray:
    """Step number of each Keras train-function call on the Python thread (by start time), -1 elsewhere."""
    out = np.full(len(names), -1, dtype=np.int64)
    calls = [i for i, (n, t) in enumerate(zip(names, threads)) if t == "python" and KERAS_STEP_FUNCTIONS.match(n)]
    for k, i in enumerate(sorted(calls, key=lambda i: ts_us[i])):
        out[i] = k
    return out
