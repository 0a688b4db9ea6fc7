"""Schedule templates for CPUs, and for NVIDIA GPUs (``cuda``). ``TEMPLATES`` maps each template's name to it (for
logs and the CLI); ``GPU_TEMPLATES`` names those that schedule for a ``cuda`` target."""
from .conv2d import (conv2d_nchwc_packed_template, conv2d_nchwc_template, conv2d_spatial_pack_template,
                     depthwise_conv2d_template)
from .depthwise_packed import depthwise_conv2d_nchwc_packed_template
from .default import default_template
from .cuda import conv2d_nchw_cuda_template, depthwise_conv2d_nchw_cuda_template, matmul_cuda_template
from .matmul import matmul_template
from .winograd import conv2d_winograd_nchw_template, conv2d_winograd_template

TEMPLATES = {t.name: t for t in (matmul_template, conv2d_nchwc_template, conv2d_nchwc_packed_template,
                                  conv2d_spatial_pack_template, depthwise_conv2d_template,
                                  depthwise_conv2d_nchwc_packed_template, conv2d_winograd_template,
                                  conv2d_winograd_nchw_template, default_template,
                                  matmul_cuda_template, conv2d_nchw_cuda_template,
                                  depthwise_conv2d_nchw_cuda_template)}
GPU_TEMPLATES = frozenset({matmul_cuda_template.name, conv2d_nchw_cuda_template.name,
                           depthwise_conv2d_nchw_cuda_template.name})

__all__ = ["GPU_TEMPLATES", "TEMPLATES", "conv2d_nchw_cuda_template", "conv2d_nchwc_packed_template",
           "conv2d_nchwc_template", "conv2d_spatial_pack_template", "conv2d_winograd_nchw_template",
           "conv2d_winograd_template", "default_template", "depthwise_conv2d_nchwc_packed_template",
           "depthwise_conv2d_template", "depthwise_conv2d_nchw_cuda_template", "matmul_cuda_template",
           "matmul_template"]
