"""The Scenario: every section of a scenario file assembled into one frozen, validated object."""

from __future__ import annotations

import math
from typing import Any

from ..convergence.section import ConvergenceSection, CostSection
from ..idle.compilation import CompileSection
from ..idle.failures import FailureSection
from ..idle.input_pipeline import InputSection
from ..idle.stragglers import StragglerSection
from ..pod.catalog import ChipSpec, load_catalog
from ..pod.mesh import MESH_AXES
from .model_sections import HLO_FIXED_TRAINING, HLO_UNSUPPORTED_SECTIONS, ModelSection
from .sections import (
    DEFAULT_SAMPLE_CHIPS,
    InterconnectSection,
    ParallelismSection,
    PodSection,
    Section,
    SimSection,
    TrainingSection,
    parse_topology,
)

__all__ = ["Scenario"]

class Scenario(Section):
    """A validated scenario. Build with :func:`load_scenario` or :func:`scenario_from_dict`."""

    name: str
    pod: PodSection
    model: ModelSection
    training: TrainingSection
    parallelism: ParallelismSection = ParallelismSection()
    sim: SimSection = SimSection()
    interconnect: InterconnectSection = InterconnectSection()
    # Idle-time mechanisms (engine/idle/input_pipeline.py, compilation.py, stragglers.py, failures.py); absent = off.
    input: InputSection | None = None
    compile: CompileSection | None = None
    stragglers: StragglerSection | None = None
    failures: FailureSection | None = None
    # When training is done and what a chip-hour costs (engine/convergence/); absent = per-step answers only.
    convergence: ConvergenceSection | None = None
    cost: CostSection | None = None

    # Derived views (not inputs) -------------------------------------------------
    @property
    def slice_shape(self) -> tuple[int, ...]:
        return parse_topology(self.pod.topology)

    @property
    def chips_per_slice(self) -> int:
        return math.prod(self.slice_shape)

    @property
    def total_chips(self) -> int:
        return self.chips_per_slice * self.pod.slices

    @property
    def sampled_chip_count(self) -> int:
        """Chips whose events a ``trace = "sampled"`` run stores: ``sim.sample_chips``, or the default capped by the pod."""
        return self.sim.sample_chips if self.sim.sample_chips is not None else min(DEFAULT_SAMPLE_CHIPS, self.total_chips)

    @property
    def data_parallel(self) -> int:
        """Data-parallel degree inside one slice (the `data` mesh axis)."""
        p = self.parallelism
        return p.data if p.data is not None else self.chips_per_slice // self.model_axes_product

    @property
    def model_axes_product(self) -> int:
        """Chips one data-parallel replica spans inside a slice: the product of every mesh axis but ``data``."""
        return math.prod(v for k, v in self.mesh_sizes_given.items() if k != "data")

    @property
    def mesh_sizes_given(self) -> dict[str, int]:
        p = self.parallelism
        return {"data": p.data or 1, "fsdp": p.fsdp, "tensor": p.tensor, "expert": p.expert, "pipeline": self.pipeline_in_slice,
                "context": p.context}

    @property
    def pipeline_spans_slices(self) -> bool:
        """Whether the pipeline's stages run across slices (over the DCN) rather than inside each slice."""
        p = self.parallelism
        return self.pod.slices > 1 and p.pipeline > 1 and p.pipeline % self.pod.slices == 0

    @property
    def pipeline_in_slice(self) -> int:
        """Stages inside one slice: all of them, or ``pipeline / slices`` when the pipeline spans the slices."""
        p = self.parallelism
        return p.pipeline // self.pod.slices if self.pipeline_spans_slices else p.pipeline

    @property
    def dcn_data_parallel(self) -> int:
        """Data-parallel replicas across slices: every slice, unless the pipeline spans them."""
        return 1 if self.pipeline_spans_slices else self.pod.slices

    @property
    def mesh_sizes(self) -> dict[str, int]:
        """Every mesh axis' size inside a slice (engine.pod.mesh.MESH_AXES), ``data`` resolved."""
        sizes = {a: 1 for a in MESH_AXES}
        sizes.update(self.mesh_sizes_given)
        sizes["data"] = self.data_parallel
        return sizes

    @property
    def batch_shards(self) -> int:
        """How many ways the global batch is split: data x fsdp x expert inside a slice, times slices.

        The expert axis shards the batch outside the expert layers (GShard; MaxText's
        ``activation_batch`` rule), as data and fsdp do.
        """
        return self.data_parallel * self.parallelism.fsdp * self.parallelism.expert * self.dcn_data_parallel

    @property
    def per_chip_batch(self) -> int:
        return self.training.global_batch // self.batch_shards

    def chip_spec(self) -> ChipSpec:
        return load_catalog()[self.pod.chip]

    def to_dict(self) -> dict[str, Any]:
        out = self.model_dump(mode="json")
        if self.model.kind == "hlo":  # the keys the module fixes are not the scenario's: a dump must reload
            for section in HLO_UNSUPPORTED_SECTIONS:
                out.pop(section, None)
            for key in HLO_FIXED_TRAINING:
                out["training"].pop(key, None)
        return out
