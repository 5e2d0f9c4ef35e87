"""Host input pipeline: a tf.data-like producer/consumer queue per host.

Each host runs one pipeline that produces its share of every global batch
(``global_batch / hosts`` samples). Producing a batch costs

* read: ``samples x sample_bytes / effective read bandwidth``, where parallel
  reads (``interleave``) raise one stream's share of the host bandwidth
  (``single_stream_read_frac``) up to the whole of it;
* decode/augment: ``samples x decode_cpu_s_per_sample / min(num_parallel_calls,
  host_cpu_cores)`` (threads beyond the cores do not help);
* the single-threaded stages (shuffle, batch): ``samples x serial_cpu_s_per_sample``.

With one map thread and one read stream, read and decode run on the same thread
(their times add); otherwise the stages are pipelined and the slowest sets the
rate (tf.data guide, "Better performance with the tf.data API": parallelising
extraction and transformation). After the first epoch a ``cache`` replaces read
and decode by a copy from host memory. A shuffle buffer must fill before the
first batch. Per-(step, host) noise (``jitter_frac``, lognormal) models bursty
production (file boundaries, GC); a deeper ``prefetch`` absorbs it.

The queue (loop over steps, vectorised over hosts): the producer starts batch
``i`` when it has finished batch ``i-1`` and the prefetch buffer has a free slot
(batch ``i-K`` taken); with ``prefetch = 0`` it starts only when the step asks.
The consumer asks at each step start; it waits ``max(0, ready - ask)``, an
``input_wait`` event on every chip of that host. Synchronous training then makes
every chip wait for the slowest host at the first barrier (``sync_wait``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PlainValidator

__all__ = [
    "InputSection",
    "InputPlan",
    "AUTOTUNE_PREFETCH_BATCHES",
    "batch_production_s",
    "run_input_queue",
    "step_lengths_s",
]

#: Prefetch depth taken for ``prefetch = "autotune"``. tf.data's autotuner grows the
#: buffer while it helps; a fixed depth of this size absorbs our jitter (model choice).
AUTOTUNE_PREFETCH_BATCHES = 8

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]


def _int_or_autotune(minimum: int) -> Any:
    """An integer >= minimum or the string "autotune", reported as one error on its own key."""

    def check(value: Any) -> int | Literal["autotune"]:
        if value == "autotune":
            return "autotune"
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f'expected an integer >= {minimum} or "autotune", got {value!r}')
        return value

    return PlainValidator(check)


IntOrAutotune = Annotated[Any, _int_or_autotune(1)]
IntOrAutotuneFromZero = Annotated[Any, _int_or_autotune(0)]


class InputSection(BaseModel):
    """``[input]``: one host's tf.data pipeline. Absent: input is never the bottleneck."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as engine/scenario/sections.py Section

    num_parallel_calls: IntOrAutotune = "autotune"
    prefetch: IntOrAutotuneFromZero = "autotune"
    interleave: IntOrAutotune = "autotune"  # parallel file reads (cycle_length)
    cache: bool = False
    host_cpu_cores: PosInt = 8
    read_bytes_per_s_per_host: Annotated[float, Field(gt=0)] = 1e9
    single_stream_read_frac: Annotated[float, Field(gt=0, le=1)] = 1.0  # object storage: ~0.1
    decode_cpu_s_per_sample: Annotated[float, Field(ge=0)] = 0.0
    serial_cpu_s_per_sample: Annotated[float, Field(ge=0)] = 0.0
    host_memory_bytes_per_s: Annotated[float, Field(gt=0)] = 1e10  # cache reads
    sample_bytes: Annotated[float, Field(ge=0)] = 0.0
    dataset_samples: PosInt = 1_000_000
    shuffle_buffer: NonNegInt = 0
    jitter_frac: Annotated[float, Field(ge=0, le=2)] = 0.0

    @property
    def map_threads(self) -> int:
        n = self.host_cpu_cores if self.num_parallel_calls == "autotune" else self.num_parallel_calls
        return int(min(n, self.host_cpu_cores))

    @property
    def prefetch_batches(self) -> int:
        return AUTOTUNE_PREFETCH_BATCHES if self.prefetch == "autotune" else int(self.prefetch)

    @property
    def read_streams(self) -> int:
        if self.interleave == "autotune":  # enough streams to saturate the host's bandwidth
            return int(np.ceil(1.0 / self.single_stream_read_frac))
        return int(self.interleave)

    @property
    def effective_read_bytes_per_s(self) -> float:
        return self.read_bytes_per_s_per_host * min(1.0, self.read_streams * self.single_stream_read_frac)


@dataclass(frozen=True)
class InputPlan:
    """What the queue produced: per-(step, host) waits and per-step lengths, in seconds."""

    wait_s: np.ndarray  # (steps, hosts)
    step_s: np.ndarray  # (steps,) step length including input waits (before failures)
    produce_s: np.ndarray  # (steps, hosts) production time of each batch
    front_s: np.ndarray  # (steps,) time from step start to the first barrier (slowest chip)


def batch_production_s(section: InputSection, host_batch: int, cached: np.ndarray) -> np.ndarray:
    """Seconds one host needs to produce one batch, per step (before jitter).

    Parameters
    ----------
    host_batch
        Samples per host per step.
    cached
        (steps,) bool: the step's batch comes from the cache (epoch >= 1 with ``cache``).
    """
    n = float(host_batch)
    read_s = n * section.sample_bytes / section.effective_read_bytes_per_s
    decode_s = n * section.decode_cpu_s_per_sample / section.map_threads
    serial_s = n * section.serial_cpu_s_per_sample
    if section.map_threads == 1 and section.read_streams == 1:
        source_s = read_s + decode_s  # one thread reads then decodes
    else:
        source_s = max(read_s, decode_s)  # pipelined stages: the slowest sets the rate
    cached_s = n * section.sample_bytes / section.host_memory_bytes_per_s
    return np.where(cached, max(cached_s, serial_s), max(source_s, serial_s))


def _cached_steps(section: InputSection, steps: int, global_batch: int) -> np.ndarray:
    epoch = (np.arange(steps, dtype=np.int64) * global_batch) // section.dataset_samples
    return (epoch >= 1) & section.cache


def step_lengths_s(pre_s: np.ndarray, post_s: np.ndarray) -> np.ndarray:
    """Step lengths without input waits: slowest chip before the first barrier, plus the rest."""
    return np.asarray(pre_s).max(axis=1) + post_s


def run_input_queue(
    section: InputSection,
    *,
    global_batch: int,
    hosts: int,
    host_of_chip: np.ndarray,
    pre_s: np.ndarray,
    post_s: np.ndarray,
    rng: np.random.Generator,
) -> InputPlan:
    """Run every host's producer/consumer queue over the steps.

    Parameters
    ----------
    host_of_chip
        (chips,) host id of each chip.
    pre_s
        (steps, chips) seconds each chip works after its input wait and before the
        first barrier (recompile + forward/backward).
    post_s
        (steps,) seconds from the first barrier to the step end (same on every chip).
    rng
        The mechanism's own random stream (jitter).

    Returns
    -------
    InputPlan
        Waits per (step, host) and the resulting step lengths.
    """
    steps = pre_s.shape[0]
    host_batch = global_batch // hosts
    produce = batch_production_s(section, host_batch, _cached_steps(section, steps, global_batch))
    produce = np.broadcast_to(produce[:, None], (steps, hosts)).astype(np.float64)
    if section.jitter_frac > 0:
        produce = produce * np.exp(section.jitter_frac * rng.standard_normal((steps, hosts)))
    # The shuffle buffer fills before the first batch can leave it.
    first_rate_s = float(produce[0].mean()) / max(host_batch, 1)
    finished = np.full(hosts, section.shuffle_buffer * first_rate_s)  # producer's previous finish
    k = section.prefetch_batches
    taken = np.zeros((steps, hosts))
    wait = np.zeros((steps, hosts))
    step_s = np.zeros(steps)
    front = np.zeros(steps)
    now = 0.0
    for i in range(steps):
        if k == 0:
            start = np.maximum(finished, now)  # no prefetch: production starts on demand
        elif i >= k:
            start = np.maximum(finished, taken[i - k])  # a buffer slot frees when batch i-k is taken
        else:
            start = finished
        finished = start + produce[i]
        wait[i] = np.maximum(0.0, finished - now)
        taken[i] = now + wait[i]
        front[i] = (wait[i][host_of_chip] + pre_s[i]).max()
        step_s[i] = front[i] + post_s[i]
        now += step_s[i]
    return InputPlan(wait_s=wait, step_s=step_s, produce_s=produce, front_s=front)
