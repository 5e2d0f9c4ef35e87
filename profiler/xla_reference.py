"""A built-in transformer or MLP scenario as the JAX train step it stands for, to compile with the TPU compiler.

Podscope's ``[model] kind = "transformer"`` is an analytic account of what XLA does with a
transformer's train step. :func:`build_program` writes that step as a real JAX program, one to
one with the scenario and the way MaxText writes it (decoder-only, RMSNorm in fp32, bf16 matmuls
over the stored weights, layers under ``jax.lax.scan`` with one ``jax.checkpoint`` per layer,
parameters and optimizer state donated, GSPMD sharding over a ``data x fsdp x tensor`` mesh), so
that ``python -m profiler xla-check`` can set XLA's memory and cost analysis beside Podscope's.

Remat policies (``training.remat``) map to ``jax.checkpoint`` policies that keep what
docs/model.md says each keeps: ``none`` no checkpoint; ``full``
``jax.checkpoint_policies.nothing_saveable`` (the layer input only); ``minimal``
``checkpoint_dots_with_no_batch_dims`` (the outputs of the weight matmuls, MaxText's ``minimal``);
``selective`` ``save_only_these_names`` over the tensors Podscope's ``selective`` keeps (both
norms' outputs, Q, K, V, the attention output, the residual between the blocks, the MLP's
pre-activations and activation), so the attention scores and probabilities are recomputed.

``[model] kind = "mlp"`` (no embedding table) is a stack of dense layers with ReLU and a softmax
cross-entropy, unrolled, weights sharded over ``fsdp`` (:func:`_build_mlp_program`).

``jax`` is optional: it is imported when a program is built, and a missing install is an
:class:`~engine.errors.InputError` naming ``pip install -r requirements-tpu.txt``.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any

from engine.errors import InputError
from engine.scenario import Scenario

from .tpu_capture import TpuTarget, tpu_target

__all__ = [
    "XlaProgram",
    "build_program",
    "devices_per_chip",
    "generation_of",
    "mesh_axes",
    "program_params",
    "refusal",
    "target_of",
]

#: Podscope chip key -> libtpu generation prefix (profiler/tpu_capture.py ``_GENERATIONS``)
_GENERATION = {"tpu-v4": "v4", "tpu-v5e": "v5e", "tpu-v5p": "v5p", "tpu-v6e": "v6e", "tpu7x": "tpu7x"}
#: libtpu's compile-only devices per chip: one per TensorCore on v4 and tpu7x, one per chip elsewhere
_DEVICES_PER_CHIP = {"v4": 2, "v5e": 1, "v5p": 1, "v6e": 1, "tpu7x": 2}
_HINT = "pip install -r requirements-tpu.txt (or pip install 'podscope[tpu]')"
#: tensors Podscope's ``selective`` remat keeps per layer (engine/memory/hbm.py); the rest is recomputed
_SELECTIVE_NAMES = ("norm1_out", "q", "k", "v", "attn_out", "mid", "norm2_out", "mlp_pre", "mlp_gate", "mlp_act")
_RMS_EPS = 1e-6
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
        ``jax.ShapeDtypeStruct`` pytrees sharded over :attr:`mesh`: params, optimizer state,
        tokens, labels, step count.
    target : TpuTarget
    mesh_axes : dict of str to int
        ``data``, ``fsdp``, ``tensor`` over libtpu's devices (on v4 and tpu7x the batch axis is
        doubled: one device per TensorCore).
    devices_per_chip : int
    notes : list of str
        Where the program differs from the scenario (a fallback, a replicated tensor).
    loss : callable or None
        ``loss(params, tokens, labels)``, the function the step differentiates (for
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
    gen = _GENERATION.get(scenario.pod.chip)
    if gen is None:
        raise InputError(f"pod.chip {scenario.pod.chip!r}: the TPU compiler check covers {', '.join(_GENERATION)}")
    return gen


def devices_per_chip(scenario: Scenario) -> int:
    return _DEVICES_PER_CHIP[generation_of(scenario)]


def target_of(scenario: Scenario) -> TpuTarget:
    """``tpu_target(f"{gen}:{topology}", slices)`` of the scenario's pod."""
    return tpu_target(f"{generation_of(scenario)}:{scenario.pod.topology}", slices=scenario.pod.slices)


def refusal(scenario: Scenario) -> str | None:
    """Why the scenario has no JAX program here (None when it has one)."""
    m, tr, p = scenario.model, scenario.training, scenario.parallelism
    if m.kind not in ("transformer", "mlp"):
        return f"model.kind {m.kind!r}: the TPU compiler check builds the transformer and mlp families (kind = \"transformer\" or \"mlp\")"
    if m.kind == "mlp" and m.embedding_rows:
        return "model.embedding_rows: an MLP behind an embedding table is not mapped to a JAX program yet; valid: no embedding_rows"
    if m.kind == "mlp" and p.tensor > 1:
        return f"parallelism.tensor = {p.tensor}: an MLP is mapped over data and fsdp only; valid: tensor = 1"
    if m.kind == "transformer" and m.experts:
        return "model.experts > 0: mixture-of-experts layers are not mapped to a JAX program yet; valid: experts = 0"
    for axis in ("pipeline", "expert", "context"):
        if getattr(p, axis) > 1:
            return f"parallelism.{axis} = {getattr(p, axis)}: not mapped to a JAX program yet; valid: data, fsdp and tensor"
    if p.strategy != "spmd":
        return f"parallelism.strategy {p.strategy!r}: valid: spmd"
    if p.fsdp_shard != "all":
        return f"parallelism.fsdp_shard {p.fsdp_shard!r}: only ZeRO-3 (\"all\") is mapped; valid: all"
    if tr.microbatches > 1:
        return f"training.microbatches = {tr.microbatches}: gradient accumulation is not mapped yet; valid: 1"
    if tr.precision not in ("bf16", "fp32"):
        return f"training.precision {tr.precision!r}: valid: bf16 or fp32"
    if scenario.pod.chip not in _GENERATION:
        return f"pod.chip {scenario.pod.chip!r}: libtpu compiles for {', '.join(_GENERATION)}"
    return None


def mesh_axes(scenario: Scenario) -> dict[str, int]:
    """The JAX mesh over libtpu's devices: ``data`` (times slices), ``fsdp``, ``tensor``.

    Where libtpu has one device per TensorCore (v4, tpu7x), the batch axis (``fsdp`` when it
    shards, else ``data``) takes the second core, so each chip still holds the scenario's share.
    """
    p = scenario.parallelism
    sizes = dict(scenario.mesh_sizes)
    data, fsdp, tensor = int(sizes.get("data", 1)), int(p.fsdp), int(p.tensor)
    k = devices_per_chip(scenario)
    if fsdp > 1:
        fsdp *= k
    else:
        data *= k
    return {"data": data * scenario.pod.slices, "fsdp": fsdp, "tensor": tensor}


def _jax() -> Any:
    try:
        return importlib.import_module("jax")
    except ImportError as e:
        raise InputError(f"building the JAX program of a scenario needs jax[tpu]: {_HINT}") from e


def _shapes(scenario: Scenario) -> dict[str, tuple[tuple[int, ...], tuple]]:
    """Parameter name -> (shape, partition spec as axis names) of the whole model; layers stacked first."""
    m = scenario.model
    d, h, kv, q, f, v, n = m.d_model, m.heads, m.kv_heads_eff, m.head_dim_eff, m.d_ff, m.vocab, m.layers
    t = scenario.parallelism.tensor
    kv_spec = "tensor" if kv % t == 0 else None  # whole kv heads per chip, else each chip keeps them all
    layer = {
        "norm1": ((d,), (None,)),
        "wq": ((d, h, q), ("fsdp", "tensor", None)),
        "wk": ((d, kv, q), ("fsdp", kv_spec, None)),
        "wv": ((d, kv, q), ("fsdp", kv_spec, None)),
        "wo": ((h, q, d), ("tensor", None, "fsdp")),
        "w1": ((d, f), ("fsdp", "tensor")),
        "w2": ((f, d), ("tensor", "fsdp")),
    }
    if m.mlp == "swiglu":
        layer["wgate"] = ((d, f), ("fsdp", "tensor"))
    if not m.parallel_block:
        layer["norm2"] = ((d,), (None,))
    out = {f"layers.{k}": ((n, *s), (None, *spec)) for k, (s, spec) in layer.items()}
    out["embed"] = ((v, d), ("tensor", "fsdp"))
    out["final_norm"] = ((d,), (None,))
    if not m.tied_embeddings:
        out["unembed"] = ((d, v), ("fsdp", "tensor"))
    return out


def program_params(scenario: Scenario) -> int:
    """Parameters of the JAX program (no jax needed): every weight of :func:`build_program`'s model.

    RMSNorm has a scale and no bias, so this is Podscope's ``params`` less what it counts as
    LayerNorm parameters beyond them: Podscope counts two LayerNorms (scale and bias) per layer and
    a final one, ``(4 x layers + 2) x d_model``; the program has ``(2 x layers + 1) x d_model``
    (``layers + 1`` norms with a parallel block).
    """
    shapes = _mlp_shapes(scenario) if scenario.model.kind == "mlp" else _shapes(scenario)
    return sum(math.prod(shape) for shape, _ in shapes.values())


def build_program(scenario: Scenario) -> XlaProgram:
    """The scenario's train step as a jitted JAX function and its abstract, sharded arguments.

    Parameters
    ----------
    scenario : Scenario
        A validated scenario :func:`refusal` accepts: ``kind = "transformer"`` with no experts, or ``kind = "mlp"``.

    Returns
    -------
    XlaProgram

    Raises
    ------
    InputError
        The scenario is not mapped (:func:`refusal` says why), or jax[tpu] is missing.
    """
    why = refusal(scenario)
    if why:
        raise InputError(why)
    jax = _jax()
    if scenario.model.kind == "mlp":
        return _build_mlp_program(scenario, jax)
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    m, tr = scenario.model, scenario.training
    target = target_of(scenario)
    axes = mesh_axes(scenario)
    mesh = target.mesh(axes)
    notes: list[str] = []
    f32, bf16 = jnp.float32, jnp.bfloat16
    compute = bf16 if tr.precision == "bf16" else f32
    wdtype = bf16 if tr.weight_dtype == "bf16" else f32
    sdtype = bf16 if tr.optimizer_state == "bf16" else f32
    h, kv, q, s_len = m.heads, m.kv_heads_eff, m.head_dim_eff, m.seq_len
    group = h // kv
    kv_axis = "tensor" if kv % scenario.parallelism.tensor == 0 else None
    if kv_axis is None:
        notes.append(f"kv_heads {kv} not divisible by tensor {scenario.parallelism.tensor}: K and V projections replicated over tensor")
    batch = ("data", "fsdp")

    def ns(*spec):
        return NamedSharding(mesh, P(*spec))

    shapes = _shapes(scenario)
    params = {name: jax.ShapeDtypeStruct(shape, wdtype, sharding=ns(*spec)) for name, (shape, spec) in shapes.items()}

    def constrain(x, *spec):
        return jax.lax.with_sharding_constraint(x, ns(*spec))

    from jax.ad_checkpoint import checkpoint_name as name

    def rms_norm(x, scale):
        x32 = x.astype(f32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + _RMS_EPS)
        return (y * scale.astype(f32)).astype(compute)

    kernel = m.attention_kernel
    flash = None
    if kernel == "flash":
        flash = _flash_attention(jax, mesh, batch, notes, s_len, q)
        if flash is None:
            kernel = "standard"

    def attention(qh, kh, vh):
        # qh: [b, t, h, q]; kh, vh: [b, t, kv, q]
        if flash is not None:
            if group > 1:
                kh, vh = jnp.repeat(kh, group, axis=2), jnp.repeat(vh, group, axis=2)
            out = flash(qh.transpose(0, 2, 1, 3), kh.transpose(0, 2, 1, 3), vh.transpose(0, 2, 1, 3))
            return out.transpose(0, 2, 1, 3)
        b, t = qh.shape[0], qh.shape[1]
        qg = qh.reshape(b, t, kv, group, q)
        scores = jnp.einsum("btkgq,bskq->bkgts", qg, kh) / jnp.sqrt(jnp.asarray(q, f32)).astype(compute)
        mask = jnp.tril(jnp.ones((t, t), bool))
        probs = jax.nn.softmax(jnp.where(mask, scores.astype(f32), -1e9), axis=-1).astype(compute)
        return jnp.einsum("bkgts,bskq->btkgq", probs, vh).reshape(b, t, h, q)

    def mlp(y, p):
        pre = name(constrain(jnp.einsum("btd,df->btf", y, p["w1"]), batch, None, "tensor"), "mlp_pre")
        if m.mlp == "swiglu":
            gate = name(constrain(jnp.einsum("btd,df->btf", y, p["wgate"]), batch, None, "tensor"), "mlp_gate")
            act = jax.nn.silu(gate) * pre
        elif m.mlp == "relu":
            act = jax.nn.relu(pre)
        else:
            act = jax.nn.gelu(pre)
        act = name(act, "mlp_act")
        return jnp.einsum("btf,fd->btd", act, p["w2"])

    def attn_block(y, p):
        qh = name(constrain(jnp.einsum("btd,dhq->bthq", y, p["wq"]), batch, None, "tensor", None), "q")
        kh = name(constrain(jnp.einsum("btd,dkq->btkq", y, p["wk"]), batch, None, kv_axis, None), "k")
        vh = name(constrain(jnp.einsum("btd,dkq->btkq", y, p["wv"]), batch, None, kv_axis, None), "v")
        o = name(attention(qh, kh, vh), "attn_out")
        return jnp.einsum("bthq,hqd->btd", o, p["wo"])

    def layer(x, p):
        p = {k: (w.astype(compute) if k.startswith("w") else w) for k, w in p.items()}
        y = name(rms_norm(x, p["norm1"]), "norm1_out")
        if m.parallel_block:
            x = x + attn_block(y, p) + mlp(y, p)
        else:
            x = name(constrain(x + attn_block(y, p), batch, None, "tensor"), "mid")
            y = name(rms_norm(x, p["norm2"]), "norm2_out")
            x = x + mlp(y, p)
        return constrain(x, batch, None, "tensor")

    body = layer
    if tr.remat != "none":
        cp = jax.checkpoint_policies
        policy = {
            "full": cp.nothing_saveable,
            "minimal": cp.checkpoint_dots_with_no_batch_dims,
            "selective": cp.save_only_these_names(*_SELECTIVE_NAMES),
        }[tr.remat]
        body = jax.checkpoint(layer, policy=policy, prevent_cse=False)

    def loss_fn(params, tokens, labels):
        layers = {k.split(".", 1)[1]: w for k, w in params.items() if k.startswith("layers.")}
        x = constrain(params["embed"].astype(compute)[tokens], batch, None, "tensor")
        x, _ = jax.lax.scan(lambda c, p: (body(c, p), None), x, layers)
        y = rms_norm(x, params["final_norm"])
        unembed = params["embed"].T if m.tied_embeddings else params["unembed"]
        logits = constrain(jnp.einsum("btd,dv->btv", y, unembed.astype(compute)).astype(f32), batch, None, "tensor")
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    state, step = _train_step(jax, jnp, tr.optimizer, loss_fn, params, sdtype, mesh)

    rows = ns(batch, None)
    tokens = jax.ShapeDtypeStruct((tr.global_batch, s_len), jnp.int32, sharding=rows)
    count = jax.ShapeDtypeStruct((), f32, sharding=ns())
    fn = jax.jit(step, donate_argnums=(0, 1))
    if kernel != m.attention_kernel:
        notes.append(f"attention {m.attention_kernel!r} compiled as 'standard'")
    return XlaProgram(fn=fn, args=(params, state, tokens, tokens, count), target=target, mesh_axes=axes,
                      devices_per_chip=_DEVICES_PER_CHIP[generation_of(scenario)], notes=notes, loss=loss_fn)  # fmt: skip


def _build_mlp_program(scenario: Scenario, jax: Any) -> XlaProgram:
    """``kind = "mlp"``: a stack of dense layers, each ``x @ w + b`` then ReLU (the last one without),
    softmax cross-entropy over the last layer's outputs, the layers unrolled (no scan); weights
    sharded on their input dimension over ``fsdp``, the batch over ``data x fsdp``; ``remat = "full"``
    puts one ``jax.checkpoint`` (``nothing_saveable``, ``prevent_cse``) around each layer, the other policies save
    what autodiff saves (Podscope's ``minimal`` and ``selective`` are attention policies)."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    m, tr = scenario.model, scenario.training
    target = target_of(scenario)
    axes = mesh_axes(scenario)
    mesh = target.mesh(axes)
    f32 = jnp.float32
    compute = jnp.bfloat16 if tr.precision == "bf16" else f32
    wdtype = jnp.bfloat16 if tr.weight_dtype == "bf16" else f32
    sdtype = jnp.bfloat16 if tr.optimizer_state == "bf16" else f32
    batch = ("data", "fsdp")

    def ns(*spec):
        return NamedSharding(mesh, P(*spec))

    params = {name: jax.ShapeDtypeStruct(shape, wdtype, sharding=ns(*spec)) for name, (shape, spec) in _mlp_shapes(scenario).items()}
    n = len(m.layer_sizes) - 1

    def dense(x, w, b, last):
        y = jnp.einsum("bi,io->bo", x, w.astype(compute)) + b.astype(compute)
        return y if last else jax.nn.relu(y)

    def loss_fn(params, x, labels):
        for i in range(n):
            layer = lambda x, w, b, last=(i == n - 1): dense(x, w, b, last)  # noqa: E731
            if tr.remat == "full":
                # prevent_cse: outside a scan, XLA's CSE would merge the recomputation with the forward
                layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.nothing_saveable, prevent_cse=True)
            x = jax.lax.with_sharding_constraint(layer(x, params[f"w{i}"], params[f"b{i}"]), ns(batch, None))
        logp = jax.nn.log_softmax(x.astype(f32), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    state, step = _train_step(jax, jnp, tr.optimizer, loss_fn, params, sdtype, mesh)

    x = jax.ShapeDtypeStruct((tr.global_batch, m.layer_sizes[0]), compute, sharding=ns(batch, None))
    labels = jax.ShapeDtypeStruct((tr.global_batch,), jnp.int32, sharding=ns(batch))
    count = jax.ShapeDtypeStruct((), f32, sharding=ns())
    fn = jax.jit(step, donate_argnums=(0, 1))
    return XlaProgram(fn=fn, args=(params, state, x, labels, count), target=target, mesh_axes=axes,
                      devices_per_chip=_DEVICES_PER_CHIP[generation_of(scenario)], notes=[], loss=loss_fn)  # fmt: skip


def _mlp_shapes(scenario: Scenario) -> dict[str, tuple[tuple[int, ...], tuple]]:
    """Parameter name -> (shape, partition spec) of an MLP: ``w{i}`` ``[fan_in, fan_out]`` over ``fsdp``, ``b{i}`` replicated."""
    sizes = scenario.model.layer_sizes
    out: dict[str, tuple[tuple[int, ...], tuple]] = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        out[f"w{i}"] = ((fan_in, fan_out), ("fsdp", None))
        out[f"b{i}"] = ((fan_out,), (None,))
    return out


def _flash_attention(jax, mesh, batch, notes, seq_len, head_dim):
    """The Pallas TPU flash-attention kernel inside ``jax.shard_map`` over the batch and head axes, or
    None (with a note) where this JAX has no such kernel or the shapes do not tile."""
    from jax.sharding import PartitionSpec as P

    try:
        from jax.experimental.pallas.ops.tpu import flash_attention as fa
    except ImportError as e:  # pragma: no cover - depends on the installed JAX
        notes.append(f"Pallas TPU flash attention unavailable ({e})")
        return None
    if seq_len % 128:
        notes.append(f"seq_len {seq_len} is not a multiple of 128, the flash kernel's block: standard attention")
        return None
    block = min(512, seq_len)
    while seq_len % block:
        block //= 2
    sizes = fa.BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1,
                          block_q_major_dkv=block, block_k_major_dkv=block, block_k_dkv=block, block_q_dkv=block,
                          block_k_major_dq=block, block_k_dq=block, block_q_dq=block)  # fmt: skip
    spec = P(batch, "tensor", None, None)
    scale = 1.0 / math.sqrt(head_dim)

    def local(q, k, v):
        return fa.flash_attention(q, k, v, causal=True, sm_scale=scale, block_sizes=sizes)

    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)


def _train_step(jax, jnp, opt, loss_fn, params, sdtype, mesh):
    """The optimizer's abstract state and ``step(params, state, inputs, labels, count)``: the gradient of
    ``loss_fn(params, inputs, labels)`` and one update."""
    state = _optimizer_state(jax, jnp, opt, params, sdtype, mesh)

    def step(params, state, inputs, labels, count):
        grads = jax.grad(loss_fn)(params, inputs, labels)
        c = count + 1
        params, state = _update(jax, jnp, opt, params, grads, state, c)
        return params, state, c

    return state, step


def _optimizer_state(jax, jnp, opt, params, sdtype, mesh):
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
