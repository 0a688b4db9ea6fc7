"""One small ONNX model per operator and attribute variant the importer supports, with inputs: the cases that
``test_onnx_ops.py`` (reference interpreter) and ``test_network_ops.py`` (compiled module) run against
onnxruntime."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_models import model, node, rand


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]


CASES: list[Case] = []


def case(id: str):
    def wrap(fn):
        CASES.append(Case(id, fn))
        return fn
    return wrap


X = (1, 8, 9, 9)  # the default NCHW input: small, odd spatial size to exercise edges


def _unary(op_type: str, opset: int = 13, shape=X, **attrs):
    def build():
        m = model([node(op_type, ["x"], ["y"], **attrs)], {"x": shape}, ["y"], opset=opset)
        return m, {"x": rand(shape, 1, -4, 4)}
    return build


# ------------------------------------------------------------------------------------------- convolutions

def _conv(c=8, o=16, k=3, bias=True, opset=13, shape=None, weight_as_constant=False, **attrs):
    def build():
        s = shape or (1, c, 9, 9)
        groups = attrs.get("group", 1)
        kh, kw = (k, k) if isinstance(k, int) else k
        w = rand((o, c // groups, kh, kw), 2)
        inits = {"b": rand((o,), 3)} if bias else {}
        nodes = []
        if weight_as_constant:
            nodes.append(helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w_value")))
        else:
            inits["w"] = w
        nodes.append(node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs))
        return model(nodes, {"x": s}, ["y"], inits, opset=opset), {"x": rand(s, 1)}
    return build


case("conv3x3_pad1")(_conv(pads=[1, 1, 1, 1]))
case("conv3x3_stride2")(_conv(pads=[1, 1, 1, 1], strides=[2, 2]))
case("conv_dilation2")(_conv(pads=[2, 2, 2, 2], dilations=[2, 2]))
case("conv_no_bias_1x1")(_conv(k=1, bias=False))
case("conv_asymmetric_pads")(_conv(pads=[0, 1, 2, 1]))
case("conv_rect_kernel")(_conv(k=(1, 3), pads=[0, 1, 0, 1], strides=[1, 2]))
case("conv_groups2")(_conv(c=8, o=8, group=2, pads=[1, 1, 1, 1]))
case("conv_depthwise")(_conv(c=8, o=8, group=8, pads=[1, 1, 1, 1]))
case("conv_depthwise_stride2")(_conv(c=16, o=16, group=16, pads=[1, 1, 1, 1], strides=[2, 2]))
case("conv_depthwise_multiplier2")(_conv(c=4, o=8, group=4, pads=[1, 1, 1, 1]))
case("conv_auto_pad_same_upper")(_conv(k=4, auto_pad="SAME_UPPER", strides=[2, 2]))
case("conv_auto_pad_same_lower")(_conv(k=4, auto_pad="SAME_LOWER", strides=[2, 2]))
case("conv_auto_pad_valid")(_conv(auto_pad="VALID"))
case("conv_rgb_input")(_conv(c=3, o=16, k=7, shape=(1, 3, 16, 16), pads=[3, 3, 3, 3], strides=[2, 2]))
case("conv_odd_channels")(_conv(c=5, o=12, pads=[1, 1, 1, 1]))
case("conv_batch2")(_conv(shape=(2, 8, 7, 7), pads=[1, 1, 1, 1]))
case("conv_weight_constant_node")(_conv(pads=[1, 1, 1, 1], weight_as_constant=True))
case("conv_opset7")(_conv(pads=[1, 1, 1, 1], opset=7))


@case("batchnorm")
def _bn():
    c = X[1]
    inits = {"s": rand((c,), 2), "b": rand((c,), 3), "m": rand((c,), 4), "v": rand((c,), 5, 0.5, 2)}
    return model([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)], {"x": X}, ["y"],
                 inits), {"x": rand(X, 1)}


@case("batchnorm_opset7_spatial")
def _bn7():
    c = X[1]
    inits = {"s": rand((c,), 2), "b": rand((c,), 3), "m": rand((c,), 4), "v": rand((c,), 5, 0.5, 2)}
    return model([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=1)], {"x": X}, ["y"],
                 inits, opset=7), {"x": rand(X, 1)}


# ------------------------------------------------------------------------------------------- activations

case("relu")(_unary("Relu"))
case("sigmoid")(_unary("Sigmoid"))
case("tanh")(_unary("Tanh"))
case("hard_swish")(_unary("HardSwish", opset=14))
case("hard_sigmoid")(_unary("HardSigmoid", alpha=0.3, beta=0.4))
case("leaky_relu")(_unary("LeakyRelu", alpha=0.2))
case("leaky_relu_default")(_unary("LeakyRelu"))
case("clip_attrs_opset7")(_unary("Clip", opset=7, min=0.0, max=6.0))
case("relu_2d")(_unary("Relu", shape=(3, 10)))


def _clip_inputs(lo, hi, opset=13):
    def build():
        names = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
        while names[-1] == "":
            names.pop()
        inits = {k: np.float32(v) for k, v in (("lo", lo), ("hi", hi)) if v is not None}
        return model([node("Clip", names, ["y"])], {"x": X}, ["y"], inits, opset=opset), {"x": rand(X, 1, -8, 8)}
    return build


case("clip_relu6_inputs")(_clip_inputs(0.0, 6.0))
case("clip_only_max")(_clip_inputs(None, 1.5, opset=11))
case("clip_only_min")(_clip_inputs(-0.5, None))


@case("prelu")
def _prelu():
    return model([node("PRelu", ["x", "slope"], ["y"])], {"x": X}, ["y"], {"slope": rand((X[1], 1, 1), 2)}), \
        {"x": rand(X, 1)}


# ------------------------------------------------------------------------------------------- binary

def _binary(op_type, b_shape, b_const=True, opset=13):
    def build():
        inputs = {"a": X} | ({} if b_const else {"b": b_shape})
        inits = {"b": rand(b_shape, 2, 0.5, 2)} if b_const else {}
        feeds = {"a": rand(X, 1)} | ({} if b_const else {"b": rand(b_shape, 3, 0.5, 2)})
        return model([node(op_type, ["a", "b"], ["y"])], inputs, ["y"], inits, opset=opset), feeds
    return build


case("add_same_shape")(_binary("Add", X, b_const=False))
case("add_channel_const")(_binary("Add", (1, X[1], 1, 1)))
case("sub_scalar")(_binary("Sub", ()))
case("mul_row_broadcast")(_binary("Mul", (X[3],), b_const=False))
case("div_channel")(_binary("Div", (X[1], 1, 1)))
case("add_opset7")(_binary("Add", (1, X[1], 1, 1), opset=7))


@case("sub_const_left")
def _sub_left():
    return model([node("Sub", ["b", "a"], ["y"])], {"a": X}, ["y"], {"b": rand((1, X[1], 1, 1), 2)}), \
        {"a": rand(X, 1)}


@case("add_broadcast_both")
def _add_both():
    return model([node("Add", ["a", "b"], ["y"])], {"a": (1, 4, 1, 6), "b": (1, 1, 5, 1)}, ["y"]), \
        {"a": rand((1, 4, 1, 6), 1), "b": rand((1, 1, 5, 1), 2)}


@case("sum_three")
def _sum3():
    return model([node("Sum", ["a", "b", "c"], ["y"])], {"a": X, "b": X}, ["y"], {"c": rand((X[1], 1, 1), 5)}), \
        {"a": rand(X, 1), "b": rand(X, 2)}


# ------------------------------------------------------------------------------------------- pooling

def _pool(op_type, opset=13, shape=X, **attrs):
    def build():
        return model([node(op_type, ["x"], ["y"], **attrs)], {"x": shape}, ["y"], opset=opset), {"x": rand(shape, 1)}
    return build


case("maxpool_3x3_s2_pad1")(_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
case("maxpool_2x2")(_pool("MaxPool", kernel_shape=[2, 2], strides=[2, 2]))
case("maxpool_ceil")(_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, shape=(1, 8, 10, 10)))
case("maxpool_dilation")(_pool("MaxPool", kernel_shape=[2, 2], dilations=[2, 2]))
case("maxpool_same_upper")(_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"))
case("maxpool_opset8")(_pool("MaxPool", opset=8, kernel_shape=[3, 3], strides=[2, 2]))
case("avgpool_pad_exclude")(_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
case("avgpool_pad_include")(_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                  count_include_pad=1))
case("avgpool_ceil")(_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, shape=(1, 8, 10, 10)))
case("avgpool_ceil_pad_include")(_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                       ceil_mode=1, count_include_pad=1, shape=(1, 8, 10, 10)))
case("global_avgpool")(_pool("GlobalAveragePool"))
case("global_maxpool")(_pool("GlobalMaxPool"))
case("global_avgpool_odd_channels")(_pool("GlobalAveragePool", shape=(2, 5, 6, 7)))


@case("lrn")
def _lrn():
    shape = (1, 16, 6, 6)
    return model([node("LRN", ["x"], ["y"], size=5, alpha=1e-3, beta=0.75, bias=2.0)], {"x": shape}, ["y"]), \
        {"x": rand(shape, 1, -3, 3)}


# ------------------------------------------------------------------------------------------- matrices

def _gemm(trans_a=0, trans_b=1, alpha=1.0, beta=1.0, c_shape=(10,), c=True, opset=13):
    def build():
        m_, k_, n_ = 3, 12, 10
        a_shape = (k_, m_) if trans_a else (m_, k_)
        b = rand((n_, k_) if trans_b else (k_, n_), 2)
        inits = {"B": b} | ({"C": rand(c_shape, 3)} if c else {})
        nd = node("Gemm", ["A", "B"] + (["C"] if c else []), ["y"], transA=trans_a, transB=trans_b, alpha=alpha,
                  beta=beta)
        return model([nd], {"A": a_shape}, ["y"], inits, opset=opset), {"A": rand(a_shape, 1)}
    return build


case("gemm_transB")(_gemm())
case("gemm_no_trans_alpha_beta")(_gemm(trans_b=0, alpha=0.5, beta=2.0))
case("gemm_transA_row_bias")(_gemm(trans_a=1, c_shape=(1, 10)))
case("gemm_full_bias")(_gemm(c_shape=(3, 10)))
case("gemm_scalar_bias_opset7")(_gemm(c_shape=(), opset=7))
case("gemm_no_c_opset11")(_gemm(c=False, opset=11))


@case("matmul_2d_const")
def _mm_const():
    return model([node("MatMul", ["a", "w"], ["y"])], {"a": (4, 12)}, ["y"], {"w": rand((12, 6), 2)}), \
        {"a": rand((4, 12), 1)}


@case("matmul_batched")
def _mm_batched():
    return model([node("MatMul", ["a", "b"], ["y"])], {"a": (2, 3, 4, 5), "b": (2, 1, 5, 6)}, ["y"]), \
        {"a": rand((2, 3, 4, 5), 1), "b": rand((2, 1, 5, 6), 2)}


@case("softmax_opset13")
def _softmax13():
    return model([node("Softmax", ["x"], ["y"], axis=1)], {"x": (2, 5, 3)}, ["y"]), {"x": rand((2, 5, 3), 1, -3, 3)}


@case("softmax_opset11_coerced")
def _softmax11():
    return model([node("Softmax", ["x"], ["y"])], {"x": (2, 5, 3)}, ["y"], opset=11), \
        {"x": rand((2, 5, 3), 1, -3, 3)}


@case("softmax_last_axis")
def _softmax_last():
    return model([node("Softmax", ["x"], ["y"])], {"x": (2, 1000)}, ["y"]), {"x": rand((2, 1000), 1, -9, 9)}


# ------------------------------------------------------------------------------------------- shapes

def _shape_op(nodes, inputs, inits=None, opset=13, shape=X):
    def build():
        return model(nodes, {"x": shape}, ["y"], inits, opset=opset), {"x": rand(shape, 1)}
    return build


case("flatten")(_shape_op([node("Flatten", ["x"], ["y"])], None))
case("flatten_axis2")(_shape_op([node("Flatten", ["x"], ["y"], axis=2)], None))
case("reshape_zero_minus_one")(_shape_op([node("Reshape", ["x", "s"], ["y"])], None,
                                         {"s": np.array([0, -1, 3], np.int64)}))
case("transpose")(_shape_op([node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], None))
case("transpose_default_perm")(_shape_op([node("Transpose", ["x"], ["y"])], None))
case("squeeze_unsqueeze_opset11")(_shape_op(
    [node("Unsqueeze", ["x"], ["u"], axes=[0, 3]), node("Squeeze", ["u"], ["y"], axes=[0])], None, opset=11))
case("squeeze_unsqueeze_opset13")(_shape_op(
    [node("Unsqueeze", ["x", "ax"], ["u"]), node("Squeeze", ["u", "ax0"], ["y"])], None,
    {"ax": np.array([0, -1], np.int64), "ax0": np.array([0], np.int64)}))
case("squeeze_all_ones")(_shape_op([node("Squeeze", ["x"], ["y"])], None, shape=(1, 8, 1, 5)))
case("identity")(_shape_op([node("Identity", ["x"], ["t"]), node("Relu", ["t"], ["y"])], None))
case("dropout_opset7")(_shape_op([node("Dropout", ["x"], ["t"], ratio=0.3), node("Relu", ["t"], ["y"])], None,
                                 opset=7))
case("dropout_opset12")(_shape_op([node("Dropout", ["x", "r"], ["t"]), node("Relu", ["t"], ["y"])], None,
                                  {"r": np.float32(0.5)}, opset=12))


@case("concat_channels")
def _concat():
    return model([node("Concat", ["a", "b", "c"], ["y"], axis=1)], {"a": (1, 8, 5, 5), "b": (1, 16, 5, 5)}, ["y"],
                 {"c": rand((1, 4, 5, 5), 3)}), {"a": rand((1, 8, 5, 5), 1), "b": rand((1, 16, 5, 5), 2)}


@case("concat_negative_axis")
def _concat_neg():
    return model([node("Concat", ["a", "b"], ["y"], axis=-1)], {"a": (2, 3), "b": (2, 5)}, ["y"]), \
        {"a": rand((2, 3), 1), "b": rand((2, 5), 2)}


def _split(opset, **attrs):
    def build():
        inits = {}
        ins = ["x"]
        if opset >= 13 and "split" in attrs:
            inits["s"] = np.array(attrs.pop("split"), np.int64)
            ins.append("s")
        nodes = [node("Split", ins, ["p", "q"], axis=1, **attrs), node("Sub", ["p", "q"], ["y"])]
        return model(nodes, {"x": (1, 8, 4, 4)}, ["y"], inits, opset=opset), {"x": rand((1, 8, 4, 4), 1)}
    return build


case("split_equal_opset11")(_split(11))
case("split_sizes_attr_opset11")(_split(11, split=[4, 4]))
case("split_sizes_input_opset13")(_split(13, split=[4, 4]))
case("split_num_outputs_opset18")(_split(18, num_outputs=2))


@case("split_uneven")
def _split_uneven():
    nodes = [node("Split", ["x", "s"], ["p", "q"], axis=1), node("Relu", ["p"], ["y"]), node("Relu", ["q"], ["z"])]
    m = model(nodes, {"x": (1, 8, 4, 4)}, ["y", "z"], {"s": np.array([3, 5], np.int64)})
    return m, {"x": rand((1, 8, 4, 4), 1)}


@case("slice_opset9_attrs")
def _slice9():
    return model([node("Slice", ["x"], ["y"], starts=[1, -4], ends=[7, 1000], axes=[1, 3])], {"x": X}, ["y"],
                 opset=9), {"x": rand(X, 1)}


@case("slice_steps_negative")
def _slice_steps():
    inits = {"st": np.array([7, 0], np.int64), "en": np.array([-100, 9], np.int64), "ax": np.array([1, 2], np.int64),
             "sp": np.array([-2, 3], np.int64)}
    return model([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": X}, ["y"], inits), {"x": rand(X, 1)}


def _pad(mode, opset=13):
    def build():
        pads = [0, 0, 1, 2, 0, 0, 2, 1]
        if opset < 11:
            nd = node("Pad", ["x"], ["y"], mode=mode, pads=pads, value=1.5)
            return model([nd], {"x": X}, ["y"], opset=opset), {"x": rand(X, 1)}
        inits = {"p": np.array(pads, np.int64), "v": np.float32(1.5)}
        nd = node("Pad", ["x", "p"] + (["v"] if mode == "constant" else []), ["y"], mode=mode)
        return model([nd], {"x": X}, ["y"], inits, opset=opset), {"x": rand(X, 1)}
    return build


case("pad_constant")(_pad("constant"))
case("pad_reflect")(_pad("reflect"))
case("pad_edge")(_pad("edge"))
case("pad_constant_opset7")(_pad("constant", opset=7))


# ------------------------------------------------------------------------------------------- constants folded

@case("shape_gather_concat_reshape")
def _shape_chain():
    nodes = [
        node("Shape", ["x"], ["shp"]),
        node("Gather", ["shp", "i0"], ["n"], axis=0),
        node("Unsqueeze", ["n", "ax0"], ["n1"]),
        node("Concat", ["n1", "minus1"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = {"i0": np.array(0, np.int64), "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    return model(nodes, {"x": X}, ["y"], inits), {"x": rand(X, 1)}


@case("constant_of_shape_add")
def _cos():
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25])
    nodes = [helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array(X, np.int64), "s")),
             helper.make_node("ConstantOfShape", ["shape"], ["c"], value=value),
             node("Add", ["x", "c"], ["y"])]
    return model(nodes, {"x": X}, ["y"]), {"x": rand(X, 1)}


@case("cast_constant")
def _cast():
    nodes = [node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT), node("Mul", ["x", "kf"], ["y"])]
    return model(nodes, {"x": X}, ["y"], {"k": np.array(3, np.int64)}), {"x": rand(X, 1)}


@case("constant_value_floats")
def _const_floats():
    nodes = [helper.make_node("Constant", [], ["k"], value_floats=[0.5] * 9), node("Mul", ["x", "k"], ["y"])]
    return model(nodes, {"x": X}, ["y"]), {"x": rand(X, 1)}


@case("initializers_as_inputs_ir3")
def _ir3():
    w = rand((8, 8, 3, 3), 2)
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["y"])]
    return model(nodes, {"x": X}, ["y"], {"w": w}, opset=7, ir_version=3, initializers_as_inputs=True), \
        {"x": rand(X, 1)}


@case("output_is_input_of_another_node")
def _two_outputs():
    nodes = [node("Relu", ["x"], ["r"]), node("Sigmoid", ["r"], ["y"])]
    return model(nodes, {"x": X}, ["r", "y"]), {"x": rand(X, 1)}


@case("constant_output_and_passthrough")
def _const_out():
    nodes = [node("Identity", ["x"], ["y"]), node("Identity", ["k"], ["z"])]
    return model(nodes, {"x": (2, 3)}, ["y", "z"], {"k": rand((4,), 2)}), {"x": rand((2, 3), 1)}
