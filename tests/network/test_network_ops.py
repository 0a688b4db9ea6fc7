"""Every operator and attribute variant, compiled into one module, equals onnxruntime."""
from __future__ import annotations

import pytest

import tensortune.network as nw
from onnx_cases import CASES
from onnx_models import assert_close, ort_run


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_compiled_equals_onnxruntime(case):
    m, feeds = case.build()
    expected = ort_run(m, feeds)
    module = nw.compile(m)
    got = module.run(feeds)
    assert list(got) == [o.name for o in m.graph.output]
    for (name, actual), exp in zip(got.items(), expected):
        assert_close(actual, exp, name)
