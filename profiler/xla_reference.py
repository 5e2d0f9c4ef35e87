"""A built-in scenario as the JAX train step it stands for, to compile with the TPU compiler.

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
pre-activations and activation), so the attention scores and probabilities are recomputed;
``save_qkv_proj``, ``save_dot_except_mlp`` and ``save_dot_except_mlpwi`` MaxText's policies of those
names, ``save_only_these_names`` over Q, K and V, then the attention's output projection, then the
MLP's projection back to ``d_model``.

``[model] kind = "mlp"`` (no embedding table) is a stack of dense layers with ReLU and a softmax
cross-entropy, unrolled, weights sharded over ``fsdp`` (:func:`_build_mlp_program`);
``kind = "resnet50"`` is ResNet-50 v1.5, data parallel (:mod:`profiler.xla_resnet`).

``jax`` is optional: it is imported when a program is built, and a missing install is an
:class:`~engine.errors.InputError` naming ``pip install -r requirements-tpu.txt``.
"""

from __future__ import annotations

import math
from typing import Any

from engine.errors import InputError
from engine.memory.activations import flash_block
from engine.scenario import Scenario

from . import xla_resnet
from .xla_program import GENERATION, XlaProgram, devices_per_chip, generation_of, jax_module, target_of, train_step

__all__ = [
    "XlaProgram",
    "build_program",
    "devices_per_chip",
    "generation_of",
    "kernel_attention",
    "mesh_axes",
    "program_params",
    "refusal",
    "target_of",
]

#: tensors Podscope's ``selective`` remat keeps per layer (engine/memory/activations.py); the rest is recomputed
_SELECTIVE_NAMES = ("norm1_out", "q", "k", "v", "attn_out", "mid", "norm2_out", "mlp_pre", "mlp_gate", "mlp_act")
#: MaxText's named-save remat policies (layers/decoders.py ``get_remat_policy``) over this program's names: ``q``, ``k``
#: and ``v`` are MaxText's ``query_proj``, ``key_proj`` and ``value_proj``, ``out_proj`` and ``mlpwo`` its own
_MAXTEXT_SAVED_NAMES = {
    "save_qkv_proj": ("q", "k", "v"),
    "save_dot_except_mlp": ("q", "k", "v", "out_proj"),
    "save_dot_except_mlpwi": ("q", "k", "v", "out_proj", "mlpwo"),
}
_RMS_EPS = 1e-6


def refusal(scenario: Scenario) -> str | None:
    """Why the scenario has no JAX program here (None when it has one)."""
    m, tr, p = scenario.model, scenario.training, scenario.parallelism
    if m.kind not in ("transformer", "mlp", "resnet50"):
        return (f"model.kind {m.kind!r}: the TPU compiler check builds the transformer, mlp and resnet50 families "
                "(kind = \"transformer\", \"mlp\" or \"resnet50\")")  # fmt: skip
    if m.kind == "mlp" and m.embedding_rows:
        return "model.embedding_rows: an MLP behind an embedding table is not mapped to a JAX program yet; valid: no embedding_rows"
    if m.kind == "mlp" and p.tensor > 1:
        return f"parallelism.tensor = {p.tensor}: an MLP is mapped over data and fsdp only; valid: tensor = 1"
    if m.kind == "transformer" and m.experts and m.moe_dispatch != "dense":
        return (f"model.moe_dispatch {m.moe_dispatch!r}: the grouped matmul (megablox) is not mapped to a JAX program yet; "
                "valid: moe_dispatch = \"dense\"")  # fmt: skip
    if m.kind == "transformer" and m.experts and m.moe_layer_interval > 1:
        return (f"model.moe_layer_interval = {m.moe_layer_interval}: layers of two kinds under one scan are not mapped "
                "yet; valid: 1 (every layer a mixture of experts)")  # fmt: skip
    if p.context > 1:
        return f"parallelism.context = {p.context}: not mapped to a JAX program yet; valid: data, fsdp, tensor, expert and pipeline"
    if p.pipeline > 1:
        if m.kind != "transformer" or m.experts:
            return f"parallelism.pipeline = {p.pipeline}: a pipeline is mapped for a dense transformer only"
        if p.pipeline_schedule != "gpipe":
            return (f"parallelism.pipeline_schedule {p.pipeline_schedule!r}: MaxText's pipeline loop is mapped, which keeps "
                    "every microbatch's activations as GPipe does; valid: \"gpipe\"")  # fmt: skip
        if scenario.pipeline_spans_slices:
            return "parallelism.pipeline: stages across slices are not mapped yet; valid: a pipeline inside each slice"
    if p.strategy != "spmd":
        return f"parallelism.strategy {p.strategy!r}: valid: spmd"
    if p.fsdp_shard != "all":
        return f"parallelism.fsdp_shard {p.fsdp_shard!r}: only ZeRO-3 (\"all\") is mapped; valid: all"
    if tr.microbatches > 1 and p.pipeline == 1:
        # gradient accumulation splits each device's rows into the microbatches (xla_program.train_step)
        if m.kind == "resnet50":
            shards = scenario.total_chips * devices_per_chip(scenario)
        else:
            axes = mesh_axes(scenario)
            shards = axes["data"] * axes["fsdp"] * axes["expert"]
        rows = tr.global_batch // shards if tr.global_batch % shards == 0 else 0
        if not rows or rows % tr.microbatches:
            return (f"training.microbatches = {tr.microbatches}: each of libtpu's {shards} batch shards splits its rows into "
                    f"the microbatches; valid: a count dividing the {tr.global_batch / shards:g} rows per shard")  # fmt: skip
    if tr.precision not in ("bf16", "fp32"):
        return f"training.precision {tr.precision!r}: valid: bf16 or fp32"
    if scenario.pod.chip not in GENERATION:
        return f"pod.chip {scenario.pod.chip!r}: libtpu compiles for {', '.join(GENERATION)}"
    return xla_resnet.resnet_refusal(scenario) if m.kind == "resnet50" else None


def mesh_axes(scenario: Scenario) -> dict[str, int]:
    """The JAX mesh over libtpu's devices: ``data`` (times slices), ``stage`` (with a pipeline), ``fsdp``,
    ``expert``, ``tensor``.

    Where JAX has one device per TensorCore (tpu7x), the batch axis (``fsdp`` when it
    shards, else ``data``) takes the second core, so each chip still holds the scenario's share.
    """
    p = scenario.parallelism
    sizes = dict(scenario.mesh_sizes)
    data, fsdp, expert, tensor = int(sizes.get("data", 1)), int(p.fsdp), int(p.expert), int(p.tensor)
    k = devices_per_chip(scenario)
    if fsdp > 1:
        fsdp *= k
    else:
        data *= k
    stage = {"stage": int(p.pipeline)} if p.pipeline > 1 else {}
    return {"data": data * scenario.pod.slices, **stage, "fsdp": fsdp, "expert": expert, "tensor": tensor}


#: MaxText's ``embed`` rule: a weight's model dimension shards over ``fsdp`` and ``expert`` (configs/base.yml
#: ``logical_axis_rules``); a routed expert's over ``fsdp`` alone (``embed_no_exp``), its expert dimension over ``expert``
_EMBED = ("fsdp", "expert")


def _shapes(scenario: Scenario) -> dict[str, tuple[tuple[int, ...], tuple]]:
    """Parameter name -> (shape, partition spec as axis names) of the whole model; layers stacked first."""
    m = scenario.model
    d, h, kv, q, f, v, n = m.d_model, m.heads, m.kv_heads_eff, m.head_dim_eff, m.d_ff, m.vocab, m.layers
    t = scenario.parallelism.tensor
    kv_spec = "tensor" if kv % t == 0 else None  # whole kv heads per chip, else each chip keeps them all
    layer = {
        "norm1": ((d,), (None,)),
        "wq": ((d, h, q), (_EMBED, "tensor", None)),
        "wk": ((d, kv, q), (_EMBED, kv_spec, None)),
        "wv": ((d, kv, q), (_EMBED, kv_spec, None)),
        "wo": ((h, q, d), ("tensor", None, _EMBED)),
    }
    if m.moe:
        e, fe, sh = m.experts, m.d_ff_expert_eff, m.shared_experts
        layer["wrouter"] = ((d, e), (_EMBED, None))
        layer["we_in"] = ((e, d, fe), ("expert", "fsdp", "tensor"))
        if m.mlp == "swiglu":
            layer["we_gate"] = ((e, d, fe), ("expert", "fsdp", "tensor"))
        layer["we_out"] = ((e, fe, d), ("expert", "tensor", "fsdp"))
        if sh:
            layer["ws_in"] = ((d, sh * fe), (_EMBED, "tensor"))
            if m.mlp == "swiglu":
                layer["ws_gate"] = ((d, sh * fe), (_EMBED, "tensor"))
            layer["ws_out"] = ((sh * fe, d), ("tensor", _EMBED))
    else:
        layer["w1"] = ((d, f), (_EMBED, "tensor"))
        layer["w2"] = ((f, d), ("tensor", _EMBED))
        if m.mlp == "swiglu":
            layer["wgate"] = ((d, f), (_EMBED, "tensor"))
    if not m.parallel_block:
        layer["norm2"] = ((d,), (None,))
    stages = scenario.parallelism.pipeline
    if stages > 1:  # MaxText's "layers" -> "stage" rule: each stage holds its layers' weights
        out = {f"layers.{k}": ((stages, n // stages, *s), ("stage", None, *spec)) for k, (s, spec) in layer.items()}
    else:
        out = {f"layers.{k}": ((n, *s), (None, *spec)) for k, (s, spec) in layer.items()}
    out["embed"] = ((v, d), ("tensor", _EMBED))
    out["final_norm"] = ((d,), (None,))
    if not m.tied_embeddings:
        out["unembed"] = ((d, v), (_EMBED, "tensor"))
    return out


def program_params(scenario: Scenario) -> int:
    """Parameters of the JAX program (no jax needed): every weight of :func:`build_program`'s model.

    RMSNorm has a scale and no bias, so this is Podscope's ``params`` less what it counts as
    LayerNorm parameters beyond them: Podscope counts two LayerNorms (scale and bias) per layer and
    a final one, ``(4 x layers + 2) x d_model``; the program has ``(2 x layers + 1) x d_model``
    (``layers + 1`` norms with a parallel block). An MLP's and ResNet-50's are Podscope's.
    """
    if scenario.model.kind == "resnet50":
        return xla_resnet.resnet_program_params(scenario)
    shapes = _mlp_shapes(scenario) if scenario.model.kind == "mlp" else _shapes(scenario)
    return sum(math.prod(shape) for shape, _ in shapes.values())


def build_program(scenario: Scenario) -> XlaProgram:
    """The scenario's train step as a jitted JAX function and its abstract, sharded arguments.

    Parameters
    ----------
    scenario : Scenario
        A validated scenario :func:`refusal` accepts: ``kind = "transformer"`` with no experts, ``kind = "mlp"``
        or ``kind = "resnet50"``.

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
    jax = jax_module()
    if scenario.model.kind == "mlp":
        program = _build_mlp_program(scenario, jax)
    elif scenario.model.kind == "resnet50":
        program = xla_resnet.build_resnet_program(scenario, jax)
    else:
        program = _build_transformer_program(scenario, jax)
    if scenario.training.gradient_reduce_dtype == "weights" and scenario.training.precision != "fp32":
        program.notes.append("training.gradient_reduce_dtype = 'weights': the compiled program is a jit program, whose "
                             "gradients XLA reduces as their matmul writes them (the 'compute' dtype)")
    return program


def _build_transformer_program(scenario: Scenario, jax) -> XlaProgram:
    """:func:`build_program` of a dense transformer."""
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
    batch = ("data", "fsdp", "expert")

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

    def activation(pre, gate):
        if m.mlp == "swiglu":
            return jax.nn.silu(gate) * pre
        return jax.nn.relu(pre) if m.mlp == "relu" else jax.nn.gelu(pre)

    def mlp(y, p, w_in="w1", w_gate="wgate", w_out="w2"):
        pre = name(constrain(jnp.einsum("btd,df->btf", y, p[w_in]), batch, None, "tensor"), "mlp_pre")
        gate = None
        if m.mlp == "swiglu":
            gate = name(constrain(jnp.einsum("btd,df->btf", y, p[w_gate]), batch, None, "tensor"), "mlp_gate")
        act = name(activation(pre, gate), "mlp_act")
        return name(jnp.einsum("btf,fd->btd", act, p[w_out]), "mlpwo")

    def moe(y, p):
        """MaxText's mixture of experts with dense dispatch (layers/moe.py generate_masks, dense_matmul): top-k of the
        router's softmax, each expert's first C routed tokens of a sequence kept (C slots, Podscope's
        ``expert_capacity_per_sequence``), one-hot dispatch and combine einsums around the experts' MLPs, the experts
        sharded over ``expert``; then the shared experts as one dense MLP."""
        b, t, _ = y.shape
        e, k, cap = m.experts, m.experts_per_token, int(m.expert_capacity_per_sequence)
        probs = jax.nn.softmax(jnp.einsum("btd,de->bte", y, p["wrouter"]).astype(f32), axis=-1).astype(compute)
        _, top = jax.lax.top_k(probs, k)
        routed = jax.nn.one_hot(top, e, dtype=jnp.int32)  # [b, t, k, e]
        count = jnp.cumsum(routed.reshape(b, t * k, e), axis=1)  # each routed copy's place in its expert's queue
        kept = (routed * (count.reshape(b, t, k, e) <= cap)).sum(2)  # [b, t, e]
        slot = (routed.reshape(b, t * k, e) * count).reshape(b, t, k, e).sum(2) * kept
        combine = constrain(((probs * kept)[..., None] * jax.nn.one_hot(slot, cap + 1, dtype=compute))[..., 1:],
                            batch, None, None, None)  # fmt: skip
        dispatch = (combine > 0).astype(compute)
        xe = constrain(jnp.einsum("btd,btec->ebcd", y, dispatch), "expert", ("data", "fsdp"), None, "tensor")
        pre = constrain(jnp.einsum("ebcd,edf->ebcf", xe, p["we_in"]), "expert", ("data", "fsdp"), None, "tensor")
        gate = None
        if m.mlp == "swiglu":
            gate = constrain(jnp.einsum("ebcd,edf->ebcf", xe, p["we_gate"]), "expert", ("data", "fsdp"), None, "tensor")
        out = constrain(jnp.einsum("ebcf,efd->ebcd", activation(pre, gate), p["we_out"]), "expert", ("data", "fsdp"), None, "tensor")
        out = jnp.einsum("ebcd,btec->btd", out, combine)
        if m.shared_experts:
            out = out + mlp(y, p, "ws_in", "ws_gate", "ws_out")
        return out

    ffn = moe if m.moe else mlp

    def attn_block(y, p):
        qh = name(constrain(jnp.einsum("btd,dhq->bthq", y, p["wq"]), batch, None, "tensor", None), "q")
        kh = name(constrain(jnp.einsum("btd,dkq->btkq", y, p["wk"]), batch, None, kv_axis, None), "k")
        vh = name(constrain(jnp.einsum("btd,dkq->btkq", y, p["wv"]), batch, None, kv_axis, None), "v")
        o = name(attention(qh, kh, vh), "attn_out")
        return name(jnp.einsum("bthq,hqd->btd", o, p["wo"]), "out_proj")

    def layer(x, p):
        p = {k: (w.astype(compute) if k.startswith("w") else w) for k, w in p.items()}
        y = name(rms_norm(x, p["norm1"]), "norm1_out")
        if m.parallel_block:
            x = x + attn_block(y, p) + ffn(y, p)
        else:
            x = name(constrain(x + attn_block(y, p), batch, None, "tensor"), "mid")
            y = name(rms_norm(x, p["norm2"]), "norm2_out")
            x = x + ffn(y, p)
        return constrain(x, batch, None, "tensor")

    body = layer
    cp = jax.checkpoint_policies
    policy = {
        "none": cp.everything_saveable,
        "full": cp.nothing_saveable,
        "minimal": cp.checkpoint_dots_with_no_batch_dims,
        "selective": cp.save_only_these_names(*_SELECTIVE_NAMES),
        **{remat: cp.save_only_these_names(*names) for remat, names in _MAXTEXT_SAVED_NAMES.items()},
    }[tr.remat]
    if tr.remat != "none":
        body = jax.checkpoint(layer, policy=policy, prevent_cse=False)

    def layer_stack(x, layers):
        x, _ = jax.lax.scan(lambda c, p: (body(c, p), None), x, layers)
        return x

    stages, micro = scenario.parallelism.pipeline, tr.microbatches

    def pipeline(x, layers):
        """MaxText's pipeline loop (layers/pipeline.py): ``microbatches + stages - 1`` iterations; in each, every stage
        runs its layers on the microbatch it holds (``vmap`` over the ``stage``-sharded state), then the state shifts
        one stage on (``roll``: a collective permute) and the first stage takes the next microbatch. Each iteration is
        rematerialised as MaxText does it: it saves the stages' inputs (``iteration_input``) and what the remat policy
        saves, for every iteration of the loop (GPipe's memory)."""
        b, t, d = x.shape
        mb = x.reshape(micro, b // micro, t, d)
        state = constrain(jnp.zeros((stages, b // micro, t, d), compute), "stage", batch, None, "tensor")

        def iteration(state, i):
            state = state.at[0].set(jnp.where(i < micro, mb[jnp.minimum(i, micro - 1)], 0).astype(compute))
            state = name(state, "iteration_input")
            state = constrain(jax.vmap(layer_stack)(state, layers), "stage", batch, None, "tensor")
            out = state[stages - 1]
            return jnp.roll(state, 1, axis=0), out

        saved = cp.save_from_both_policies(policy, cp.save_only_these_names("iteration_input"))
        iteration = jax.checkpoint(iteration, policy=saved, prevent_cse=False)
        _, outs = jax.lax.scan(iteration, state, jnp.arange(micro + stages - 1))
        return outs[stages - 1 :].reshape(b, t, d)

    # outside the pipeline the batch shards over the stages too (MaxText's activation_embed_and_logits_batch rule)
    outer = ("stage", *batch) if stages > 1 else batch

    def loss_fn(params, tokens, labels):
        layers = {k.split(".", 1)[1]: w for k, w in params.items() if k.startswith("layers.")}
        x = constrain(params["embed"].astype(compute)[tokens], outer, None, "tensor")
        x = constrain(pipeline(x, layers), outer, None, "tensor") if stages > 1 else layer_stack(x, layers)
        y = rms_norm(x, params["final_norm"])
        if m.loss_positions is not None:
            # a masked LM's head reads only its masked positions (BERT's gather_indexes): positions taken from
            # the data, so XLA gathers them as the pre-training program does
            positions = labels[:, : m.loss_positions] % s_len
            y = jnp.take_along_axis(y, positions[..., None], axis=1)
            labels = jnp.take_along_axis(labels, positions, axis=1)
        unembed = params["embed"].T if m.tied_embeddings else params["unembed"]
        logits = constrain(jnp.einsum("btd,dv->btv", y, unembed.astype(compute)).astype(f32), outer, None, "tensor")
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    accumulation = tr.microbatches if stages == 1 else 1  # a pipeline's microbatches are its own
    state, step = train_step(jax, jnp, tr.optimizer, loss_fn, params, sdtype, mesh, microbatches=accumulation)

    rows = ns(outer, None)
    tokens = jax.ShapeDtypeStruct((tr.global_batch, s_len), jnp.int32, sharding=rows)
    count = jax.ShapeDtypeStruct((), f32, sharding=ns())
    fn = jax.jit(step, donate_argnums=(0, 1))
    if kernel != m.attention_kernel:
        notes.append(f"attention {m.attention_kernel!r} compiled as 'standard'")
    return XlaProgram(fn=fn, args=(params, state, tokens, tokens, count), target=target, mesh_axes=axes,
                      devices_per_chip=devices_per_chip(scenario), notes=notes, loss=loss_fn)  # fmt: skip


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

    state, step = train_step(jax, jnp, tr.optimizer, loss_fn, params, sdtype, mesh, microbatches=tr.microbatches)

    x = jax.ShapeDtypeStruct((tr.global_batch, m.layer_sizes[0]), compute, sharding=ns(batch, None))
    labels = jax.ShapeDtypeStruct((tr.global_batch,), jnp.int32, sharding=ns(batch))
    count = jax.ShapeDtypeStruct((), f32, sharding=ns())
    fn = jax.jit(step, donate_argnums=(0, 1))
    return XlaProgram(fn=fn, args=(params, state, x, labels, count), target=target, mesh_axes=axes,
                      devices_per_chip=devices_per_chip(scenario), notes=[], loss=loss_fn)  # fmt: skip


def _mlp_shapes(scenario: Scenario) -> dict[str, tuple[tuple[int, ...], tuple]]:
    """Parameter name -> (shape, partition spec) of an MLP: ``w{i}`` ``[fan_in, fan_out]`` over ``fsdp``, ``b{i}`` replicated."""
    sizes = scenario.model.layer_sizes
    out: dict[str, tuple[tuple[int, ...], tuple]] = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        out[f"w{i}"] = ((fan_in, fan_out), ("fsdp", None))
        out[f"b{i}"] = ((fan_out,), (None,))
    return out


#: the Pallas TPU flash kernel's smallest block along the sequence (jax.experimental.pallas.ops.tpu.flash_attention)
FLASH_BLOCK = 128


def flash_kernel_tiles(seq_len: int) -> bool:
    """Whether the program runs a flash-attention scenario's attention in the Pallas kernel (its sequence
    tiles into the kernel's blocks) rather than as standard attention."""
    return seq_len % FLASH_BLOCK == 0


def kernel_attention(scenario: Scenario) -> bool:
    """Whether the scenario's program computes its attention core inside Pallas kernels: custom calls whose
    FLOPs the compiled module does not count."""
    m = scenario.model
    return m.kind == "transformer" and m.attention_kernel == "flash" and flash_kernel_tiles(m.seq_len)


def _flash_attention(jax, mesh, batch, notes, seq_len, head_dim):
    """The Pallas TPU flash-attention kernel inside ``jax.shard_map`` over the batch and head axes, or
    None (with a note) where this JAX has no such kernel or the shapes do not tile."""
    from jax.sharding import PartitionSpec as P

    try:
        from jax.experimental.pallas.ops.tpu import flash_attention as fa
    except ImportError as e:  # pragma: no cover - depends on the installed JAX
        notes.append(f"Pallas TPU flash attention unavailable ({e})")
        return None
    if not flash_kernel_tiles(seq_len):
        notes.append(f"seq_len {seq_len} is not a multiple of {FLASH_BLOCK}, the flash kernel's block: standard attention")
        return None
    block = flash_block(seq_len)
    sizes = fa.BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1,
                          block_q_major_dkv=block, block_k_major_dkv=block, block_k_dkv=block, block_q_dkv=block,
                          block_k_major_dq=block, block_k_dq=block, block_q_dq=block)  # fmt: skip
    spec = P(batch, "tensor", None, None)
    scale = 1.0 / math.sqrt(head_dim)

    def local(q, k, v):
        return fa.flash_attention(q, k, v, causal=True, sm_scale=scale, block_sizes=sizes)

    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
