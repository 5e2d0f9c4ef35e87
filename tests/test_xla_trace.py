"""The JAX / TensorFlow / XProf trace rules, on the events the real profilers wrote."""

from __future__ import annotations

import pytest

from profiler.xla_trace import event_hints, keras_step_markers, xla_kind


class TestEventHints:
    def test_step_annotation(self):
        assert event_hints({"step_num": "3"}) == (3, -1, False)  # jax writes the number as a string

    def test_xla_op_on_a_cpu_device(self):
        assert event_hints({"device_ordinal": "4", "hlo_op": "all-reduce.6", "hlo_module": "jit_step"}) == (-1, 4, True)

    def test_tensorflow_host_xla_op(self):
        assert event_hints({"device_ordinal": "-1", "hlo_op": "MatMul.14"}) == (-1, -1, True)

    @pytest.mark.parametrize("args", [None, [], {"step_num": "x"}, {"step_num": True}, {"device_ordinal": 1.5}])
    def test_malformed_is_absent(self, args):
        assert event_hints(args)[:2] == (-1, -1)


class TestKinds:
    @pytest.mark.parametrize(
        ("name", "thread", "hlo_op", "kind"),
        [
            ("ynn_fusion.2", "tf_XLAEigen/7580", True, "compute"),
            ("all-reduce.6", "tf_XLAEigen/1643", True, "collective"),
            ("Wait for rendezvous callback", "tf_XLAEigen/1643", False, "collective"),
            ("Wait: pending_threads=2/8", "tf_XLAEigen/1643", False, "collective"),
            ("IteratorGetNextOp::DoCompute", "tf_data_iterator_get_next/77", False, "input_wait"),
            ("Iterator::Shuffle", "tf_data_iterator_resource/-86", False, "other"),
            ("EagerPyFunc", "tf_data_private_threadpool/48", False, "other"),
            ("ThreadpoolListener::Region", "tf_Compute/13", False, None),
        ],
    )
    def test_rules(self, name, thread, hlo_op, kind):
        assert xla_kind(name, thread, hlo_op) == kind


def test_keras_steps_by_call_order():
    names = ["multi_step_on_iterator", "EagerExecute", "multi_step_on_iterator", "multi_step_on_iterator"]
    threads = ["python", "python", "python", "tf_Compute"]
    assert keras_step_markers(names, threads, [20.0, 21.0, 5.0, 1.0]).tolist() == [1, -1, 0, -1]
