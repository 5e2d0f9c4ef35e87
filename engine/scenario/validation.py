"""The checks of a scenario that need more than one field: chip, slice shape, mesh, sizes, model file, faults.

Every problem is collected with its dotted key path, so a file with three mistakes reports all three.
"""

from __future__ import annotations

import math

from ..convergence.section import convergence_problems
from ..errors import TopologyError
from ..hlo.module_file import module_problems
from ..pod.catalog import load_catalog
from ..pod.mesh import MESH_AXES, resolve_mesh
from ..pod.topology import fault_problems, is_supported_shape, supported_shapes, wraparound_for
from .names import name_problem
from .scenario import Scenario
from .sections import parse_topology

__all__ = ["MAX_CHIP_STEPS", "MAX_SUMMARY_CHIP_STEPS", "MAX_POD_CHIPS", "SUMMARY_BYTES_PER_CHIP_STEP", "semantic_problems"]

#: upper bound on chips x steps in one run: the trace holds ~5 events per chip-step, so this
#: caps a run at ~80 M events (~2 GB in memory, ~1 GB in DuckDB), far past the 4,096-chip,
#: 100-step runs the engine is built for; longer studies simulate fewer steps.
MAX_CHIP_STEPS = 16 * 2**20
#: the same bound for ``sim.trace = "summary"`` (and the aggregates of ``"sampled"``), which keeps
#: per-step, per-chip arrays but no events: measured ~40 bytes per chip-step at peak
#: (resnet50-v3-32, 20k vs 80k steps; 2.24 GiB for 50,944 chips x 1,000 steps), so this caps such
#: a run near 3 GiB and admits the largest reported job (50,944 chips, MAX_POD_CHIPS) for 1,000 steps
MAX_SUMMARY_CHIP_STEPS = 64 * 2**20
SUMMARY_BYTES_PER_CHIP_STEP = 48  # the measured ~40, rounded up: the estimate quoted in errors
#: most chips in one run: above the largest training job reported, 50,944 TPU v5e chips
#: (Google Cloud blog, "Google Cloud demonstrates the world's largest distributed training job
#: for large language models across 50000+ TPU v5e chips", Nov 2023)
MAX_POD_CHIPS = 65_536

def _sample_problems(s: Scenario, chips: int) -> list[tuple[str, str]]:
    """``sim.sample_chips``: only with ``trace = "sampled"``, and at most the pod's chips."""
    given = s.sim.sample_chips
    if given is None:
        return []
    if s.sim.trace != "sampled":
        return [("sim.sample_chips", f"{given} sampled chips, but sim.trace = {s.sim.trace!r} stores "
                 f"{'every chip' if s.sim.trace == 'full' else 'no chip'}'s events; valid: set sim.trace = \"sampled\", "
                 "or remove sim.sample_chips")]  # fmt: skip
    if given > chips:
        return [("sim.sample_chips", f"{given:,} sampled chips, but the pod has {chips:,}; valid: 1 to {chips:,}")]
    return []


def _example_topology(axes: int) -> str:
    return "x".join(["4"] * axes)


def semantic_problems(s: Scenario) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if (bad_name := name_problem(s.name)) is not None:
        problems.append(("name", bad_name))
    catalog = load_catalog()
    chip = catalog.get(s.pod.chip)
    if chip is None:
        problems.append(("pod.chip", f"unknown chip {s.pod.chip!r}; valid: {', '.join(sorted(catalog))}"))
    try:
        shape = parse_topology(s.pod.topology)
    except ValueError as e:
        problems.append(("pod.topology", str(e)))
        return problems
    n = math.prod(shape)
    if chip is not None:
        if len(shape) > chip.torus_dims:
            problems.append(
                ("pod.topology", f"{s.pod.topology!r} has {len(shape)} axes but {chip.key} has a {chip.torus_dims}D torus; "
                 f"give at most {chip.torus_dims} axes, e.g. {_example_topology(chip.torus_dims)!r}")
            )
        if n > chip.max_slice_chips:
            problems.append(
                ("pod.topology", f"{s.pod.topology!r} is {n} chips; a {chip.key} slice holds at most {chip.max_slice_chips} "
                 "(use more pod.slices for larger jobs)")
            )
    p = s.parallelism
    given = s.mesh_sizes_given
    named = [a for a in MESH_AXES if a in ("data", "fsdp", "tensor") or given.get(a, 1) > 1]
    model_named = [a for a in named if a != "data"]
    mesh = math.prod(given[a] for a in named)
    if p.data is None:
        if n % s.model_axes_product:
            problems.append(
                ("parallelism", f"{' x '.join(model_named)} = {s.model_axes_product} does not divide the {n} chips per slice; "
                 f"valid: a divisor of {n}")
            )
    elif mesh != n:
        problems.append(
            ("parallelism", f"{' x '.join(named)} = {'x'.join(str(given[a]) for a in named)} = {mesh}, but the slice "
             f"{s.pod.topology!r} has {n} chips; valid: axes whose product is {n} (or leave data unset)")
        )
    chips = n * s.pod.slices
    chip_steps = chips * s.training.steps
    if chips > MAX_POD_CHIPS:
        problems.append(
            ("pod.slices", f"{s.pod.slices:,} slices of {n} chips = {chips:,} chips; valid: at most {MAX_POD_CHIPS:,} chips "
             f"in one run, e.g. pod.slices = {max(1, MAX_POD_CHIPS // max(n, 1)):,}")
        )
    elif chip_steps > MAX_CHIP_STEPS and s.sim.trace == "full":
        problems.append(
            ("training.steps", f"{chips} chips x {s.training.steps} steps = {chip_steps:,} chip-steps; "
             f"valid: at most {MAX_CHIP_STEPS:,} per run with a full trace (simulate fewer steps, or set "
             "sim.trace = \"sampled\" or \"summary\")")
        )
    elif s.sim.trace == "sampled" and (sampled := min(s.sampled_chip_count, chips)) * s.training.steps > MAX_CHIP_STEPS:
        problems.append(
            ("sim.sample_chips", f"{sampled:,} sampled chips x {s.training.steps:,} steps = {sampled * s.training.steps:,} "
             f"chip-steps of events; valid: at most {MAX_CHIP_STEPS:,}, i.e. at most "
             f"{max(1, MAX_CHIP_STEPS // s.training.steps):,} sampled chips over {s.training.steps:,} steps")
        )
    elif chip_steps > MAX_SUMMARY_CHIP_STEPS:
        need_gib = chip_steps * SUMMARY_BYTES_PER_CHIP_STEP / 2**30
        problems.append(
            ("training.steps", f"{chips} chips x {s.training.steps:,} steps = {chip_steps:,} chip-steps (about {need_gib:,.1f} GiB "
             f"to simulate); valid: at most {MAX_SUMMARY_CHIP_STEPS:,} chip-steps per run even with sim.trace = \"summary\" "
             "or \"sampled\", "
             f"i.e. at most {max(1, MAX_SUMMARY_CHIP_STEPS // chips):,} steps on {chips} chips")
        )
    problems += _sample_problems(s, chips)
    if not problems and chip is not None:
        try:
            resolve_mesh(shape, wraparound_for(chip, shape), s.mesh_sizes, p.mapping)
        except TopologyError as e:
            problems.append(("parallelism.mapping", str(e)))
    heads = getattr(s.model, "heads", None)
    if heads is not None and p.tensor > 1 and heads % p.tensor:
        # Tensor parallelism gives each chip whole attention heads (Megatron-LM, Shoeybi et al. 2019).
        divisors = [t for t in range(1, heads + 1) if heads % t == 0 and n % t == 0]
        problems.append(
            ("parallelism.tensor", f"{p.tensor} does not divide the model's {heads} attention heads; valid: a divisor of "
             f"{heads} that also divides the slice's {n} chips: {', '.join(map(str, divisors))}")
        )
    if chip is not None and s.training.precision == "fp8" and not chip.has_fp8:
        with_fp8 = sorted(k for k, c in catalog.items() if c.has_fp8)
        problems.append(("training.precision", f"fp8 needs a chip with an fp8 matmul rate; {chip.key} has none; valid: "
                         f"bf16, int8 or fp32 on {chip.key}, or fp8 on {', '.join(with_fp8) or 'no catalog chip'}"))  # fmt: skip
    if s.training.precision == "fp32" and s.training.weight_dtype == "bf16":
        problems.append(("training.weight_dtype", "bf16 weights under fp32 compute would be widened for every matmul; "
                         "valid: fp32 with precision fp32, or bf16 with precision bf16, int8 or fp8"))  # fmt: skip
    experts = getattr(s.model, "experts", 0)
    if p.expert > 1 and not experts:
        problems.append(("parallelism.expert", f"{p.expert} expert-parallel chips, but the model has no experts; valid: 1, "
                         "or set model.experts (a transformer with mixture-of-experts layers)"))
    elif p.expert > 1 and experts % p.expert:
        divisors = [e for e in range(1, experts + 1) if experts % e == 0 and n % e == 0]
        problems.append(("parallelism.expert", f"{p.expert} does not divide the model's {experts} experts; valid: a divisor "
                         f"of {experts} that also divides the slice's {n} chips: {', '.join(map(str, divisors))}"))
    if s.training.remat.startswith("save_"):
        why = None
        if s.model.kind != "transformer":
            why = f"the {s.model.kind} model has no named projections"
        elif experts:
            why = "a mixture-of-experts layer names its experts' projections too, which Podscope does not count"
        elif p.pipeline > 1:
            why = "MaxText's pipeline loop saves what its iterations' policy keeps, which Podscope does not count"
        if why:
            problems.append(("training.remat", f"{s.training.remat!r} keeps named projections of a dense transformer's "
                             f"layers; {why}; valid here: none, full, selective or minimal"))  # fmt: skip
    layers = getattr(s.model, "layers", None)
    if p.pipeline > 1:
        v = p.virtual_stages
        if layers is None:
            problems.append(("parallelism.pipeline", f"pipeline stages split a transformer's layers; the {s.model.kind} "
                             "model has none to split; valid: 1"))  # fmt: skip
        elif layers % (p.pipeline * v):
            valid = [q for q in range(1, layers + 1) if layers % (q * v) == 0]
            problems.append(("parallelism.pipeline", f"{p.pipeline} stages x {v} virtual stages do not divide the "
                             f"model's {layers} layers; valid: {', '.join(map(str, valid))}"))  # fmt: skip
    seq = getattr(s.model, "seq_len", None)
    if p.context > 1 and seq is None:
        problems.append(("parallelism.context", f"context parallelism splits a transformer's sequence; the {s.model.kind} "
                         "model has none to split; valid: 1"))  # fmt: skip
    elif p.context > 1 and seq % p.context:
        valid = [c for c in range(1, min(seq, n) + 1) if seq % c == 0 and n % c == 0]
        problems.append(("parallelism.context", f"{p.context} does not divide the model's seq_len of {seq}; valid: a divisor "
                         f"of {seq} that also divides the slice's {n} chips: {', '.join(map(str, valid))}"))  # fmt: skip
    bn_group = getattr(s.model, "batch_norm_group", 1)
    if bn_group > 1 and s.data_parallel % bn_group:
        valid = [g for g in range(1, s.data_parallel + 1) if s.data_parallel % g == 0]
        problems.append(("model.batch_norm_group", f"{bn_group} chips per batch-norm group do not divide the slice's "
                         f"{s.data_parallel} data-parallel replicas; valid: {', '.join(map(str, valid[:12]))}"
                         + (", ..." if len(valid) > 12 else "")))  # fmt: skip
    if p.virtual_stages > 1 and p.pipeline_schedule != "interleaved":
        problems.append(("parallelism.virtual_stages", f"{p.virtual_stages} virtual stages need pipeline_schedule = "
                         f"\"interleaved\" (got {p.pipeline_schedule!r}); valid: 1, or the interleaved schedule"))  # fmt: skip
    if p.strategy == "parameter_server" and (p.fsdp > 1 or p.tensor > 1 or p.pipeline > 1 or p.context > 1):
        problems.append(
            ("parallelism.strategy", "parameter_server keeps the dense part data parallel: fsdp, tensor, pipeline and "
             "context must be 1")
        )
    if not problems and s.model.kind == "hlo":
        problems += module_problems(s.model.path, n * s.pod.slices, s.pod.chip, shape, s.pod.slices)
    elif not problems:
        shards = s.batch_shards
        mb = s.training.microbatches
        if s.training.global_batch % shards == 0 and (s.training.global_batch // shards) % mb:
            b = s.training.global_batch // shards
            problems.append(("training.microbatches", f"{mb} microbatches do not divide the per-chip batch of {b}; "
                             f"valid: a divisor of {b}: {', '.join(str(d) for d in range(1, b + 1) if b % d == 0)}"))  # fmt: skip
        if s.training.global_batch % shards:
            problems.append(
                ("training.global_batch", f"{s.training.global_batch} is not divisible by the {shards} batch shards "
                 f"({'data x fsdp x expert' if p.expert > 1 else 'data x fsdp'} x slices); "
                 f"valid: a multiple of {shards}, e.g. {max(1, round(s.training.global_batch / shards)) * shards}")
            )
    problems += convergence_problems(s.convergence, s.model.kind, getattr(s.model, "seq_len", None))
    # Checked last so a shape problem does not hide the batch or mesh problems above.
    if chip is not None and len(shape) <= chip.torus_dims and n <= chip.max_slice_chips:
        if not is_supported_shape(chip, shape):
            offered = ", ".join(supported_shapes(chip))
            problems.append(("pod.topology", f"{chip.key} does not offer a {s.pod.topology!r} slice; supported: {offered}"))
        else:
            ic = s.interconnect
            wrap = wraparound_for(chip, shape)
            problems += fault_problems(shape, wrap, s.pod.slices, ic.degraded_links, ic.failed_links)
    return problems
