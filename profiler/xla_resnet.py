"""``[model] kind = "resnet50"`` as the JAX train step it stands for, to compile with the TPU compiler.

ResNet-50 v1.5 (He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1; the
stride on each stage's first 3x3 convolution), written the way TPU ResNet-50 trainers write it
(the MLPerf TPU submissions, Kumar et al. 2019, arXiv:1909.09756): NHWC images, bf16
convolutions over the stored weights, batch normalisation over the replica's images with its
statistics in fp32, ReLU, a 3x3/2 max-pool after the 7x7/2 stem, global average pooling, a
1000-way classifier with fp32 logits and a softmax cross-entropy. The network is unrolled, as its
blocks differ in shape.

Data parallel in ``jax.shard_map`` over a ``data x bn`` mesh of libtpu's devices: every device
holds the weights and the optimizer state, computes the gradient of its images, and the gradients
are averaged over every device (``pmean``, an all-reduce) before the update. Batch-norm statistics
are pooled over ``[model] batch_norm_group`` chips (distributed batch normalization, Ying et al.
2018): a ``psum`` over the ``bn`` axis, which spans those chips' devices (both TensorCores of a
v4 or tpu7x chip). ``remat = "full"`` puts one ``jax.checkpoint`` (``nothing_saveable``) around
each bottleneck block; ``minimal`` and ``selective`` are attention policies and keep what ``none``
keeps. ``parallelism.shard_weight_update`` changes the update's time in Podscope's model, not what
a chip holds, so the program updates replicated weights either way.
"""

from __future__ import annotations

import math
from typing import Any

from engine.scenario import Scenario

from .xla_program import XlaProgram, devices_per_chip, target_of, train_step

__all__ = ["build_resnet_program", "resnet_program_params", "resnet_refusal", "resnet_shapes"]

_BN_EPS = 1e-5
#: the stages of ResNet-50: bottleneck width and blocks (He et al. 2016, Table 1, 50-layer column)
_STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))
_EXPANSION = 4


def _blocks() -> list[tuple[str, int, int, int, bool]]:
    """(name, input channels, bottleneck width, stride, has a projection) of each bottleneck block."""
    out, c_in = [], 64
    for stage, (width, repeats) in enumerate(_STAGES):
        for b in range(repeats):
            out.append((f"s{stage}b{b}", c_in, width, 2 if (b == 0 and stage > 0) else 1, b == 0))
            c_in = _EXPANSION * width
    return out


def resnet_shapes(scenario: Scenario) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape: each convolution's ``HWIO`` kernel (no bias) and its batch norm's scale and
    offset, and the classifier's weights and bias. Every parameter is replicated."""
    shapes: dict[str, tuple[int, ...]] = {}

    def conv(name: str, kernel: int, c_in: int, c_out: int) -> None:
        shapes[f"{name}.w"] = (kernel, kernel, c_in, c_out)
        shapes[f"{name}.scale"] = (c_out,)
        shapes[f"{name}.offset"] = (c_out,)

    conv("stem", 7, 3, 64)
    for name, c_in, width, _, proj in _blocks():
        conv(f"{name}.conv1", 1, c_in, width)
        conv(f"{name}.conv2", 3, width, width)
        conv(f"{name}.conv3", 1, width, _EXPANSION * width)
        if proj:
            conv(f"{name}.proj", 1, c_in, _EXPANSION * width)
    features = _EXPANSION * _STAGES[-1][0]
    shapes["fc.w"] = (features, scenario.model.classes)
    shapes["fc.b"] = (scenario.model.classes,)
    return shapes


def resnet_refusal(scenario: Scenario) -> str | None:
    """Why a ResNet-50 scenario has no JAX program here (None when it has one)."""
    p = scenario.parallelism
    for axis in ("fsdp", "tensor", "pipeline", "expert", "context"):
        if getattr(p, axis) > 1:
            return f"parallelism.{axis} = {getattr(p, axis)}: ResNet-50 is mapped data-parallel only; valid: data"
    devices = scenario.total_chips * devices_per_chip(scenario)
    if scenario.training.global_batch % devices:
        return (f"training.global_batch = {scenario.training.global_batch}: the program splits it over libtpu's {devices} "
                f"devices ({devices_per_chip(scenario)} per chip); valid: a multiple of {devices}")  # fmt: skip
    return None


def build_resnet_program(scenario: Scenario, jax: Any) -> XlaProgram:
    """The ResNet-50 scenario's train step (module docstring) and its abstract arguments."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    m, tr = scenario.model, scenario.training
    target = target_of(scenario)
    k = devices_per_chip(scenario)
    bn = m.batch_norm_group * k
    axes = {"data": scenario.total_chips * k // bn, "bn": bn}
    mesh = target.mesh(axes)
    f32 = jnp.float32
    compute = jnp.bfloat16 if tr.precision == "bf16" else f32
    wdtype = jnp.bfloat16 if tr.weight_dtype == "bf16" else f32
    sdtype = jnp.bfloat16 if tr.optimizer_state == "bf16" else f32
    replicated = NamedSharding(mesh, P())
    params = {name: jax.ShapeDtypeStruct(shape, wdtype, sharding=replicated) for name, shape in resnet_shapes(scenario).items()}

    def batch_norm(y, p, name, relu):
        y32 = y.astype(f32)
        stats = jnp.stack([y32.mean((0, 1, 2)), (y32 * y32).mean((0, 1, 2))])
        if bn > 1:
            stats = jax.lax.pmean(stats, "bn")
        mean, var = stats[0], stats[1] - stats[0] * stats[0]
        out = (y32 - mean) * jax.lax.rsqrt(var + _BN_EPS) * p[f"{name}.scale"].astype(f32) + p[f"{name}.offset"].astype(f32)
        return (jax.nn.relu(out) if relu else out).astype(compute)

    def conv(x, p, name, stride=1, relu=True):
        y = jax.lax.conv_general_dilated(x, p[f"{name}.w"].astype(compute), (stride, stride), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))  # fmt: skip
        return batch_norm(y, p, name, relu)

    def block(x, p, name, stride, proj):
        shortcut = conv(x, p, f"{name}.proj", stride, relu=False) if proj else x
        y = conv(x, p, f"{name}.conv1")
        y = conv(y, p, f"{name}.conv2", stride)
        y = conv(y, p, f"{name}.conv3", relu=False)
        return jax.nn.relu(y + shortcut)

    def loss_fn(params, images, labels):
        x = conv(images, params, "stem", 2)
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        for name, _, _, stride, proj in _blocks():
            run = lambda x, p, name=name, stride=stride, proj=proj: block(x, p, name, stride, proj)  # noqa: E731
            if tr.remat == "full":
                # prevent_cse: in an unrolled network XLA's CSE would merge the recomputation with the forward
                run = jax.checkpoint(run, policy=jax.checkpoint_policies.nothing_saveable, prevent_cse=True)
            x = run(x, params)
        pooled = x.astype(f32).mean((1, 2)).astype(compute)
        logits = (pooled @ params["fc.w"].astype(compute)).astype(f32) + params["fc.b"].astype(f32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    state, step = train_step(jax, jnp, tr.optimizer, loss_fn, params, sdtype, mesh,
                             reduce_grads=lambda g: jax.lax.pmean(g, ("data", "bn")), microbatches=tr.microbatches)  # fmt: skip
    spec_of = lambda tree: jax.tree.map(lambda _: P(), tree)  # noqa: E731
    rows = P(("data", "bn"))
    local = jax.shard_map(step, mesh=mesh, in_specs=(spec_of(params), spec_of(state), rows, rows, P()),
                          out_specs=(spec_of(params), spec_of(state), P()), check_vma=False)  # fmt: skip
    size = m.image_size
    images = jax.ShapeDtypeStruct((tr.global_batch, size, size, 3), compute, sharding=NamedSharding(mesh, rows))
    labels = jax.ShapeDtypeStruct((tr.global_batch,), jnp.int32, sharding=NamedSharding(mesh, rows))
    count = jax.ShapeDtypeStruct((), f32, sharding=replicated)
    return XlaProgram(fn=jax.jit(local, donate_argnums=(0, 1)), args=(params, state, images, labels, count), target=target,
                      mesh_axes=axes, devices_per_chip=k, notes=[], loss=loss_fn)  # fmt: skip


def resnet_program_params(scenario: Scenario) -> int:
    """Parameters of :func:`build_resnet_program`'s network (no jax needed)."""
    return sum(math.prod(shape) for shape in resnet_shapes(scenario).values())
