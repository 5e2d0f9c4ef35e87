"""The torus fabric: every directed ICI link of a slice, the bytes a collective puts on it, and faults.

Links are enumerated in closed form with numpy (chip x axis x direction), so a
4,096-chip torus (24,576 directed links) is built and loaded in milliseconds. The
healthy load of a phase is uniform over its axis (every ring of a torus axis is
identical), except on a line where an all-to-all loads the middle link most.

Faults: a degraded link keeps a fraction of its bandwidth; a failed link carries
nothing, and the ring traffic it would have carried is routed around it along the
shortest detour in the slice graph (networkx, on :meth:`engine.pod.topology.Slice.graph`
minus the failed links). A stage then lasts ``max(bytes on link / link bandwidth)``
over all links, which is how a detour or a slow link slows the whole collective.
:func:`collective_on_pod` prices one collective on a pod's fabrics this way (the
slowest slice sets the time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np
import pyarrow as pa

from ..errors import TopologyError
from ..pod.mesh import Segment1D
from ..pod.topology import AXIS_NAMES, Pod, Slice
from ..scenario.calibration import Calibration
from ..trace import TABLES
from .collectives import CollectiveResult, RingSchedule, collective_time, ring_schedule

__all__ = ["RingPhase", "Fabric", "dcn_link_table", "slice_fabrics", "mesh_ring_phases", "collective_on_pod"]

LINK_LOAD = TABLES["extra_link_load"]

Coord = tuple[int, ...]


@dataclass(frozen=True)
class RingPhase:
    """One ring phase of a mesh axis on one torus axis, as :mod:`engine.comm.mesh_comm` prices it.

    The mesh axis' groups are ``chips`` chips ``stride`` apart along torus axis
    ``axis`` (stride 1: contiguous). ``shape`` is how their ring uses the links:
    ``"ring"`` both directions of every link of a whole wraparound axis, ``"one-way"``
    one direction of it, ``"line"`` both directions of the links between a group's
    first and last chip (out and back; a strided group never uses the wraparound).
    ``link_bytes`` is what one group puts on each directed link it uses.
    """

    axis: int
    chips: int
    stride: int
    shape: str  # "ring" | "one-way" | "line"
    link_bytes: float


@dataclass(frozen=True)
class Fabric:
    """The directed links of one slice with their bandwidth, degradations and failures.

    Parameters
    ----------
    slice
        The torus slice.
    link_bytes_per_s
        Healthy one-way bandwidth of one link (times any efficiency).
    degraded
        ``{(a, b): fraction}`` for undirected links between coordinates a and b.
    failed
        Undirected links ``(a, b)`` that carry nothing.
    """

    slice: Slice
    link_bytes_per_s: float
    degraded: dict[tuple[Coord, Coord], float] = field(default_factory=dict)
    failed: tuple[tuple[Coord, Coord], ...] = ()
    # ring_loads results by (phases, reroute): a search lays the same rings on one slice many times
    _ring_memo: dict = field(default_factory=dict, compare=False, repr=False)

    # -- the links, closed form -------------------------------------------------------
    @cached_property
    def links(self) -> dict[str, np.ndarray]:
        """Columns of every directed link: src, dst (slice-local chip ids), axis, sign, pos.

        ``pos`` is the lower coordinate of the link along its axis (the cut it crosses).
        """
        shape = self.slice.shape
        coords = self.slice.coords
        cols: dict[str, list[np.ndarray]] = {k: [] for k in ("src", "dst", "axis", "sign", "pos")}
        ids = np.arange(len(coords), dtype=np.int32)
        for a, (n, w) in enumerate(zip(shape, self.slice.wrap)):
            if n <= 1:
                continue
            for sign in (1, -1):
                nxt = coords[:, a] + sign
                ok = np.ones(len(coords), bool) if w else (nxt >= 0) & (nxt < n)
                dst_coords = coords[ok].copy()
                dst_coords[:, a] = np.mod(nxt[ok], n)
                cols["src"].append(ids[ok])
                cols["dst"].append(np.ravel_multi_index(tuple(dst_coords.T), shape).astype(np.int32))
                cols["axis"].append(np.full(ok.sum(), a, np.int8))
                cols["sign"].append(np.full(ok.sum(), sign, np.int8))
                cols["pos"].append(np.minimum(coords[ok, a], dst_coords[:, a]).astype(np.int32))
        return {k: (np.concatenate(v) if v else np.zeros(0, np.int32)) for k, v in cols.items()}

    @property
    def n_links(self) -> int:
        return len(self.links["src"])

    def _link_ids(self, a: Coord, b: Coord) -> np.ndarray:
        """Ids of the directed links a->b and b->a (one of each; the first on a 2-ring)."""
        shape = self.slice.shape
        ia, ib = int(np.ravel_multi_index(a, shape)), int(np.ravel_multi_index(b, shape))
        src, dst = self.links["src"], self.links["dst"]
        out = []
        for s, d in ((ia, ib), (ib, ia)):
            hit = np.flatnonzero((src == s) & (dst == d))
            if hit.size == 0:
                raise TopologyError(f"no ICI link between {a} and {b} in a {'x'.join(map(str, shape))} slice")
            out.append(hit[0])
        return np.asarray(out)

    @cached_property
    def bandwidth_frac(self) -> np.ndarray:
        """(links,) fraction of healthy bandwidth: 1, the degraded fraction, or 0 if failed."""
        frac = np.ones(self.n_links)
        for (a, b), f in self.degraded.items():
            frac[self._link_ids(a, b)] = f
        for a, b in self.failed:
            frac[self._link_ids(a, b)] = 0.0
        return frac

    @cached_property
    def detours(self) -> list[tuple[int, np.ndarray]]:
        """For each failed directed link: (its id, ids of the links of its shortest detour).

        Raises
        ------
        TopologyError
            If the failures disconnect the slice.
        """
        if not self.failed:
            return []
        import networkx as nx  # only failed links need routing (engine.pod.topology imports it as lazily)

        g = self.slice.graph()
        g.remove_edges_from(self.failed)
        shape = self.slice.shape
        n = self.slice.chips
        keys = self.links["src"].astype(np.int64) * n + self.links["dst"]
        order = np.argsort(keys, kind="stable")  # first link wins on a 2-ring's double link
        out = []
        for a, b in self.failed:
            for u, v in ((a, b), (b, a)):
                try:
                    path = nx.shortest_path(g, u, v)
                except nx.NetworkXNoPath:
                    raise TopologyError(f"failed links disconnect {u} from {v}; no detour exists") from None
                flat = np.ravel_multi_index(tuple(np.asarray(path).T), shape).astype(np.int64)
                hop_keys = flat[:-1] * n + flat[1:]
                ids = order[np.searchsorted(keys[order], hop_keys)]
                out.append((int(self._link_ids(u, v)[0]), ids))
        return out

    def detour_hops(self, loads: np.ndarray) -> np.ndarray:
        """(rows,) hops each stage's rings gain: the longest detour of a failed link that row uses.

        ``loads`` is (stages or phases, links) bytes *before* rerouting (``reroute=False``),
        so a failed link no ring of that row crosses (an axis the collective does not
        span, a strided line's wraparound) adds nothing.
        """
        out = np.zeros(len(loads), dtype=np.int64)
        for link_id, path in self.detours:
            out = np.where(loads[:, link_id] > 0, np.maximum(out, len(path) - 1), out)
        return out

    # -- loads ------------------------------------------------------------------------
    def stage_loads(self, plan: RingSchedule, reroute: bool = True) -> np.ndarray:
        """(stages, links) bytes each directed link carries in each stage, detours applied.

        ``reroute=False`` leaves a failed link's bytes on it (to see whether the rings use it).
        """
        L = self.links
        loads = np.zeros((plan.stages, self.n_links))
        for p in plan.phases:
            on_axis = L["axis"] == p.axis
            if p.op == "all-to-all" and not plan.wrap[p.axis]:
                # Line: the link at cut i carries (i+1)(n-i-1) pair-shares; p.link_bytes is the middle one.
                n = p.chips
                i = L["pos"][on_axis]
                loads[p.stage, on_axis] += p.link_bytes * (i + 1) * (n - i - 1) / ((n // 2) * (n - n // 2))
            elif p.directions == 1 and plan.wrap[p.axis]:
                loads[p.stage, on_axis & (L["sign"] == 1)] += p.link_bytes  # one-way ring on a torus axis
            else:
                loads[p.stage, on_axis] += p.link_bytes
        return self._reroute(loads) if reroute else loads

    def ring_loads(self, phases: Sequence[RingPhase], reroute: bool = True) -> np.ndarray:
        """(phases, links) bytes of mesh-axis ring phases run one after another, detours applied.

        ``reroute=False`` leaves a failed link's bytes on it (to see whether the rings use it).

        A ``"line"`` phase of groups ``chips`` long and ``stride`` apart loads the link at
        cut ``p`` once per group spanning it: ``stride`` groups in the middle of the axis,
        fewer at its ends (the wraparound link, if any, carries nothing).
        """
        key = (tuple(phases), reroute)
        if key not in self._ring_memo:
            if len(self._ring_memo) > 256:
                self._ring_memo.clear()
            self._ring_memo[key] = self._ring_loads(phases, reroute)
        return self._ring_memo[key].copy()

    def _ring_loads(self, phases: Sequence[RingPhase], reroute: bool) -> np.ndarray:
        L = self.links
        coords = self.slice.coords
        loads = np.zeros((len(phases), self.n_links))
        for i, p in enumerate(phases):
            on_axis = L["axis"] == p.axis
            if p.shape == "ring":
                loads[i, on_axis] = p.link_bytes
            elif p.shape == "one-way":
                loads[i, on_axis & (L["sign"] == 1)] = p.link_bytes
            else:
                n = self.slice.shape[p.axis]
                span = p.stride * (p.chips - 1)  # cuts one group crosses
                groups = np.zeros(max(n - 1, 0))
                for block in range(0, n, p.stride * p.chips):  # groups tile the axis in blocks
                    for first in range(block, block + p.stride):
                        groups[first : first + span] += 1
                step = np.abs(coords[L["src"], p.axis] - coords[L["dst"], p.axis])
                inner = on_axis & (step == 1)  # not the wraparound link
                loads[i, inner] = p.link_bytes * groups[L["pos"][inner]]
        return self._reroute(loads) if reroute else loads

    def _reroute(self, loads: np.ndarray) -> np.ndarray:
        """Move each failed link's bytes onto its detour (in place; returns ``loads``)."""
        for link_id, path in self.detours:
            loads[:, path] += loads[:, [link_id]]
            loads[:, link_id] = 0.0
        return loads

    def stage_bw_time_s(self, plan: RingSchedule | None, loads: np.ndarray | None = None) -> list[float]:
        """Bandwidth time of each stage: its busiest link's bytes over that link's bandwidth.

        ``plan`` may be None when ``loads`` is given (e.g. from :meth:`ring_loads`).
        """
        loads = self.stage_loads(plan) if loads is None else loads
        bw = self.link_bytes_per_s * self.bandwidth_frac
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(loads > 0, loads / np.where(bw > 0, bw, np.nan), 0.0)
        return [float(x) for x in np.nanmax(t, axis=1)] if t.size else [0.0] * len(loads)

    def link_load_table(
        self, plan: RingSchedule | None, per_step: float, step_s: float, slice_index: int = 0, loads: np.ndarray | None = None
    ) -> pa.Table:
        """``link_load`` rows (see TABLES["extra_link_load"]) for ``per_step`` runs of ``plan`` per step.

        Chip ids are global: ``slice_index * chips_per_slice + local``. ``plan`` may be
        None when ``loads`` is given.
        """
        loads = self.stage_loads(plan) if loads is None else loads
        bytes_step = loads.sum(axis=0) * per_step
        bw = self.link_bytes_per_s * self.bandwidth_frac
        busy_s = np.divide(bytes_step, bw, out=np.zeros_like(bytes_step), where=bw > 0)
        offset = slice_index * self.slice.chips
        return LINK_LOAD.table(
            {
                "src_chip": (self.links["src"] + offset).astype(np.int32),
                "dst_chip": (self.links["dst"] + offset).astype(np.int32),
                "axis": np.asarray(AXIS_NAMES)[self.links["axis"]] if self.n_links else np.zeros(0, str),
                "bytes_per_step": bytes_step,
                "busy_ns_per_step": np.rint(busy_s * 1e9).astype(np.int64),
                "utilization": busy_s / step_s if step_s > 0 else np.zeros_like(busy_s),
                "bandwidth_frac": self.bandwidth_frac,
            }
        )


def dcn_link_table(
    chip_host: np.ndarray, chips_per_slice: int, slices: int, host_bytes: float, host_bytes_per_s: float, step_s: float
) -> pa.Table:
    """One ``dcn`` row per host: its NIC's bytes per step to the same host of the next slice (ring).

    ``src_chip``/``dst_chip`` are the first chip of each host, per the link-load contract.
    """
    hosts, first = np.unique(chip_host, return_index=True)
    per_slice = len(hosts) // max(slices, 1)
    dst = (first + chips_per_slice) % (chips_per_slice * slices)
    busy_s = host_bytes / host_bytes_per_s if host_bytes_per_s > 0 else 0.0
    n = len(hosts)
    assert per_slice * slices == n
    return LINK_LOAD.table(
        {
            "src_chip": first.astype(np.int32),
            "dst_chip": dst.astype(np.int32),
            "axis": np.full(n, "dcn"),
            "bytes_per_step": np.full(n, float(host_bytes)),
            "busy_ns_per_step": np.full(n, int(round(busy_s * 1e9)), np.int64),
            "utilization": np.full(n, busy_s / step_s if step_s > 0 else 0.0),
            "bandwidth_frac": np.ones(n),
        }
    )


@lru_cache(maxsize=32)
def healthy_fabric(slice_: Slice, link_bytes_per_s: float) -> Fabric:
    """The fault-free fabric of a slice, built once per shape and bandwidth (its links are closed form)."""
    return Fabric(slice_, link_bytes_per_s)


def slice_fabrics(pod: Pod, link_bytes_per_s: float, degraded: Sequence = (), failed: Sequence = ()) -> dict[int, Fabric]:
    """One fabric per slice that has faults (key: slice index), plus the healthy one at key -1."""
    out = {-1: healthy_fabric(pod.slice, link_bytes_per_s)}
    for s in sorted({f.slice for f in (*degraded, *failed)}):
        out[s] = Fabric(
            pod.slice,
            link_bytes_per_s,
            degraded={(tuple(f.a), tuple(f.b)): f.bandwidth_frac for f in degraded if f.slice == s},
            failed=tuple((tuple(f.a), tuple(f.b)) for f in failed if f.slice == s),
        )
    return out


def mesh_ring_phases(segments: Sequence[Segment1D], bytes_total: float, unidirectional: bool) -> list[RingPhase]:
    """The reduce-scatter ring phases of :func:`engine.comm.mesh_comm.mesh_collective_s` on the links.

    A whole wraparound segment is a bidirectional ring (half of each shard each way) or,
    with one-way links, a one-way ring; any other segment is a line, out and back.
    """
    phases = []
    shard = float(bytes_total)
    for seg in segments:
        move = (seg.chips - 1) / seg.chips * shard
        if seg.wrap and not unidirectional:
            phases.append(RingPhase(seg.torus_axis, seg.chips, seg.stride, "ring", move / 2))
        elif seg.wrap:
            phases.append(RingPhase(seg.torus_axis, seg.chips, seg.stride, "one-way", move))
        else:
            phases.append(RingPhase(seg.torus_axis, seg.chips, seg.stride, "line", move))
        shard /= seg.chips
    return phases


def collective_on_pod(
    op: str,
    bytes_total: float,
    pod: Pod,
    cal: Calibration,
    *,
    axes: Sequence[int] | None = None,
    schedule: str = "simultaneous",
    unidirectional: bool = False,
    degraded: Sequence = (),
    failed: Sequence = (),
    across_slices: bool = True,
    fabrics: dict[int, Fabric] | None = None,
) -> tuple[CollectiveResult, dict[int, Fabric], dict[int, np.ndarray]]:
    """Cost of one collective on a pod's ICI (and DCN across slices), faults included.

    Returns the result (the slowest slice sets the time), the fabric of every slice
    with faults (key -1: the healthy slices) and their per-stage link loads
    ``{slice: (stages, links) bytes}``. Pass ``fabrics`` back in to reuse their
    detours (routing on a 4,096-chip graph takes a fraction of a second).
    """
    link = pod.chip.ici_link_bytes_per_s * cal.ici_efficiency
    rings = ring_schedule(op, bytes_total, pod.slice.shape, pod.slice.wrap, axes, schedule, unidirectional)
    fabrics = fabrics if fabrics is not None else slice_fabrics(pod, link, degraded, failed)
    loads = {k: f.stage_loads(rings) for k, f in fabrics.items()}
    # The slowest slice bounds a synchronous collective: per stage, the worst fabric.
    stage_bw = np.max([fabrics[k].stage_bw_time_s(rings, loads[k]) for k in fabrics], axis=0) if rings.stages else []
    # A detour lengthens the rings of the stages that cross the failed link, by its extra hops; a failed
    # link no ring of a stage uses (on an axis the collective does not span) costs that stage nothing.
    broken = [f.detour_hops(f.stage_loads(rings, reroute=False)) for f in fabrics.values() if f.failed]
    extra = int(np.max(broken, axis=0).sum()) if broken and rings.stages else 0
    res = collective_time(
        rings,
        link,
        cal.ici_hop_latency_s,
        stage_bw_time_s=list(stage_bw),
        slices=pod.slices if across_slices else 1,
        chips_per_host=pod.chips_per_host,
        dcn_host_bytes_per_s=pod.chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency,
        dcn_latency_s=cal.dcn_latency_s,
    )
    if extra:
        add = extra * cal.ici_hop_latency_s
        res = CollectiveResult(res.op, res.bytes_total, res.participants, res.time_s + add, res.ici_time_s + add,
                               res.dcn_time_s, res.phases, res.rings)
    return res, fabrics, loads
