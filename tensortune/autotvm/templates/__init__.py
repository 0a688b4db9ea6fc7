"""Schedule templates for CPUs. ``TEMPLATES`` maps each template's name to it (for logs and the CLI)."""
from .conv2d import (conv2d_nchwc_packed_template, conv2d_nchwc_template, conv2d_spatial_pack_template,
                     depthwise_conv2d_template)
from .depthwise_packed import depthwise_conv2d_nchwc_packed_template
from .matmul import matmul_template
from .winograd import conv2d_winograd_template

TEMPLATES = {t.name: t for t in (matmul_template, conv2d_nchwc_template, conv2d_nchwc_packed_template,
                                  conv2d_spatial_pack_template, depthwise_conv2d_template,
                                  depthwise_conv2d_nchwc_packed_template, conv2d_winograd_template)}

__all__ = ["TEMPLATES", "conv2d_nchwc_packed_template", "conv2d_nchwc_template", "conv2d_spatial_pack_template",
           "conv2d_winograd_template", "depthwise_conv2d_nchwc_packed_template", "depthwise_conv2d_template",
           "matmul_template"]
