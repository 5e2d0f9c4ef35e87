"""What every built-in family's JAX program shares: the compile target, the mesh, the train step, the optimizers.

A scenario's program (:mod:`profiler.xla_reference` for the transformer and MLP families,
:mod:`profiler.xla_resnet` for ResNet-50) is compiled for the slice the scenario names
(:func:`target_of`) over the devices JAX runs it on, which are one per TensorCore on tpu7x and one
per chip elsewhere (:func:`devices_per_chip`). Every family trains with the same step (:func:`train_step`): the
gradient of its loss and one optimizer update (SGD, momentum, Adam with bias correction, Adafactor
with factored second moments and no momentum), parameters and optimizer state donated.

``jax`` is optional: :func:`jax_module` imports it when a program is built, and a missing install is
an :class:`~engine.errors.InputError` naming ``pip install -r requirements-tpu.txt``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from engine.errors import InputError
from engine.scenario import Scenario

from .tpu_capture import TpuTarget, tpu_target

__all__ = [
    "GENERATION",
    "XlaProgram",
    "devices_per_chip",
    "generation_of",
    "jax_module",
    "optimizer_state",
    "target_of",
    "train_step",
]

#: Podscope chip key -> libtpu generation prefix (profiler/tpu_capture.py ``_GENERATIONS``)
GENERATION = {"tpu-v4": "v4", "tpu-v5e": "v5e", "tpu-v5p": "v5p", "tpu-v6e": "v6e", "tpu7x": "tpu7x"}
_HINT = "pip install -r requirements-tpu.txt (or pip install 'podscope[tpu]')"
_ADAM = dict(b1=0.9, b2=0.95, eps=1e-8)
_LR = 1e-4
_MOMENTUM = 0.9


@dataclass(frozen=True)
class XlaProgram:
    """A scenario's train step, ready for :func:`profiler.tpu_capture.capture`.

    Attributes
    ----------
    fn : callable
        ``jax.jit(step, donate_argnums=...)``: parameters and optimizer state donated.
    args : tuple
        ``jax.ShapeDtypeStruct`` pytrees sharded over the target's devices: params, optimizer state,
        inputs, labels, step count.
    target : TpuTarget
    mesh_axes : dict of str to int
        The mesh's axes over libtpu's devices (on v4 and tpu7x the batch axis is doubled: one
        device per TensorCore).
    devices_per_chip : int
    notes : list of str
        Where the program differs from the scenario (a fallback, a replicated tensor).
    loss : callable or None
        ``loss(params, inputs, labels)``, the function the step differentiates (for
        ``jax.ad_checkpoint.print_saved_residuals``: what each remat policy keeps).
    """

    fn: Any
    args: tuple
    target: TpuTarget
    mesh_axes: dict[str, int]
    devices_per_chip: int
    notes: list[str] = field(default_factory=list)
    loss: Any = None

    @property
    def describes(self) -> dict[str, Any]:
        return {"mesh": dict(self.mesh_axes), "devices_per_chip": self.devices_per_chip, "notes": list(self.notes),
                "generator": "profiler/xla_reference.py"}  # fmt: skip


def generation_of(scenario: Scenario) -> str:
    """libtpu's generation prefix for the scenario's chip (``"v5p"``)."""
    gen = GENERATION.get(scenario.pod.chip)
    if gen is None:
        raise InputError(f"pod.chip {scenario.pod.chip!r}: the TPU compiler check covers {', '.join(GENERATION)}")
    return gen


def devices_per_chip(scenario: Scenario) -> int:
    """The JAX devices one chip of the scenario's target is compiled as: the catalog's ``devices_per_chip`` (two
    TensorCore devices on tpu7x; one megacore device on v4 and v5p, as ``profiler.tpu_capture`` compiles them)."""
    generation_of(scenario)  # a chip libtpu compiles for, else InputError
    return scenario.chip_spec().devices_per_chip


def target_of(scenario: Scenario) -> TpuTarget:
    """``tpu_target(f"{gen}:{topology}", slices)`` of the scenario's pod."""
    return tpu_target(f"{generation_of(scenario)}:{scenario.pod.topology}", slices=scenario.pod.slices)


def jax_module() -> Any:
    """``jax``, or an :class:`~engine.errors.InputError` saying what to install."""
    try:
        return importlib.import_module("jax")
    except ImportError as e:
        raise InputError(f"building the JAX program of a scenario needs jax[tpu]: {_HINT}") from e


def train_step(jax, jnp, opt, loss_fn, params, sdtype, mesh, reduce_grads=None, microbatches=1):
    """The optimizer's abstract state and ``step(params, state, inputs, labels, count)``: the gradient of
    ``loss_fn(params, inputs, labels)`` and one update. ``reduce_grads`` (a program written per device,
    in ``jax.shard_map``) combines the devices' gradients before the update.

    With ``microbatches > 1`` the step accumulates gradients as MaxText's ``gradient_accumulation_steps`` does
    (``train.py``): the batch split into strided microbatches (``reshape(B / M, M)`` then ``swapaxes``, so that each
    device's rows stay on it), a ``jax.lax.scan`` over them, each microbatch's gradient added to an accumulator of
    zeros shaped, typed and sharded as the parameters, and their mean used for the update."""
    state = optimizer_state(jax, jnp, opt, params, sdtype, mesh)
    grad_fn = jax.grad(loss_fn)
    shardings = {k: w.sharding for k, w in params.items()}

    def split(x):
        return jnp.swapaxes(x.reshape((x.shape[0] // microbatches, microbatches) + x.shape[1:]), 0, 1)

    def accumulated(params, inputs, labels):
        def body(acc, batch):
            grads = grad_fn(params, *batch)
            return jax.tree.map(lambda a, g: a + g.astype(a.dtype), acc, grads), None

        zeros = {k: jnp.zeros_like(w) for k, w in params.items()}
        if reduce_grads is None:  # a jit program: the accumulator is sharded as the parameters are
            zeros = {k: jax.lax.with_sharding_constraint(z, shardings[k]) for k, z in zeros.items()}
        acc, _ = jax.lax.scan(body, zeros, (split(inputs), split(labels)))
        return jax.tree.map(lambda a: a / microbatches, acc)

    def step(params, state, inputs, labels, count):
        grads = accumulated(params, inputs, labels) if microbatches > 1 else grad_fn(params, inputs, labels)
        if reduce_grads is not None:
            grads = reduce_grads(grads)
        c = count + 1
        params, state = _update(jax, jnp, opt, params, grads, state, c)
        return params, state, c

    return state, step


def optimizer_state(jax, jnp, opt, params, sdtype, mesh):
    """Abstract optimizer state: nothing (SGD), one moment (momentum), two (Adam), factored rows and
    columns of the last two axes (Adafactor; a vector keeps a full second moment)."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def like(w, shape=None, spec=None):
        sharding = w.sharding if spec is None else NamedSharding(mesh, P(*spec))
        return jax.ShapeDtypeStruct(shape or w.shape, sdtype, sharding=sharding)

    if opt == "sgd":
        return {}
    if opt == "momentum":
        return {"m": {k: like(w) for k, w in params.items()}}
    if opt == "adam":
        return {"m": {k: like(w) for k, w in params.items()}, "v": {k: like(w) for k, w in params.items()}}
    rows, cols, full = {}, {}, {}
    for k, w in params.items():
        spec = tuple(w.sharding.spec) + (None,) * (len(w.shape) - len(w.sharding.spec))
        if len(w.shape) >= 2:
            rows[k] = like(w, w.shape[:-1], spec[:-1])
            cols[k] = like(w, w.shape[:-2] + w.shape[-1:], spec[:-2] + spec[-1:])
        else:
            full[k] = like(w)
    return {"rows": rows, "cols": cols, "full": full}


def _update(jax, jnp, opt, params, grads, state, count):
    """One optimizer update (SGD, momentum, Adam with bias correction, Adafactor without momentum)."""
    lr = jnp.asarray(_LR, jnp.float32)
    if opt == "sgd":
        return {k: (w - lr * grads[k]).astype(w.dtype) for k, w in params.items()}, state
    if opt == "momentum":
        m = {k: (_MOMENTUM * a.astype(jnp.float32) + grads[k]).astype(a.dtype) for k, a in state["m"].items()}
        return {k: (w - lr * m[k]).astype(w.dtype) for k, w in params.items()}, {"m": m}
    if opt == "adam":
        b1, b2, eps = _ADAM["b1"], _ADAM["b2"], _ADAM["eps"]
        m = {k: (b1 * a.astype(jnp.float32) + (1 - b1) * grads[k]).astype(a.dtype) for k, a in state["m"].items()}
        v = {k: (b2 * a.astype(jnp.float32) + (1 - b2) * grads[k] * grads[k]).astype(a.dtype) for k, a in state["v"].items()}
        scale = lr * jnp.sqrt(1 - b2**count) / (1 - b1**count)
        new = {k: (w - scale * m[k] / (jnp.sqrt(v[k].astype(jnp.float32)) + eps)).astype(w.dtype) for k, w in params.items()}
        return new, {"m": m, "v": v}
    b2, eps = 0.999, 1e-30
    rows, cols, full, new = {}, {}, {}, {}
    for k, w in params.items():
        g = grads[k].astype(jnp.float32)
        g2 = g * g + eps
        if k in state["rows"]:
            r = b2 * state["rows"][k].astype(jnp.float32) + (1 - b2) * g2.mean(-1)
            c = b2 * state["cols"][k].astype(jnp.float32) + (1 - b2) * g2.mean(-2)
            rows[k], cols[k] = r.astype(state["rows"][k].dtype), c.astype(state["cols"][k].dtype)
            vhat = r[..., :, None] * c[..., None, :] / r.mean(-1, keepdims=True)[..., None]
        else:
            vv = b2 * state["full"][k].astype(jnp.float32) + (1 - b2) * g2
            full[k] = vv.astype(state["full"][k].dtype)
            vhat = vv
        new[k] = (w - lr * g * jax.lax.rsqrt(vhat)).astype(w.dtype)
    return new, {"rows": rows, "cols": cols, "full": full}
