"""Schedule templates for CPUs, and for NVIDIA GPUs (``cuda``). Each registers itself, with what it serves, in the
one table ``TEMPLATES`` (``task.py``); importing this package imports them all, in the order a layer's tasks list
them (a network layer's direct convolution before its Winograd alternative). ``GPU_TEMPLATES`` names those that
schedule for a ``cuda`` target."""
from ...target import TargetKind
from ..task import TEMPLATES
from .conv2d import (conv2d_nchwc_packed_template, conv2d_nchwc_template, conv2d_spatial_pack_template,
                     depthwise_conv2d_template)
from .depthwise_packed import depthwise_conv2d_nchwc_packed_template
from .winograd import conv2d_winograd_nchw_template, conv2d_winograd_template
from .default import default_template
from .cuda import conv2d_nchw_cuda_template, depthwise_conv2d_nchw_cuda_template, matmul_cuda_template
from .matmul import matmul_template
from .auto import AUTO_TEMPLATES  # the template-free ones, last: a layer's templates come first

GPU_TEMPLATES = frozenset(name for name, t in TEMPLATES.items() if TargetKind.CUDA in t.targets)

__all__ = ["AUTO_TEMPLATES", "GPU_TEMPLATES", "TEMPLATES", "conv2d_nchw_cuda_template", "conv2d_nchwc_packed_template",
           "conv2d_nchwc_template", "conv2d_spatial_pack_template", "conv2d_winograd_nchw_template",
           "conv2d_winograd_template", "default_template", "depthwise_conv2d_nchwc_packed_template",
           "depthwise_conv2d_template", "depthwise_conv2d_nchw_cuda_template", "matmul_cuda_template",
           "matmul_template"]
