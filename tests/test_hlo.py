"""HLO reader: known answers on hand-written modules, XLA's own numbers on real ones, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import HloError, InputError
from engine.hlo import describe_hlo, load_hlo, parse_hlo, parse_replica_groups
from profiler.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
FIXTURE_NAMES = sorted(p.name.removesuffix(".hlo.txt.gz") for p in FIXTURES.glob("*.hlo.txt.gz"))


def cost_of(text: str, **kw):
    return describe_hlo(parse_hlo(text, "snippet.hlo"), **kw)


ADD = "%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n  ROOT %s = f32[] add(%x, %y)\n}\n"


def module(body: str, params: str = "", partitions: int = 8) -> str:
    return f"HloModule m, num_partitions={partitions}\n\n{params}\nENTRY %main ({''}) -> f32[] {{\n{body}\n}}\n"


class TestDot:
    def test_matmul_flops_and_bytes(self):
        c = cost_of(
            module(
                "  %a = f32[4,8]{1,0} parameter(0)\n  %b = f32[8,16]{1,0} parameter(1)\n"
                "  ROOT %d = f32[4,16]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
            )
        )
        assert c.flops_per_device == 2 * 4 * 8 * 16
        assert c.bytes_accessed_per_device == (4 * 8 + 8 * 16 + 4 * 16) * 4
        (op,) = c.ops
        assert (op.dots[0].m, op.dots[0].k, op.dots[0].n, op.dots[0].batch) == (4, 8, 16, 1)
        assert c.parameter_bytes_per_device == (32 + 128) * 4 and c.output_bytes_per_device == 64 * 4

    def test_batch_dims_and_transposed_contraction(self):
        # [2,8,4] contracted on dim 1 with [2,16,8] on dim 2, batch dim 0: 2 x (4x8 @ 8x16)
        c = cost_of(
            module(
                "  %a = bf16[2,8,4] parameter(0)\n  %b = bf16[2,16,8] parameter(1)\n"
                "  ROOT %d = bf16[2,4,16] dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={1}, "
                "rhs_batch_dims={0}, rhs_contracting_dims={2}"
            )
        )
        d = c.ops[0].dots[0]
        assert (d.batch, d.m, d.k, d.n, d.dtype) == (2, 4, 8, 16, "bf16")
        assert c.flops_per_device == 2 * 2 * 4 * 8 * 16


def test_convolution_counts_window_positions_on_real_input_times_input_features():
    # 3x3 window, padding 1 on an 8x8 image: per axis 8 outputs x 3 taps = 24 pairs, 2 of them on padding -> 22
    c = cost_of(
        module(
            "  %x = f32[1,8,8,3] parameter(0)\n  %w = f32[3,3,3,16] parameter(1)\n"
            "  ROOT %c = f32[1,8,8,16] convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"
        )
    )
    assert c.flops_per_device == 2 * 3 * 16 * 22 * 22
    d = c.ops[0].dots[0]
    assert (d.m, d.n) == (64, 16)
    assert d.k == round(3 * 22 * 22 / 64)


def test_convolution_as_batched_matmul_counts_only_undilated_taps():
    # XLA:TPU's batched matmul as a convolution: batch 4 as a window of 4 over an lhs dilated by 4, so each
    # output position meets exactly one real input: 4 x [8, 16] x [16, 32] -> 2 * 4 * 8 * 16 * 32 FLOPs
    c = cost_of(
        module(
            "  %x = bf16[4,8,16] parameter(0)\n  %w = bf16[4,16,32] parameter(1)\n"
            "  ROOT %c = bf16[4,8,32] convolution(%x, %w), window={size=4 stride=1 pad=0_0 lhs_dilate=4 rhs_reversal=0},"
            " dim_labels=0bf_0io->0bf, feature_group_count=1"
        )
    )
    assert c.flops_per_device == 2 * 4 * 8 * 16 * 32


def test_reduce_window_over_a_whole_padded_row_counts_the_row_once():
    # a running max whose every window covers the row (softmax's max as XLA:TPU writes it) is one reduce per row
    c = cost_of(
        module(
            "  %x = f32[16,256] parameter(0)\n  %z = f32[] constant(0)\n"
            "  ROOT %r = f32[16,256] reduce-window(%x, %z), window={size=1x511 pad=0_0x255_255}, to_apply=%add",
            params=ADD,
        )
    )
    assert c.flops_per_device == 16 * 256 - 16
    valid = cost_of(
        module(
            "  %x = f32[16,256] parameter(0)\n  %z = f32[] constant(0)\n"
            "  ROOT %r = f32[16,249] reduce-window(%x, %z), window={size=1x8}, to_apply=%add",
            params=ADD,
        )
    )
    assert valid.flops_per_device == 16 * 249 * 7


def test_fusion_costs_fused_flops_and_boundary_bytes():
    text = (
        "HloModule m, num_partitions=1\n\n"
        "%fused (p0: f32[4,8], p1: f32[8,16]) -> f32[4,16] {\n"
        "  %p0 = f32[4,8] parameter(0)\n  %p1 = f32[8,16] parameter(1)\n"
        "  %d = f32[4,16] dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  %e = f32[4,16] exponential(%d)\n"
        "  ROOT %m = f32[4,16] multiply(%d, %e)\n}\n\n"
        "ENTRY %main (a: f32[4,8], b: f32[8,16]) -> f32[4,16] {\n"
        "  %a = f32[4,8] parameter(0)\n  %b = f32[8,16] parameter(1)\n"
        "  ROOT %f = f32[4,16] fusion(%a, %b), kind=kOutput, calls=%fused\n}\n"
    )
    c = cost_of(text)
    assert c.flops_per_device == 2 * 4 * 8 * 16 + 4 * 16  # the dot + one multiply per element
    assert c.transcendentals_per_device == 4 * 16
    # the intermediate dot result never leaves the fused kernel: only operands and result count
    assert c.bytes_accessed_per_device == (32 + 128 + 64) * 4
    assert [o.opcode for o in c.ops] == ["fusion"]


COLLECTIVES = """HloModule c, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%rs_body (q: f32[64]) -> f32[16] {
  %q = f32[64] parameter(0)
  ROOT %rs2 = f32[16] reduce-scatter(%q), replica_groups=[2,4]<=[8], dimensions={0}, to_apply=%add
}

ENTRY %main (p: f32[64]) -> f32[64] {
  %p = f32[64] parameter(0)
  %ar = f32[64] all-reduce(%p), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  %ag-start = (f32[64], f32[256]) all-gather-start(%ar), replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}
  %ag-done = f32[256] all-gather-done(%ag-start)
  %rs = f32[16] reduce-scatter(%p), replica_groups=mesh['a'=2,'b'=4] {'b'}, dimensions={0}, to_apply=%add
  %a2a = f32[64] all-to-all(%p), replica_groups=mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'a'}, dimensions={0}
  %cp-start = (f32[64], f32[64], u32[], u32[]) collective-permute-start(%p), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %cp-done = f32[64] collective-permute-done(%cp-start)
  %as = ((f32[64]), f32[16]) async-start(%p), calls=%rs_body
  %ad = f32[16] async-done(%as), calls=%rs_body
  ROOT %out = f32[64] add(%ar, %cp-done)
}
"""


class TestCollectives:
    def test_each_op_counted_once_with_its_bytes(self):
        c = cost_of(COLLECTIVES)
        totals = c.collective_totals()
        assert totals == {
            "all-reduce": {"count": 1, "bytes": 256.0},
            "all-gather": {"count": 1, "bytes": 4 * 256.0},  # the gathered array, 4 devices x 64 floats
            "reduce-scatter": {"count": 2, "bytes": 2 * 256.0},  # one plain, one inside async-start
            "all-to-all": {"count": 1, "bytes": 256.0},
            "collective-permute": {"count": 1, "bytes": 256.0},
        }

    def test_groups_from_every_form(self):
        by_name = {op.name: op for op in cost_of(COLLECTIVES).collectives}
        assert by_name["ar"].groups.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert by_name["ag-start"].groups.tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
        assert by_name["rs"].groups.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
        # device_ids [4,2]T(1,0) lays ids 0,2,4,6 | 1,3,5,7 on the 2x4 mesh; groups run along 'a'
        assert by_name["a2a"].groups.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
        assert by_name["cp-start"].groups.tolist() == [[0, 1], [1, 2], [2, 3], [3, 0]]
        assert by_name["as"].group_size == 4 and by_name["as"].asynchronous  # the async-start that wraps rs2


class TestReplicaGroups:
    def test_empty_means_all_devices(self):
        assert parse_replica_groups("{}", 4).tolist() == [[0, 1, 2, 3]]

    def test_iota_plain(self):
        assert parse_replica_groups("[4,2]<=[8]", 8).tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]

    def test_mesh_sub_axis(self):
        # 'a':(2)2 is the middle factor of a = 8 read as (2, 2, 2): index = 4*hi + 2*mid + lo
        assert parse_replica_groups("mesh['a'=8] {'a':(2)2}", 8).tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]

    def test_mesh_two_axes_order(self):
        g = parse_replica_groups("mesh['x'=2,'y'=2,'z'=2] {'x','z'}", 8)
        assert g.tolist() == [[0, 1, 4, 5], [2, 3, 6, 7]]

    @pytest.mark.parametrize("bad", ["{{0,1},{2}}", "[2,4]<=[6]", "{{0,9}}", "mesh['a'=8] {'b'}", "banana"])
    def test_malformed_is_an_hlo_error(self, bad):
        with pytest.raises(HloError):
            parse_replica_groups(bad, 8)


WHILE = """HloModule w, num_partitions=1

%body (s: (s32[], f32[8,8])) -> (s32[], f32[8,8]) {
  %s = (s32[], f32[8,8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[8,8] get-tuple-element(%s), index=1
  %d = f32[8,8] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[8,8]) tuple(%i, %d)
}

%cond (c: (s32[], f32[8,8])) -> pred[] {
  %c = (s32[], f32[8,8]) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%ci, %n), direction=LT
}

ENTRY %main (p: (s32[], f32[8,8])) -> (s32[], f32[8,8]) {
  %p = (s32[], f32[8,8]) parameter(0)
  ROOT %w = (s32[], f32[8,8]) while(%p), condition=%cond, body=%body, BACKEND
}
"""


class TestWhile:
    def test_known_trip_count_multiplies_the_body(self):
        c = cost_of(WHILE.replace("BACKEND", 'backend_config={"known_trip_count":{"n":"5"}}'))
        assert c.flops_per_device == 5 * 2 * 8**3
        assert c.while_loops == {"w": 5} and c.unknown_trip_counts == ()
        assert c.ops[0].executions == 5

    def test_xla_convention_counts_the_body_once(self):
        c = cost_of(WHILE.replace("BACKEND", 'backend_config={"known_trip_count":{"n":"5"}}'), count_trip_counts=False)
        assert c.flops_per_device == 2 * 8**3

    def test_unknown_trip_count_is_said(self):
        c = cost_of(WHILE.replace(", BACKEND", ""))
        assert c.unknown_trip_counts == ("w",)
        assert c.flops_per_device == 2 * 8**3


def test_unknown_opcode_is_kept_costed_and_listed():
    c = cost_of(
        module(
            "  %a = f32[16] parameter(0)\n  %b = f32[16] frobnicate(%a)\n"
            '  %cc = f32[16] custom-call(%b), custom_call_target="MyKernel"\n  ROOT %r = f32[16] add(%b, %cc)'
        )
    )
    assert c.unknown_ops == {"custom-call:MyKernel": 1, "frobnicate": 1}
    assert c.flops_per_device == 16 * 3  # one per output element each, + the add
    assert [o.opcode for o in c.ops] == ["frobnicate", "custom-call", "add"]


# -- real modules: XLA's own cost_analysis -----------------------------------------------------


def xla_numbers(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.cpu.json").read_text())


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_flops_agree_with_xla_cost_analysis(name):
    """XLA counts every while body once; so does ``count_trip_counts=False``."""
    xla = xla_numbers(name)["xla_cost_analysis"]
    c = load_hlo(FIXTURES / f"{name}.hlo.txt.gz", count_trip_counts=False)
    assert c.devices == xla_numbers(name)["devices"]
    assert c.flops_per_device == pytest.approx(xla["flops"], rel=0.05)
    assert c.transcendentals_per_device == pytest.approx(xla.get("transcendentals", 0.0), rel=0.05, abs=1)
    assert c.bytes_accessed_per_device == pytest.approx(xla["bytes accessed"], rel=0.10)


def test_scan_with_trip_counts_matches_the_unrolled_program():
    """The same transformer with its layers in a lax.scan: trips counted, it costs what the unrolled one does."""
    scan = load_hlo(FIXTURES / "transformer_scan_dp8.hlo.txt.gz")
    assert set(scan.while_loops.values()) == {2} and not scan.unknown_trip_counts
    unrolled_xla = xla_numbers("transformer_dp8")["xla_cost_analysis"]["flops"]
    assert scan.flops_per_device == pytest.approx(unrolled_xla, rel=0.05)
    assert scan.dot_flops_per_device == pytest.approx(
        load_hlo(FIXTURES / "transformer_dp8.hlo.txt.gz").dot_flops_per_device, rel=1e-9
    )


def test_data_parallel_mlp_all_reduces_its_gradients_once():
    c = load_hlo(FIXTURES / "mlp_dp8.hlo.txt.gz")
    sizes = [784, 1024, 1024, 10]
    grad_bytes = 4 * sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    (ar,) = c.collectives
    assert (ar.op, ar.bytes, ar.groups.tolist()) == ("all-reduce", grad_bytes, [list(range(8))])
    # 2 x 128 rows (per-device batch) x weights, three products per layer (forward, input and
    # weight gradients), less the first layer's input gradient, which nothing needs
    weights = [a * b for a, b in zip(sizes[:-1], sizes[1:])]
    assert c.dot_flops_per_device == 2 * 128 * (3 * sum(weights) - weights[0])


def test_fsdp_tp_module_groups_follow_its_mesh():
    c = load_hlo(FIXTURES / "transformer_fsdp_tp16.hlo.txt.gz")
    totals = c.collective_totals()
    assert {"all-reduce", "all-gather", "all-to-all", "collective-permute"} <= set(totals)
    sizes = {op.group_size for op in c.collectives if op.op != "collective-permute"}
    assert sizes <= {4, 16}
    contiguous = [list(range(i, i + 4)) for i in range(0, 16, 4)]
    strided = [list(range(i, 16, 4)) for i in range(4)]
    for op in c.collectives:
        if op.op != "collective-permute" and op.group_size == 4:
            assert op.groups.tolist() in (contiguous, strided), op.name


# -- bad input -----------------------------------------------------------------------------------


def test_not_hlo(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("# just notes\n")
    with pytest.raises(HloError, match=r"notes.txt: not HLO text.*HloModule"):
        load_hlo(p)


def test_truncated_module(tmp_path):
    text = gzip.decompress((FIXTURES / "mlp_dp8.hlo.txt.gz").read_bytes()).decode()
    p = tmp_path / "cut.hlo.txt"
    p.write_text(text[: len(text) // 2])
    with pytest.raises(HloError, match=r"cut.hlo.txt: (truncated|line \d+)"):
        load_hlo(p)


def test_truncated_gzip(tmp_path):
    data = (FIXTURES / "mlp_dp8.hlo.txt.gz").read_bytes()
    p = tmp_path / "cut.hlo.txt.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(HloError, match=r"cut.hlo.txt.gz: not a readable gzip file"):
        load_hlo(p)


def test_over_the_size_limit(tmp_path):
    with pytest.raises(HloError, match=r"larger than the limit of 0 MiB"):
        load_hlo(FIXTURES / "mlp_dp8.hlo.txt.gz", max_bytes=1000)


def test_undefined_operand(tmp_path):
    with pytest.raises(HloError, match=r"line \d+: r uses 'nope'"):
        cost_of(module("  %a = f32[4] parameter(0)\n  ROOT %r = f32[4] add(%a, %nope)"))


def test_hlo_error_is_an_input_error():
    assert issubclass(HloError, InputError)


class TestCli:
    def test_json_keys(self, capsys):
        assert main(["hlo", str(FIXTURES / "mlp_dp8.hlo.txt.gz"), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        for key in ("devices", "flops_per_device", "bytes_accessed_per_device", "collectives",
                    "parameter_bytes_per_device", "output_bytes_per_device", "largest_ops"):  # fmt: skip
            assert key in out
        assert out["devices"] == 8
        assert out["collectives"] == {"all-reduce": {"count": 1, "bytes": 7454760.0}}
        assert out["flops_per_device"] == pytest.approx(xla_numbers("mlp_dp8")["xla_cost_analysis"]["flops"], rel=0.05)
        assert out["largest_ops"][0]["flops"] >= out["largest_ops"][-1]["flops"]

    def test_text(self, capsys):
        assert main(["hlo", str(FIXTURES / "transformer_scan_dp8.hlo.txt.gz")]) == 0
        out = capsys.readouterr().out
        assert "8 devices" in out and "all-reduce" in out and "2 trips" in out

    def test_bad_input_exits_2(self, tmp_path, capsys):
        p = tmp_path / "x.hlo"
        p.write_bytes(b"\x00\x01garbage")
        assert main(["hlo", str(p)]) == 2
        assert "x.hlo: not HLO text" in capsys.readouterr().err


def test_groups_are_int_arrays():
    c = cost_of(COLLECTIVES)
    assert all(op.groups.dtype == np.int64 for op in c.collectives)


class TestSplitting:
    def test_quotes_and_escapes(self):
        from engine.hlo.text import split_top_level

        text = 'a=1, b="x,\\"y", c={1,2}, d=(3,4), e="p\\n,q"'
        assert split_top_level(text) == ["a=1", 'b="x,\\"y"', "c={1,2}", "d=(3,4)", 'e="p\\n,q"']

    def test_tuple_shape_with_index_comments(self):
        from engine.hlo.text import parse_shape

        s = parse_shape("(f32[2,3]{1,0}, /*index=1*/bf16[4]{0}, (s32[], pred[2]))")
        assert [(e.dtype, e.dims) for e in s.elements] == [("f32", (2, 3)), ("bf16", (4,)), ("s32", ()), ("pred", (2,))]
        assert s.bytes == 24 + 8 + 4 + 2


TPU_STYLE = """HloModule jit_train_step, is_scheduled=true, entry_computation_layout={(bf16[8,128]{1,0:T(8,128)(2,1)})->bf16[8,256]{1,0}}, num_partitions=4

fused_computation.1 {
  param_0.1 = bf16[8,128]{1,0:T(8,128)(2,1)} parameter(0)
  param_1.2 = bf16[128,256]{1,0:T(8,128)(2,1)S(1)} parameter(1)
  ROOT convolution.3 = bf16[8,256]{1,0:T(8,128)(2,1)} convolution(param_0.1, param_1.2), dim_labels=bf_io->bf, frontend_attributes={_xla_stream_annotation="1"}
}

add.7 {
  x = bf16[] parameter(0)
  y = bf16[] parameter(1)
  ROOT a = bf16[] add(x, y)
}

ENTRY main.9 {
  p0 = bf16[8,128]{1,0:T(8,128)(2,1)} parameter(0), sharding={devices=[4,1]<=[4]}
  w = bf16[128,256]{1,0:T(8,128)(2,1)} constant({...})
  fusion.1 = bf16[8,256]{1,0:T(8,128)(2,1)} fusion(p0, w), kind=kOutput, calls=fused_computation.1, backend_config={"flag_configs":[],"scoped_memory_configs":[]}
  all-reduce-start.2 = bf16[8,256]{1,0:T(8,128)(2,1)} all-reduce-start(fusion.1), channel_id=3, replica_groups=[1,4]<=[4], use_global_device_ids=true, to_apply=add.7, backend_config={"collective_backend_config":{"is_sync":false}}
  ROOT all-reduce-done.2 = bf16[8,256]{1,0:T(8,128)(2,1)} all-reduce-done(all-reduce-start.2)
}
"""


def test_tpu_style_text_without_percent_signs():
    """TPU dumps print names without '%', tiled layouts, memory spaces and headers without signatures."""
    c = cost_of(TPU_STYLE)
    assert c.devices == 4
    # a dot written as a 1x1 convolution (bf_io->bf), plus the all-reduce's one add per element
    assert c.flops_per_device == 2 * 8 * 128 * 256 + 8 * 256
    assert c.collective_totals() == {"all-reduce": {"count": 1, "bytes": 8 * 256 * 2}}


class TestTpuLayouts:
    def test_tile_padding_of_a_small_f32_array(self):
        from engine.hlo.text import parse_shape

        s = parse_shape("f32[3,5]{1,0:T(8,128)}")
        assert s.bytes == 60
        assert s.padded_bytes == 8 * 128 * 4  # one whole 8 x 128 tile
        assert s.layout.tiles == ((8, 128),)

    def test_tiles_follow_the_physical_order(self):
        from engine.hlo.text import parse_shape

        # {0,1}: dimension 0 is minor, so the 8 x 128 tile covers (dim 1, dim 0) = (130 -> 136, 3 -> 128)
        assert parse_shape("f32[3,130]{0,1:T(8,128)}").padded_bytes == 136 * 128 * 4
        assert parse_shape("f32[3,130]{1,0:T(8,128)}").padded_bytes == 8 * 256 * 4

    def test_bf16_sub_tiles_and_scalars(self):
        from engine.hlo.text import parse_shape

        assert parse_shape("bf16[4096,4096]{1,0:T(8,128)(2,1)}").padded_bytes == 4096 * 4096 * 2
        assert parse_shape("s32[]{:T(128)}").padded_bytes == 128 * 4
        vmem = parse_shape("bf16[8,128]{1,0:T(8,128)(2,1)S(1)}")
        assert vmem.layout.memory_space == 1

    def test_an_array_larger_than_any_chip_is_refused(self):
        with pytest.raises(HloError, match="limit of 1 TiB"):
            cost_of(module("  ROOT %p = f32[99999999999,99999999999] parameter(0)"))

    def test_op_bytes_are_in_tiles(self):
        c = cost_of(module("  %a = f32[3,5]{1,0:T(8,128)} parameter(0)\n  ROOT %e = f32[3,5]{1,0:T(8,128)} exponential(%a)"))
        assert c.ops[0].bytes_accessed == 2 * 4096
        assert c.padded_parameter_bytes_per_device == 4096 and c.parameter_bytes_per_device == 60


COUNTED_LOOP = """HloModule m, num_partitions=1, is_scheduled=true

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(12)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %one = s32[] constant(STEP)
  %next = s32[] add(%i, %one)
  %x = f32[8] get-tuple-element(%b), index=1
  %y = f32[8] multiply(%x, %x)
  ROOT %t = (s32[], f32[8]) tuple(%next, %y)
}

ENTRY %main (p: f32[8]) -> (s32[], f32[8]) {
  %p = f32[8] parameter(0)
  %zero = s32[] constant(INIT)
  %z = s32[] copy(%zero)
  %init = (s32[], f32[8]) tuple(%z, %p)
  ROOT %w = (s32[], f32[8]) while(%init), condition=%cond, body=%body
}
"""


class TestLoopTripsFromTheCondition:
    @pytest.mark.parametrize(("init", "step", "trips"), [(0, 1, 12), (2, 1, 10), (0, 5, 3)])
    def test_counter_limit_and_step(self, init, step, trips):
        c = cost_of(COUNTED_LOOP.replace("INIT", str(init)).replace("STEP", str(step)))
        assert c.while_loops == {"w": trips} and c.unknown_trip_counts == ()
        assert c.flops_per_device == trips * (8 + 1)  # the multiply and the counter's add, every trip

    def test_a_loop_it_cannot_count_is_counted_once_and_listed(self):
        c = cost_of(COUNTED_LOOP.replace("INIT", "0").replace("STEP", "1").replace("direction=LT", "direction=EQ"))
        assert c.unknown_trip_counts == ("w",)
        assert c.flops_per_device == 8 + 1

    def test_a_trip_count_beyond_the_limit_is_refused(self):
        big = COUNTED_LOOP.replace("INIT", "0").replace("STEP", "1").replace("constant(12)", "constant(99999999999)")
        with pytest.raises(HloError, match="limit of 10,000,000"):
            cost_of(big)
