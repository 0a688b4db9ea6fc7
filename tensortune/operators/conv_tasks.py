"""The tuning tasks of convolution and dense nodes, and the fused kernel a tuned config of one of them schedules.

A convolution with a square kernel, equal strides, equal pads on every side and no dilation is a
``conv2d_nchwc_packed`` task (arguments ``N, C, H, W, O, K, stride, pad``, as ``tensortune tune conv2d
--template conv2d_nchwc_packed`` makes it): the template registered as a network's for the ``Conv2d`` workload
(``Template.network``). A grouped one (ResNeXt, RegNet) is that template's task too, ``Conv2d(..., groups=G)`` with
``G`` the groups its kernel runs: its own where they hold whole channel blocks of the layout, else fewer, wider ones
with block-diagonal weights (``conv_kernels.merged_groups``), so that the workload is what runs and is measured.
A dense layer ``[M, K] x [K, N]`` runs as the 1x1 convolution of ``M`` 1x1 images of ``K`` channels into ``N`` (the
same memory), so it is the task ``Conv2d(M, K, 1, 1, N, 1, 1, 0)`` of that template. A depthwise convolution of the
same regular kind is a ``depthwise_conv2d_nchwc_packed`` task (``N, C, H, W, K, stride, pad``). Other convolutions
(unusual windows, groups that hold no whole blocks even merged) have no task: they run their default schedules.

A 3x3, stride-1 convolution of that kind also has an *alternative*: the ``conv2d_winograd_nchwc_packed`` task
of the same arguments, which computes the same node another way. On a CPU every such node has one more: the
``nchwc_default`` task (arguments: the template's name, then its arguments), the kernel the network runs
untuned, one config measured once. All are tuned (the scheduler counts the layer once, at its fastest
alternative), and compiling picks, per node, the one whose best record is fastest: a tuned config only where it
beat the default in the same run.

On a target of at most ``FLAT_MAX_REGISTERS`` vector registers (AVX2), a 1x1, stride-1, unpadded convolution whose
output rows are shorter than ``FLAT_MAX_WIDTH`` has one more alternative: the same template's task of its
``H x W`` pixels seen as one row, ``Conv2d(N, C, 1, H*W, O, 1, 1, 0)`` (``flat_workload``). In NCHW[x]c the pixels of a
channel block lie one after the other, rows included, so the view moves nothing; it lets a register tile of ``t``
columns run along all ``H*W`` pixels instead of each short row (a row of 7 computed in tiles of 4 is 8 columns of
work, 12.5% wasted; 49 pixels are 52). With 32 registers a tile of 7 columns and several vectors fits a short row
exactly, so the view is not offered there (BENCHMARKS.md has the measurements).
"""
from __future__ import annotations

from ..autotvm.space import ConfigEntity
from ..autotvm.task import TEMPLATES, Task, Template
from ..autotvm.templates import default_template
from ..autotvm.templates.auto import expression_default_template
from ..autotvm.workload import Conv2d, DefaultKernel
from ..errors import TensortuneError
from ..graph.ir import Graph, Node
from ..target import Target, TargetKind
from .conv_kernels import (conv_blocks, conv_kind, conv_operator, flat_shape, is_blocked_conv, layer_workload,
                           winograd_operator)
from .kernel import KernelArgs, KernelDef, lanes_of

#: 1x1 convolutions with output rows shorter than this also get the task of their pixels as one row
FLAT_MAX_WIDTH = 16
#: ... on targets with at most this many vector registers
FLAT_MAX_REGISTERS = 16


class BlockMismatch(TensortuneError):
    """A tuned config blocks channels otherwise than the network's layout at this node: it cannot run there."""


def network_templates(workload, target: Target) -> list[Template]:
    """The templates a network's layer of ``workload`` is tuned with on ``target`` (``Template.network``), its
    direct task's first."""
    return [t for t in TEMPLATES.values() if t.network and type(workload) is t.workload and target.kind in t.targets
            and workload.dtype in t.dtypes and t.computes(workload)]


def flat_workload(g: Graph, node: Node, target: Target) -> Conv2d | None:
    """``Conv2d(N, C, 1, H*W, O, 1, 1, 0)``: a 1x1, stride-1, unpadded convolution of rows shorter than
    ``FLAT_MAX_WIDTH`` pixels, seen as one row of its ``H*W`` pixels, for a target of at most ``FLAT_MAX_REGISTERS``
    vector registers (see the module docstring), when the operands of its epilogue can be seen so too
    (``conv_kernels.flat_shape``); else None."""
    wl = layer_workload(g, node) if not node.op.dense else None
    if target.vector_registers > FLAT_MAX_REGISTERS or not isinstance(wl, Conv2d):
        return None
    if (wl.K, wl.stride, wl.pad) != (1, 1, 0) or wl.H == 1 or wl.W >= FLAT_MAX_WIDTH:
        return None
    if any(flat_shape(g.values[v].shape, wl.H, wl.W) is None for v in node.inputs[node.op.num_base_inputs:]):
        return None
    return Conv2d(wl.N, wl.C, 1, wl.H * wl.W, wl.O, 1, 1, 0, dtype=wl.dtype, groups=wl.groups)


def is_flat(g: Graph, node: Node, task: Task) -> bool:
    """Whether ``task`` is the one-row view of ``node`` (``flat_workload``)."""
    if not isinstance(task.workload, Conv2d):
        return False
    flat = flat_workload(g, node, task.target)
    return flat is not None and task.workload == flat


def node_tasks(g: Graph, node: Node, target: Target) -> tuple[Task, ...]:
    """The tuning task of one node, then its alternatives (see the module docstring); () when it has none."""
    wl = layer_workload(g, node)
    templates = network_templates(wl, target) if wl is not None else []
    if not templates:
        return ()
    tasks = tuple(Task(t, wl, target) for t in templates)
    flat = flat_workload(g, node, target)
    if flat is not None:
        tasks += (Task(templates[0], flat, target),)
    if target.kind is TargetKind.C:
        tasks += (default_task(tasks[0]),)
    return tasks


def default_task(task: Task) -> Task:
    """The ``nchwc_default`` task of a layer whose (direct) task is ``task``: its untuned kernel."""
    return Task(default_template, DefaultKernel(task.name, task.workload), task.target)


def is_default(task: Task) -> bool:
    """Whether ``task`` measures a layer's untuned kernel (``default_task``; or a node's, as an expression:
    ``expression_tasks``)."""
    return isinstance(task.workload, DefaultKernel) or task.template is expression_default_template


def workload_kind(g: Graph, node: Node) -> str:
    """``conv2d``, ``depthwise_conv2d``, ``grouped_conv2d`` or ``dense``."""
    if node.op.dense:
        return "dense"
    c, o = g.values[node.inputs[0]].shape[1], g.values[node.outputs[0]].shape[1]
    if node.op.is_depthwise(c, o):
        return "depthwise_conv2d"
    return "conv2d" if node.op.groups == 1 else "grouped_conv2d"


def untuned_key(g: Graph, node: Node) -> str:
    """A readable workload of a node no template computes: ``[N,C,H,W]->O k3x3 s2x2 p1,1,1,1 d1x1 g32`` (a dense
    layer: ``[M,K]->N dense``), then its dtype unless float32 (``... g32 float16``)."""
    op = node.op
    dtype = g.values[node.outputs[0]].dtype
    suffix = "" if dtype == "float32" else f" {dtype}"
    if op.dense:
        (m, k), n = g.values[node.inputs[0]].shape, g.values[node.inputs[1]].shape[0]
        return f"[{m},{k}]->{n} dense{suffix}"
    o, _, kh, kw = g.values[node.inputs[1]].shape
    shape = ",".join(map(str, g.values[node.inputs[0]].shape))
    return (f"[{shape}]->{o} k{kh}x{kw} s{op.strides[0]}x{op.strides[1]} p{','.join(map(str, op.pads))} "
            f"d{op.dilations[0]}x{op.dilations[1]} g{op.groups}{suffix}")


def node_blocks(g: Graph, node: Node) -> tuple[int, int] | None:
    """The channel blocks of a convolution's input and output in the planned layout; None for a dense layer, which
    runs any."""
    if node.op.dense:
        return None
    return g.values[node.inputs[0]].layout.block, g.values[node.outputs[0]].layout.block


def tuned_conv(g: Graph, node: Node, task: Task, index: int) -> KernelDef:
    """The fused convolution (or dense layer) of ``node`` scheduled by config ``index`` of its task; a
    ``BlockMismatch`` when the config's channel blocks are not the node's."""
    lanes = lanes_of(task.target, g.values[node.outputs[0]].dtype, node)
    if not is_blocked_conv(g, node, lanes):
        raise BlockMismatch("the convolution does not run in the blocked layout")
    a = KernelArgs(g)
    blocks = conv_blocks(g, node, lanes)
    one_row = is_flat(g, node, task)  # the task of its pixels as one row (flat_workload)

    def declare_fused(*, icb: int | None = None, ocb: int | None = None, cb: int | None = None,
                      tile: int | None = None, p_tile: int | None = None, target=None, ow_tile: int = 1,
                      groups: int = 1, **shape):
        # called with keywords like the template's operator (ops.conv2d_nchwc_packed, ops.conv2d_winograd_nchwc
        # with its tile size, ops.depthwise_conv2d_nchwc_packed with one block ``cb``): the shape is the node's,
        # the blocks must be the layout's, the groups those the workload runs (the node's, merged)
        given = (cb, cb) if cb is not None else (icb, ocb)
        if node.op.dense:  # plain [M, K] and [M, N] are 1x1 images in any blocks
            return conv_operator(g, node, a, lanes, dense_blocks=given, ow_tile=ow_tile)
        if given != blocks:
            raise BlockMismatch(f"the tuned config blocks channels by {given[0]}/{given[1]}, the network's layout by "
                                f"{blocks[0]}/{blocks[1]}")
        if tile is not None:  # a Winograd kernel
            return winograd_operator(g, node, a, lanes, tile, p_tile=p_tile, target=target)
        return conv_operator(g, node, a, lanes, one_row=one_row, ow_tile=ow_tile, groups=groups)

    config = ConfigEntity(task.space, index, task.target)
    s, op = task.template.instantiate(config, task.workload, declare=declare_fused)
    return a.done(conv_kind(g, node), node, op.output, s, op.flops, extra_key=(task.name, one_row, index),
                  template=task.name)
