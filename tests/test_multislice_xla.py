"""How XLA:TPU splits a cross-slice gradient all-reduce, read from its AOT module, against Podscope's
hierarchical model (engine/comm/gradient_sync.py; docs/model.md, "Across slices")."""

from __future__ import annotations

import math
import re

import pytest

CHIPS_PER_SLICE, SLICES, D = 4, 2, 4096


def _two_slice_module(jax, compute_dtype) -> str:
    """The compiled module of one SGD step of ``mean(tanh(x @ w)^2)`` over data parallelism on 2 v5p slices: an fp32
    weight replicated, the batch sharded, the matmul in ``compute_dtype``."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from profiler.tpu_capture import tpu_target

    jnp = jax.numpy
    target = tpu_target("v5p:2x2x1", slices=SLICES)
    mesh = target.mesh({"data": CHIPS_PER_SLICE * SLICES})

    def loss(w, x):
        return jnp.mean(jnp.tanh((x @ w.astype(compute_dtype)).astype(jnp.float32)) ** 2)

    def step(w, x):
        return w - 0.1 * jax.grad(loss)(w, x)

    w = jax.ShapeDtypeStruct((D, D), jnp.float32, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((64, D), compute_dtype, sharding=NamedSharding(mesh, P("data", None)))
    return jax.jit(step).lower(w, x).compile().as_text()


@pytest.fixture(scope="module")
def module_text(live):
    return _two_slice_module(live, live.numpy.float32)


def _instructions(text: str, opcode: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(rf"= [^=]*\b{re.escape(opcode)}\(", line)]


def _bytes(shape: str) -> int:
    dtype, dims = re.match(r"(\w+)\[([\d,]*)\]", shape).groups()
    return math.prod(int(d) for d in dims.split(",") if d) * {"f32": 4, "bf16": 2}[dtype]


def test_xla_reduces_in_the_slice_all_reduces_each_shard_through_the_hosts_and_gathers_back(module_text):
    # inside the slice: replica groups of the slice's 4 devices, never the 8 of the job
    inside = _instructions(module_text, "all-reduce") + _instructions(module_text, "all-gather")
    assert inside and all("replica_groups={{0,1,2,3}}" in line for line in inside)
    # across slices: one host transfer each way, an all-reduce run by the megascale runtime on the hosts
    sends = [line for line in _instructions(module_text, "send") if "is_host_transfer=true" in line]
    assert len(sends) == 1
    (send,) = sends
    assert '_xla_megascale_transfer_type="ALL_REDUCE"' in send and '_xla_megascale_reduce_operation="SUM"' in send
    shard = _bytes(re.search(r"= \((\w+\[[\d,]*\])", send).group(1))
    # what each chip sends over the DCN is its 1 / chips_per_slice shard of the gradient
    assert shard == D * D * 4 // CHIPS_PER_SLICE


def test_podscopes_cross_slice_all_reduce_moves_the_same_shard():
    from engine import scenario_from_dict
    from engine.model.analytic import step_costs
    from engine.scenario.calibration import load_calibration

    raw = {"name": "two-slices", "pod": {"chip": "tpu-v5p", "topology": "2x2x1", "slices": SLICES},
           "model": {"kind": "mlp", "layer_sizes": [D, D]}, "training": {"global_batch": 64, "steps": 2, "precision": "fp32"},
           "parallelism": {"data": CHIPS_PER_SLICE}}  # fmt: skip
    c = step_costs(scenario_from_dict(raw), load_calibration(), tables=False)
    rings = c.sync.result.rings
    # the gradient (fp32 on the wire, the weight's D x D and the bias's D) reduce-scattered over the slice's
    # 4 chips: each all-reduces a quarter of it over the DCN, as XLA's host transfer does
    assert rings.participants == CHIPS_PER_SLICE
    assert rings.bytes_total / rings.participants == pytest.approx(D * D * 4 / CHIPS_PER_SLICE, rel=1e-3)


@pytest.fixture(scope="module")
def bf16_module_text(live):
    """The same step with bf16 matmuls over the fp32 weight (the mixed-precision recipe)."""
    return _two_slice_module(live, live.numpy.bfloat16)


def test_bf16_matmuls_send_their_bf16_gradient_over_the_dcn_as_podscope_does(bf16_module_text):
    """XLA reduces the weight gradient as the bf16 matmul writes it, before its cast to the fp32 weight: the shard each
    chip sends across slices is bf16, half the fp32 program's, and so is Podscope's (gradient_reduce_dtype "compute")."""
    from engine import scenario_from_dict
    from engine.model.analytic import step_costs
    from engine.scenario.calibration import load_calibration

    (send,) = [line for line in _instructions(bf16_module_text, "send") if "is_host_transfer=true" in line]
    shape = re.search(r"= \((\w+\[[\d,]*\])", send).group(1)
    assert shape.startswith("bf16[") and _bytes(shape) == D * D * 2 // CHIPS_PER_SLICE
    raw = {"name": "two-slices", "pod": {"chip": "tpu-v5p", "topology": "2x2x1", "slices": SLICES},
           "model": {"kind": "mlp", "layer_sizes": [D, D]}, "training": {"global_batch": 64, "steps": 2, "precision": "bf16"},
           "parallelism": {"data": CHIPS_PER_SLICE}}  # fmt: skip
    rings = step_costs(scenario_from_dict(raw), load_calibration(), tables=False).sync.result.rings
    assert rings.bytes_total / rings.participants == pytest.approx(_bytes(shape), rel=1e-3)


LAYERS, WIDTH = 3, 512


@pytest.fixture(scope="module")
def scanned_module_text(live):
    """One SGD step of a stack of checkpointed layers under ``jax.lax.scan`` (MaxText's layer loop; bf16 matmuls over
    fp32 weights) on 2 v5p slices: each weight FSDP-sharded over its slice's 4 devices, the batch over all 8."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from profiler.tpu_capture import tpu_target

    jax = live
    jnp = jax.numpy
    mesh = tpu_target("v5p:2x2x1", slices=SLICES).mesh({"data": SLICES, "fsdp": CHIPS_PER_SLICE})

    def loss(w, x):
        def layer(h, wl):
            return jnp.tanh(h @ wl.astype(jnp.bfloat16)), None

        h, _ = jax.lax.scan(jax.checkpoint(layer), x, w)
        return jnp.mean(h.astype(jnp.float32) ** 2)

    def step(w, x):
        return w - 0.1 * jax.grad(loss)(w, x)

    w = jax.ShapeDtypeStruct((LAYERS, WIDTH, WIDTH), jnp.float32, sharding=NamedSharding(mesh, P(None, "fsdp", None)))
    x = jax.ShapeDtypeStruct((64, WIDTH), jnp.bfloat16, sharding=NamedSharding(mesh, P(("data", "fsdp"), None)))
    return jax.jit(step, donate_argnums=0).lower(w, x).compile().as_text()


def _computations(text: str) -> dict[str, list[str]]:
    """The module's computations by name (ENTRY's under "ENTRY"), each its instruction lines."""
    comps: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        head = re.match(r"(ENTRY )?%([\w.\-]+) .*\{$", line)
        if head:
            name = "ENTRY" if head.group(1) else head.group(2)
            comps[name] = []
        elif name is not None and line.startswith("  "):
            comps[name].append(line)
    return comps


def _host_sends(lines: list[str]) -> list[str]:
    return [line for line in lines if re.search(r"\bsend\(%", line) and "is_host_transfer=true" in line]


def test_a_scanned_models_cross_slice_reduction_runs_inside_its_backward_loop_one_layer_behind(scanned_module_text):
    """XLA sends each layer's gradient shard across slices from inside the backward loop, the shard the previous
    iteration reduce-scattered, and waits for it after this iteration's backward: the DCN transfer of one layer
    overlaps the backward of the next; only the last layer's is sent after the loop (docs/model.md, "Across slices")."""
    comps = _computations(scanned_module_text)
    bodies = [re.search(r"body=%([\w.\-]+)", line).group(1) for line in comps["ENTRY"] if re.search(r"\bwhile\(%", line)]
    sending = [b for b in bodies if _host_sends(comps[b])]
    assert len(sending) == 1
    body = comps[sending[0]]
    (send,) = _host_sends(body)
    assert '_xla_megascale_transfer_type="ALL_REDUCE"' in send
    # one layer's bf16 gradient, reduce-scattered over the slice's 4 devices
    assert _bytes(re.search(r"= \((\w+\[[\d,]*\])", send).group(1)) == WIDTH * WIDTH * 2 // CHIPS_PER_SLICE
    # the shard comes from the loop's carried state (the previous iteration), through layout copies only
    defs = {m.group(1): m.group(2) for line in body if (m := re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (.*)", line))}
    operand = re.search(r"send\(%([\w.\-]+)", send).group(1)
    while not re.search(r"\bget-tuple-element\(", defs[operand]):
        assert re.search(r"\b(bitcast|copy)\(", defs[operand]), defs[operand]
        operand = re.search(r"\((?:%)([\w.\-]+)", defs[operand].split(" ", 1)[1]).group(1)
    assert re.search(r"get-tuple-element\(%[\w.\-]*param", defs[operand])
    # this iteration's backward runs between the send and its completion
    order = [m.group(1) for line in body if (m := re.match(r"\s*(?:ROOT )?%([\w.\-]+) =", line))]
    done = next(n for n in order if re.search(r"\bsend-done\(", defs[n]))
    between = order[order.index(re.search(r"%([\w.\-]+) =", send).group(1)) : order.index(done)]
    assert any(re.search(r"\bfusion\(", defs[n]) for n in between)
    # the last layer's shard after the loop
    assert len(_host_sends(comps["ENTRY"])) == 1
