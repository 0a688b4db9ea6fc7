"""Tuning tasks of a network: each fused convolution or dense layer of an optimized graph, by workload.

A convolution with a square kernel, equal strides, equal pads on every side, no dilation and no groups is a
``conv2d_nchwc_packed`` task (arguments ``N, C, H, W, O, K, stride, pad``, as ``tensortune tune conv2d
--template conv2d_nchwc_packed`` makes it). A dense layer ``[M, K] x [K, N]`` runs as the 1x1 convolution of
``M`` 1x1 images of ``K`` channels into ``N`` (the same memory), so it is the task ``(M, K, 1, 1, N, 1, 1, 0)``
of that template. A depthwise convolution of the same regular kind is a ``depthwise_conv2d_nchwc_packed`` task
(``N, C, H, W, K, stride, pad``). Nodes with equal workloads share one task, which counts them. The others
(grouped convolutions, unusual windows) are listed with no task: they run their default schedules.

A 3x3, stride-1 convolution of that kind also has an *alternative*: the ``conv2d_winograd_nchwc_packed`` task
of the same arguments, which computes the same nodes another way. On a CPU every such layer has one more: the
``nchwc_default`` task (arguments: the template's name, then its arguments), the kernel the network runs
untuned, one config measured once. All are tuned (the scheduler counts the layer once, at its fastest
alternative), and compiling picks, per node, the one whose best record is fastest: a tuned config only where it
beat the default in the same run.

On a target of at most ``FLAT_MAX_REGISTERS`` vector registers (AVX2), a 1x1, stride-1, unpadded convolution whose
output rows are shorter than ``FLAT_MAX_WIDTH`` has one more alternative: the same template's task of its
``H x W`` pixels seen as one row, ``(N, C, 1, H*W, O, 1, 1, 0)`` (``flat_args``). In NCHW[x]c the pixels of a
channel block lie one after the other, rows included, so the view moves nothing; it lets a register tile of ``t``
columns run along all ``H*W`` pixels instead of each short row (a row of 7 computed in tiles of 4 is 8 columns of
work, 12.5% wasted; 49 pixels are 52). Measured on AVX2 (Zen 4), the view ran MobileNetV2's 1x1 layers at 7x7 and
14x14 6-14% faster and those at 28x28 even (-7% to +2%); with 32 registers (AVX-512, NEON) a tile of 7 columns and
several vectors fits a short row exactly, and on AVX-512 every view measured even. Where it measured even it is not
offered: it would only cost trials.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..autotvm.task import Task
from ..autotvm.templates import TEMPLATES
from ..target import Target, TargetKind
from .ir import Graph, Node
from .ops import Conv, Dense

CONV_TEMPLATE = "conv2d_nchwc_packed"
DEPTHWISE_TEMPLATE = "depthwise_conv2d_nchwc_packed"
WINOGRAD_TEMPLATE = "conv2d_winograd_nchwc_packed"
DEFAULT_TEMPLATE = "nchwc_default"
#: 1x1 convolutions with output rows shorter than this also get the task of their pixels as one row
FLAT_MAX_WIDTH = 16
#: ... on targets with at most this many vector registers
FLAT_MAX_REGISTERS = 16


@dataclass(frozen=True)
class NetworkTask:
    """One workload of a network: its tuning task (None when no template computes it), the nodes that compute
    it, the FLOPs of one of them, and the alternatives of its task (other templates that compute those nodes)."""

    kind: str
    workload: str
    task: Task | None
    nodes: tuple[str, ...]
    flops: int
    alternatives: tuple[Task, ...] = ()

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The task, then its alternatives (none without a task)."""
        return () if self.task is None else (self.task, *self.alternatives)

    @property
    def occurrences(self) -> int:
        return len(self.nodes)

    @property
    def total_flops(self) -> int:
        return self.flops * self.occurrences


def conv_task_args(g: Graph, node: Node) -> tuple | None:
    """``(N, C, H, W, O, K, stride, pad)`` of a regular convolution (square kernel, equal strides, equal pads, no
    dilation, blocked layout), or ``(N, C, H, W, K, stride, pad)`` of such a depthwise convolution; else None."""
    op: Conv = node.op
    x, w = g.values[node.inputs[0]], g.values[node.inputs[1]]
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    regular = kh == kw and op.strides[0] == op.strides[1] and len(set(op.pads)) == 1 and op.dilations == (1, 1)
    if not regular or not x.layout.blocked:
        return None
    if op.is_depthwise(c, o):
        return (n, c, h, wd, kh, op.strides[0], op.pads[0])
    return (n, c, h, wd, o, kh, op.strides[0], op.pads[0]) if op.groups == 1 else None


def dense_task_args(g: Graph, node: Node) -> tuple:
    """``(M, K, 1, 1, N, 1, 1, 0)``: a dense layer as the 1x1 convolution of 1x1 images."""
    m, k = g.values[node.inputs[0]].shape
    return (m, k, 1, 1, g.values[node.inputs[1]].shape[0], 1, 1, 0)


def node_task(g: Graph, node: Node, target: Target) -> Task | None:
    """The tuning task of one node, or None."""
    if isinstance(node.op, Conv):
        args = conv_task_args(g, node)
        if args is None:
            return None
        return Task(TEMPLATES[DEPTHWISE_TEMPLATE if len(args) == 7 else CONV_TEMPLATE], args, target)
    if isinstance(node.op, Dense):
        return Task(TEMPLATES[CONV_TEMPLATE], dense_task_args(g, node), target)
    return None


def winograd_args(g: Graph, node: Node) -> tuple | None:
    """The arguments of a convolution task Winograd also computes (3x3, stride 1), else None."""
    args = conv_task_args(g, node) if isinstance(node.op, Conv) else None
    return args if args is not None and len(args) == 8 and args[5:7] == (3, 1) else None


def flat_shape(shape: tuple[int, ...], h: int, w: int) -> tuple[int, ...] | None:
    """A tensor of ``shape`` that broadcasts to an ``[..., h, w]`` output, seen as broadcasting to ``[..., 1, h*w]``
    (the same elements in the same order): its last two axes ``(h, w)`` become ``(1, h*w)``, and a tensor that
    broadcasts over both is seen as it is; None for one that broadcasts over one of the two only."""
    rows, cols = ((1, 1) + tuple(shape))[-2:]
    if (rows, cols) == (1, 1):
        return tuple(shape)
    if (rows, cols) == (h, w) and len(shape) >= 2:
        return tuple(shape[:-2]) + (1, h * w)
    return None


def flat_args(g: Graph, node: Node, target: Target) -> tuple | None:
    """``(N, C, 1, H*W, O, 1, 1, 0)``: the task of a 1x1, stride-1, unpadded convolution of rows shorter than
    ``FLAT_MAX_WIDTH`` pixels, seen as one row of its ``H*W`` pixels, for a target of at most ``FLAT_MAX_REGISTERS``
    vector registers (see the module docstring), when the operands of its epilogue can be seen so too
    (``flat_shape``); else None."""
    args = conv_task_args(g, node) if isinstance(node.op, Conv) else None
    if target.vector_registers > FLAT_MAX_REGISTERS:
        return None
    if args is None or len(args) != 8 or args[5:] != (1, 1, 0):
        return None
    n, c, h, w, o = args[:5]
    if h == 1 or w >= FLAT_MAX_WIDTH:
        return None
    if any(flat_shape(g.values[v].shape, h, w) is None for v in node.inputs[node.op.num_base_inputs:]):
        return None
    return (n, c, 1, h * w, o, 1, 1, 0)


def is_flat(g: Graph, node: Node, task: Task) -> bool:
    """Whether ``task`` is the one-row view of ``node`` (``flat_args``)."""
    return task.name == CONV_TEMPLATE and tuple(task.args) == flat_args(g, node, task.target)


def node_tasks(g: Graph, node: Node, target: Target) -> tuple[Task, ...]:
    """The tuning task of one node, then its alternatives (see the module docstring); () when it has none."""
    task = node_task(g, node, target)
    if task is None:
        return ()
    wino, flat = winograd_args(g, node), flat_args(g, node, target)
    tasks = (task,) if wino is None else (task, Task(TEMPLATES[WINOGRAD_TEMPLATE], wino, target))
    if flat is not None:
        tasks += (Task(TEMPLATES[CONV_TEMPLATE], flat, target),)
    if target.kind is TargetKind.C:
        tasks += (default_task(task),)
    return tasks


def default_task(task: Task) -> Task:
    """The ``nchwc_default`` task of a layer whose (direct) task is ``task``: its untuned kernel."""
    return Task(TEMPLATES[DEFAULT_TEMPLATE], (task.name, *task.args), task.target)


def node_flops(g: Graph, node: Node) -> int:
    if isinstance(node.op, Conv):
        o, cg, kh, kw = g.values[node.inputs[1]].shape
        n, _, oh, ow = g.values[node.outputs[0]].shape
        return 2 * n * o * oh * ow * cg * kh * kw
    if isinstance(node.op, Dense):
        m, k = g.values[node.inputs[0]].shape
        return 2 * m * g.values[node.inputs[1]].shape[0] * k
    return 0


def _kind(g: Graph, node: Node) -> str:
    if isinstance(node.op, Dense):
        return "dense"
    c, o = g.values[node.inputs[0]].shape[1], g.values[node.outputs[0]].shape[1]
    if node.op.is_depthwise(c, o):
        return "depthwise_conv2d"
    return "conv2d" if node.op.groups == 1 else "grouped_conv2d"


def _untuned_key(g: Graph, node: Node) -> str:
    """A readable workload of a node no template computes: ``[N,C,H,W]->O k3x3 s2x2 p1,1,1,1 d1x1 g32``."""
    op: Conv = node.op
    o, _, kh, kw = g.values[node.inputs[1]].shape
    shape = ",".join(map(str, g.values[node.inputs[0]].shape))
    return (f"[{shape}]->{o} k{kh}x{kw} s{op.strides[0]}x{op.strides[1]} p{','.join(map(str, op.pads))} "
            f"d{op.dilations[0]}x{op.dilations[1]} g{op.groups}")


def extract_tasks(g: Graph, target: Target) -> list[NetworkTask]:
    """The workloads of the convolutions and dense layers of an optimized graph, in order of first use. An
    alternative that is another workload's task (a one-row view equal to another layer's task or view) is left to
    that workload, or to the first that has it: a task is tuned in one group."""
    nodes = [(node, node_tasks(g, node, target)) for node in g.nodes if isinstance(node.op, (Conv, Dense))]
    taken = {tasks[0].workload_key: tasks[0].workload_key for _, tasks in nodes if tasks}  # task -> its group
    found: dict[str, NetworkTask] = {}
    for node, tasks in nodes:
        task, *alternatives = tasks or (None,)
        key = task.workload_key if task is not None else _untuned_key(g, node)
        alternatives = [t for t in alternatives if taken.setdefault(t.workload_key, key) == key]
        prev = found.get(key)
        if prev is not None:  # nodes of one workload may differ in their epilogues, and so in their views
            alternatives = list(prev.alternatives) + [t for t in alternatives if t not in prev.alternatives]
        nodes_of = (prev.nodes if prev else ()) + (node.name,)
        found[key] = NetworkTask(_kind(g, node), key, task, nodes_of, node_flops(g, node), tuple(alternatives))
    return list(found.values())
