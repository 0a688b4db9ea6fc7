"""The networks users export, written in PyTorch as their reference implementations write them (torchvision,
milesial's U-Net, the PyTorch examples, the Nature DQN, ``transformers``), with random weights, and exported to ONNX.

Each builder takes ``small``: True for tests (fewer blocks and channels, small inputs), False for the real full-size
configuration; it returns ``(module, example inputs)``. Weights are He-scaled and batch normalizations calibrated
on random inputs, so that activations keep their scale through the depth and a comparison of outputs means
something; layer scales and normalization affines are drawn at random instead of their trivial initial values.

``ZOO`` names every network with how it is exported (opset, input and output names, dynamic axes);
``export(name)`` gives the ``ModelProto`` and its feeds. ``to_onnx`` exports any module with the legacy (TorchScript)
exporter or the dynamo one. The ONNX model zoo's old AlexNet, SqueezeNet 1.0 and GoogLeNet are opset 9 with Dropout
nodes whose mask output nothing reads (``with_dropout_masks``).
"""
from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

Example = tuple[nn.Module, tuple[torch.Tensor, ...]]


# ------------------------------------------------------------------------------------------- weights

def _prepare(module: nn.Module, inputs: tuple[torch.Tensor, ...], seed: int = 0) -> Example:
    """He-scaled convolution and linear weights, random normalization affines, batch normalizations calibrated on
    random inputs like ``inputs`` (their running statistics), then eval mode."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                if m.bias is not None:
                    m.bias.copy_(torch.rand(m.bias.shape, generator=gen) * 0.2 - 0.1)
            elif isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)) and m.weight is not None:
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.rand(m.bias.shape, generator=gen) * 0.2 - 0.1)
    norms = [m for m in module.modules() if isinstance(m, nn.BatchNorm2d)]
    if norms:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the calibration batch
        module.train()
        with torch.no_grad():
            calib = [torch.randn((4,) + tuple(x.shape[1:]), generator=gen) for x in inputs]
            module(*calib)
    return module.eval(), inputs


def _image(batch: int, channels: int, height: int, width: int | None = None) -> tuple[torch.Tensor]:
    return (torch.randn(batch, channels, height, width or height, generator=torch.Generator().manual_seed(1)),)


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    """torchvision's channel rounding: to a multiple of ``divisor``, never below 90% of ``v``."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def conv_bn(cin: int, cout: int, k: int | tuple[int, int] = 3, stride: int = 1, groups: int = 1,
            act: Callable[..., nn.Module] | None = nn.ReLU, dilation: int = 1, eps: float = 1e-5,
            padding: int | tuple[int, int] | None = None) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: convolution without bias, batch norm, activation."""
    if padding is None:
        padding = (k - 1) // 2 * dilation if isinstance(k, int) else tuple((d - 1) // 2 for d in k)
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, padding, dilation=dilation, groups=groups, bias=False),
                               nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: global pool, 1x1 conv, activation, 1x1 conv, gate, scale."""

    def __init__(self, channels: int, squeeze: int, act: Callable[..., nn.Module] = nn.ReLU,
                 gate: Callable[..., nn.Module] = nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = act(), gate()

    def forward(self, x):
        return self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x))))) * x


# ------------------------------------------------------------------------------------------- ResNet family

class Bottleneck(nn.Module):
    """torchvision's ResNet bottleneck (stride on the 3x3), grouped for ResNeXt, dilated for DeepLab."""
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 groups: int = 1, base_width: int = 64, dilation: int = 1):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1, self.bn1 = nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, padding=dilation, groups=groups, dilation=dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, planes * 4, 1, bias=False), nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet of bottlenecks; ``base`` is the first stage's planes (64 in the real nets)."""

    def __init__(self, layers: list[int], groups: int = 1, width_per_group: int = 64, base: int = 64,
                 dilate: tuple[bool, bool, bool] = (False, False, False), num_classes: int = 1000):
        super().__init__()
        self.inplanes, self.dilation, self.groups, self.base_width = base, 1, groups, width_per_group
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1, self.relu = nn.BatchNorm2d(base), nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(base, layers[0])
        self.layer2 = self._make_layer(base * 2, layers[1], 2, dilate[0])
        self.layer3 = self._make_layer(base * 4, layers[2], 2, dilate[1])
        self.layer4 = self._make_layer(base * 8, layers[3], 2, dilate[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(base * 8 * 4, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1, dilate: bool = False) -> nn.Sequential:
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * 4))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample, self.groups, self.base_width,
                             previous_dilation)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes, groups=self.groups, base_width=self.base_width,
                              dilation=self.dilation) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def features(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))


def resnet50(small: bool = True) -> Example:
    if small:
        return _prepare(ResNet([1, 1, 1, 1], base=16, num_classes=10), _image(1, 3, 32))
    return _prepare(ResNet([3, 4, 6, 3]), _image(1, 3, 224))


def resnext50(small: bool = True) -> Example:
    """ResNeXt-50 32x4d: grouped 3x3 convolutions in the bottlenecks."""
    if small:
        return _prepare(ResNet([1, 1, 1, 1], groups=8, width_per_group=4, base=16, num_classes=10), _image(1, 3, 32))
    return _prepare(ResNet([3, 4, 6, 3], groups=32, width_per_group=4), _image(1, 3, 224))


# ------------------------------------------------------------------------------------------- DeepLabV3

class ASPPPooling(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x):
        size = x.shape[-2:]
        for mod in self:
            x = mod(x)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: a 1x1 branch, dilated 3x3 branches, an image-pooling branch, projected."""

    def __init__(self, cin: int, rates: tuple[int, ...], cout: int = 256):
        super().__init__()
        branches = [conv_bn(cin, cout, 1)] + [conv_bn(cin, cout, 3, dilation=r) for r in rates]
        self.convs = nn.ModuleList(branches + [ASPPPooling(cin, cout)])
        self.project = nn.Sequential(nn.Conv2d(len(self.convs) * cout, cout, 1, bias=False), nn.BatchNorm2d(cout),
                                     nn.ReLU(), nn.Dropout(0.5))

    def forward(self, x):
        return self.project(torch.cat([conv(x) for conv in self.convs], dim=1))


class DeepLabV3(nn.Module):
    """torchvision's deeplabv3_resnet50: a ResNet-50 of output stride 8 (dilated last stages), the DeepLab head,
    logits resized to the input bilinearly (align_corners=False)."""

    def __init__(self, backbone: ResNet, rates: tuple[int, ...], aspp: int, num_classes: int = 21):
        super().__init__()
        self.backbone = backbone
        self.classifier = nn.Sequential(ASPP(backbone.inplanes, rates, aspp), conv_bn(aspp, aspp, 3),
                                        nn.Conv2d(aspp, num_classes, 1))

    def forward(self, x):
        size = x.shape[-2:]
        out = self.classifier(self.backbone.features(x))
        return F.interpolate(out, size=size, mode="bilinear", align_corners=False)


def deeplabv3(small: bool = True) -> Example:
    if small:
        net = DeepLabV3(ResNet([1, 1, 1, 1], base=8, dilate=(False, True, True)), (2, 4, 6), 32)
        return _prepare(net, _image(1, 3, 48))
    return _prepare(DeepLabV3(ResNet([3, 4, 6, 3], dilate=(False, True, True)), (12, 24, 36), 256), _image(1, 3, 520))


# ------------------------------------------------------------------------------------------- MobileNetV3, EfficientNet

class MobileNetV3Block(nn.Module):
    """torchvision's MobileNetV3 InvertedResidual: expansion, depthwise, squeeze-excitation (ReLU, hardsigmoid),
    projection; ReLU or hardswish."""

    def __init__(self, cin: int, k: int, expanded: int, cout: int, se: bool, act: str, stride: int):
        super().__init__()
        act_layer = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=act_layer))
        layers.append(conv_bn(expanded, expanded, k, stride, groups=expanded, act=act_layer))
        if se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4, 8), gate=nn.Hardsigmoid))
        layers.append(conv_bn(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.use_res_connect = stride == 1 and cin == cout

    def forward(self, x):
        out = self.block(x)
        return out + x if self.use_res_connect else out


MOBILENET_V3_LARGE = [  # input, kernel, expanded, output, SE, activation, stride
    (16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2), (24, 3, 72, 24, False, "RE", 1),
    (24, 5, 72, 40, True, "RE", 2), (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1), (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1), (160, 5, 960, 160, True, "HS", 1)]
MOBILENET_V3_SMALL_HEAD = [  # the first blocks of mobilenet_v3_small: SE, both activations, k3 and k5
    (16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1)]


class MobileNetV3(nn.Module):
    def __init__(self, blocks, last_channel: int, num_classes: int = 1000):
        super().__init__()
        layers = [conv_bn(3, blocks[0][0], 3, 2, act=nn.Hardswish)] + [MobileNetV3Block(*b) for b in blocks]
        last = blocks[-1][3]
        layers.append(conv_bn(last, 6 * last, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last, last_channel), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(last_channel, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3(small: bool = True) -> Example:
    """MobileNetV3-Large (small: the first blocks of MobileNetV3-Small, a narrow head)."""
    if small:
        return _prepare(MobileNetV3(MOBILENET_V3_SMALL_HEAD, 64, 10), _image(1, 3, 64))
    return _prepare(MobileNetV3(MOBILENET_V3_LARGE, 1280), _image(1, 3, 224))


class MBConv(nn.Module):
    """torchvision's EfficientNet MBConv: 1x1 expansion, depthwise, squeeze-excitation (SiLU, sigmoid) of a
    quarter of the block's input channels, projection; stochastic depth is the identity at inference."""

    def __init__(self, expand: int, k: int, stride: int, cin: int, cout: int):
        super().__init__()
        expanded = _make_divisible(cin * expand, 8)
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=nn.SiLU))
        layers += [conv_bn(expanded, expanded, k, stride, groups=expanded, act=nn.SiLU),
                   SqueezeExcitation(expanded, max(1, cin // 4), act=nn.SiLU),
                   conv_bn(expanded, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.use_res_connect = stride == 1 and cin == cout

    def forward(self, x):
        out = self.block(x)
        return out + x if self.use_res_connect else out


EFFICIENTNET_B0 = [  # expand, kernel, stride, input, output, layers
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]


class EfficientNet(nn.Module):
    def __init__(self, stages, head: int, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, stages[0][3], 3, 2, act=nn.SiLU)]
        for expand, k, stride, cin, cout, n in stages:
            layers += [MBConv(expand, k, stride if i == 0 else 1, cin if i == 0 else cout, cout) for i in range(n)]
        layers.append(conv_bn(stages[-1][4], head, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(head, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def efficientnet_b0(small: bool = True) -> Example:
    if small:
        stages = [(1, 3, 1, 16, 8, 1), (6, 3, 2, 8, 16, 2), (6, 5, 2, 16, 24, 1)]
        return _prepare(EfficientNet(stages, 64, 10), _image(1, 3, 32))
    return _prepare(EfficientNet(EFFICIENTNET_B0, 1280), _image(1, 3, 224))


# ------------------------------------------------------------------------------------------- ConvNeXt

class LayerNorm2d(nn.LayerNorm):
    """torchvision's LayerNorm2d: layer norm over channels, by permuting them last and back."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims: list[int]):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    """ConvNeXt block: depthwise 7x7, channels last, LayerNorm, Linear x4, GELU, Linear, channels first, layer
    scale, residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim), Permute([0, 2, 3, 1]),
                                   nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim), nn.GELU(),
                                   nn.Linear(4 * dim, dim), Permute([0, 3, 1, 2]))
        # trained nets learn their layer scales; the 1e-6 of initialization would hide the block
        self.layer_scale = nn.Parameter(torch.rand(dim, 1, 1, generator=torch.Generator().manual_seed(dim)) + 0.5)

    def forward(self, x):
        return self.layer_scale * self.block(x) + x


class ConvNeXt(nn.Module):
    def __init__(self, depths: list[int], dims: list[int], num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            layers.append(nn.Sequential(*[CNBlock(dim) for _ in range(depth)]))
            if i + 1 < len(dims):
                layers.append(nn.Sequential(LayerNorm2d(dim, eps=1e-6), nn.Conv2d(dim, dims[i + 1], 2, 2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1),
                                        nn.Linear(dims[-1], num_classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


def convnext(small: bool = True) -> Example:
    """ConvNeXt-Tiny."""
    if small:
        return _prepare(ConvNeXt([2, 2], [16, 32], 10), _image(1, 3, 32))
    return _prepare(ConvNeXt([3, 3, 9, 3], [96, 192, 384, 768]), _image(1, 3, 224))


# ------------------------------------------------------------------------------------------- U-Net

class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, mid: int | None = None):
        mid = mid or cout
        super().__init__(nn.Conv2d(cin, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                         nn.Conv2d(mid, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Up(nn.Module):
    """milesial's U-Net up step: bilinear upsampling (align_corners=True) or a transposed convolution, padding to
    the skip's size (computed from the traced shapes), concatenation with the skip."""

    def __init__(self, cin: int, cout: int, bilinear: bool):
        super().__init__()
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(cin, cout, cin // 2)
        else:
            self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
            self.conv = DoubleConv(cin, cout)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size()[2] - x1.size()[2], x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    def __init__(self, channels: int, classes: int, bilinear: bool = True, base: int = 64):
        super().__init__()
        f = 2 if bilinear else 1
        b = base
        self.inc = DoubleConv(channels, b)
        self.downs = nn.ModuleList([nn.Sequential(nn.MaxPool2d(2), DoubleConv(cin, cout)) for cin, cout in
                                    ((b, 2 * b), (2 * b, 4 * b), (4 * b, 8 * b), (8 * b, 16 * b // f))])
        self.ups = nn.ModuleList([Up(16 * b, 8 * b // f, bilinear), Up(8 * b, 4 * b // f, bilinear),
                                  Up(4 * b, 2 * b // f, bilinear), Up(2 * b, b, bilinear)])
        self.outc = nn.Conv2d(b, classes, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)


def unet(small: bool = True, bilinear: bool = True) -> Example:
    """milesial's Pytorch-UNet; the small image's odd sizes make the up steps pad."""
    if small:
        return _prepare(UNet(3, 2, bilinear, base=8), _image(1, 3, 36, 44))
    return _prepare(UNet(3, 2, bilinear), _image(1, 3, 480, 640))


def unet_transposed(small: bool = True) -> Example:
    return unet(small, bilinear=False)


# ------------------------------------------------------------------------------------------- ShuffleNetV2

def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    batch, channels, height, width = x.size()
    x = x.view(batch, groups, channels // groups, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batch, channels, height, width)


class ShuffleBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        bf = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None), conv_bn(cin, bf, 1))
        self.branch2 = nn.Sequential(conv_bn(cin if stride > 1 else bf, bf, 1),
                                     conv_bn(bf, bf, 3, stride, groups=bf, act=None), conv_bn(bf, bf, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats: list[int], channels: list[int], num_classes: int = 1000):
        super().__init__()
        self.conv1, self.maxpool = conv_bn(3, channels[0], 3, 2), nn.MaxPool2d(3, 2, 1)
        stages, cin = [], channels[0]
        for n, cout in zip(repeats, channels[1:]):
            stages.append(nn.Sequential(ShuffleBlock(cin, cout, 2), *[ShuffleBlock(cout, cout, 1) for _ in range(n - 1)]))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = conv_bn(cin, channels[-1], 1)
        self.fc = nn.Linear(channels[-1], num_classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


def shufflenet_v2(small: bool = True) -> Example:
    """ShuffleNetV2 x1.0."""
    if small:
        return _prepare(ShuffleNetV2([2, 2, 2], [8, 16, 32, 64, 128], 10), _image(1, 3, 64))
    return _prepare(ShuffleNetV2([4, 8, 4], [24, 116, 232, 464, 1024]), _image(1, 3, 224))


# ------------------------------------------------------------------------------------------- Inception-v3

class _Width:
    """Channel counts of a net scaled by ``w`` (Inception-v3 small)."""

    def __init__(self, w: float):
        self.w = w

    def __call__(self, n: int) -> int:
        return max(2, int(n * self.w))


def basic(cin: int, cout: int, k, stride: int = 1, padding=0) -> nn.Sequential:
    """Inception-v3's BasicConv2d: convolution, batch norm (eps 0.001), ReLU."""
    return conv_bn(cin, cout, k, stride, eps=0.001, padding=padding)


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool: int, c: _Width):
        super().__init__()
        self.b1 = basic(cin, c(64), 1)
        self.b5 = nn.Sequential(basic(cin, c(48), 1), basic(c(48), c(64), 5, padding=2))
        self.b3 = nn.Sequential(basic(cin, c(64), 1), basic(c(64), c(96), 3, padding=1),
                                basic(c(96), c(96), 3, padding=1))
        self.bp = basic(cin, c(pool), 1)
        self.out = c(64) + c(64) + c(96) + c(pool)

    def forward(self, x):
        pool = self.bp(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), pool], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int, c: _Width):
        super().__init__()
        self.b3 = basic(cin, c(384), 3, 2)
        self.bd = nn.Sequential(basic(cin, c(64), 1), basic(c(64), c(96), 3, padding=1), basic(c(96), c(96), 3, 2))
        self.out = c(384) + c(96) + cin

    def forward(self, x):
        return torch.cat([self.b3(x), self.bd(x), F.max_pool2d(x, 3, 2)], 1)


class InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int, c: _Width):
        super().__init__()
        c7 = c(c7)
        self.b1 = basic(cin, c(192), 1)
        self.b7 = nn.Sequential(basic(cin, c7, 1), basic(c7, c7, (1, 7), padding=(0, 3)),
                                basic(c7, c(192), (7, 1), padding=(3, 0)))
        self.bd = nn.Sequential(basic(cin, c7, 1), basic(c7, c7, (7, 1), padding=(3, 0)),
                                basic(c7, c7, (1, 7), padding=(0, 3)), basic(c7, c7, (7, 1), padding=(3, 0)),
                                basic(c7, c(192), (1, 7), padding=(0, 3)))
        self.bp = basic(cin, c(192), 1)
        self.out = 4 * c(192)

    def forward(self, x):
        pool = self.bp(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), pool], 1)


class InceptionD(nn.Module):
    def __init__(self, cin: int, c: _Width):
        super().__init__()
        self.b3 = nn.Sequential(basic(cin, c(192), 1), basic(c(192), c(320), 3, 2))
        self.b7 = nn.Sequential(basic(cin, c(192), 1), basic(c(192), c(192), (1, 7), padding=(0, 3)),
                                basic(c(192), c(192), (7, 1), padding=(3, 0)), basic(c(192), c(192), 3, 2))
        self.out = c(320) + c(192) + cin

    def forward(self, x):
        return torch.cat([self.b3(x), self.b7(x), F.max_pool2d(x, 3, 2)], 1)


class InceptionE(nn.Module):
    def __init__(self, cin: int, c: _Width):
        super().__init__()
        self.b1 = basic(cin, c(320), 1)
        self.b3_1 = basic(cin, c(384), 1)
        self.b3_2a, self.b3_2b = basic(c(384), c(384), (1, 3), padding=(0, 1)), basic(c(384), c(384), (3, 1), padding=(1, 0))
        self.bd_1 = nn.Sequential(basic(cin, c(448), 1), basic(c(448), c(384), 3, padding=1))
        self.bd_3a, self.bd_3b = basic(c(384), c(384), (1, 3), padding=(0, 1)), basic(c(384), c(384), (3, 1), padding=(1, 0))
        self.bp = basic(cin, c(192), 1)
        self.out = c(320) + 4 * c(384) + c(192)

    def forward(self, x):
        b3 = self.b3_1(x)
        b3 = torch.cat([self.b3_2a(b3), self.b3_2b(b3)], 1)
        bd = self.bd_1(x)
        bd = torch.cat([self.bd_3a(bd), self.bd_3b(bd)], 1)
        pool = self.bp(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([self.b1(x), b3, bd, pool], 1)


class Inception3(nn.Module):
    """torchvision's Inception-v3 at inference (no auxiliary classifier); ``full`` False keeps one module of each
    kind (A, B, C, D, E)."""

    def __init__(self, w: float = 1.0, full: bool = True, num_classes: int = 1000):
        super().__init__()
        c = _Width(w)
        stem = [basic(3, c(32), 3, 2), basic(c(32), c(32), 3), basic(c(32), c(64), 3, padding=1),
                nn.MaxPool2d(3, 2), basic(c(64), c(80), 1), basic(c(80), c(192), 3), nn.MaxPool2d(3, 2)]
        mods: list[nn.Module] = []
        cin = c(192)

        def add(m: nn.Module) -> None:
            nonlocal cin
            mods.append(m)
            cin = m.out

        for pool in ((32, 64, 64) if full else (32,)):
            add(InceptionA(cin, pool, c))
        add(InceptionB(cin, c))
        for c7 in ((128, 160, 160, 192) if full else (128,)):
            add(InceptionC(cin, c7, c))
        add(InceptionD(cin, c))
        for _ in range(2 if full else 1):
            add(InceptionE(cin, c))
        self.features = nn.Sequential(*stem, *mods)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.dropout(self.avgpool(self.features(x))), 1))


def inception_v3(small: bool = True) -> Example:
    if small:
        return _prepare(Inception3(1 / 8, full=False, num_classes=10), _image(1, 3, 75))
    return _prepare(Inception3(), _image(1, 3, 299))


# ------------------------------------------------------------------------------------------- DenseNet

class DenseLayer(nn.Module):
    """Pre-activation bottleneck over the concatenation of every earlier feature map of its block."""

    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))


class DenseBlock(nn.ModuleList):
    def forward(self, x):
        features = [x]
        for layer in self:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, growth: int, blocks: tuple[int, ...], init: int, bn_size: int = 4, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, init, 7, 2, 3, bias=False), nn.BatchNorm2d(init), nn.ReLU(inplace=True),
                                   nn.MaxPool2d(3, 2, 1)]
        c = init
        for i, n in enumerate(blocks):
            layers.append(DenseBlock([DenseLayer(c + k * growth, growth, bn_size) for k in range(n)]))
            c += n * growth
            if i + 1 < len(blocks):
                layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                c //= 2
        layers.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x):
        out = F.adaptive_avg_pool2d(F.relu(self.features(x), inplace=True), (1, 1))
        return self.classifier(torch.flatten(out, 1))


def densenet121(small: bool = True) -> Example:
    if small:
        return _prepare(DenseNet(8, (2, 2, 2, 2), 16, num_classes=10), _image(1, 3, 32))
    return _prepare(DenseNet(32, (6, 12, 24, 16), 64), _image(1, 3, 224))


# ------------------------------------------------------------------------------------------- RegNetY

class RegNetBlock(nn.Module):
    """torchvision's ResBottleneckBlock of RegNetY: 1x1, grouped 3x3 (groups of ``group_width`` channels),
    squeeze-excitation of a quarter of the block's input width, 1x1; projected shortcut where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int, se_ratio: float = 0.25):
        super().__init__()
        self.proj = conv_bn(cin, cout, 1, stride, act=None) if cin != cout or stride != 1 else None
        self.f = nn.Sequential(conv_bn(cin, cout, 1), conv_bn(cout, cout, 3, stride, groups=cout // group_width),
                               SqueezeExcitation(cout, int(round(se_ratio * cin))), conv_bn(cout, cout, 1, act=None))
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = self.proj(x) if self.proj is not None else x
        return self.activation(shortcut + self.f(x))


class RegNet(nn.Module):
    def __init__(self, widths: list[int], depths: list[int], group_width: int, stem: int = 32,
                 num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, stem, 3, 2)]
        cin = stem
        for w, d in zip(widths, depths):
            layers += [RegNetBlock(cin if i == 0 else w, w, 2 if i == 0 else 1, group_width) for i in range(d)]
            cin = w
        self.trunk = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.trunk(x)), 1))


def regnet_y(small: bool = True) -> Example:
    """RegNetY-400MF (stage widths and depths as torchvision computes them from w_0=48, w_a=27.89, w_m=2.09)."""
    if small:
        return _prepare(RegNet([16, 32], [1, 2], 8, stem=16, num_classes=10), _image(1, 3, 32))
    return _prepare(RegNet([48, 104, 208, 440], [1, 3, 6, 6], 8), _image(1, 3, 224))


# ------------------------------------------------------------------------------------------- the ONNX zoo's opset-9 nets

class _InferenceDropout(torch.autograd.Function):
    """A Dropout the exporter writes although the module is in eval mode (the legacy exporter drops them)."""

    @staticmethod
    def forward(ctx, x, ratio: float):
        return x

    @staticmethod
    def symbolic(g, x, ratio: float):
        return g.op("Dropout", x, ratio_f=ratio)


class ExportedDropout(nn.Module):
    def __init__(self, ratio: float = 0.5):
        super().__init__()
        self.ratio = ratio

    def forward(self, x):
        return _InferenceDropout.apply(x, self.ratio)


class _LRN(torch.autograd.Function):
    """Local response normalization written as one ONNX LRN node, as the zoo's files have it (PyTorch's exporter
    writes ``F.local_response_norm`` as the pads, pools and powers it is computed by)."""

    @staticmethod
    def forward(ctx, x, size: int, alpha: float, beta: float, k: float):
        return F.local_response_norm(x, size, alpha, beta, k)

    @staticmethod
    def symbolic(g, x, size: int, alpha: float, beta: float, k: float):
        return g.op("LRN", x, size_i=size, alpha_f=alpha, beta_f=beta, bias_f=k)


class LRN(nn.Module):
    """Caffe's LRN across 5 channels (alpha 1e-4, beta 0.75)."""

    def forward(self, x):
        return _LRN.apply(x, 5, 1e-4, 0.75, 1.0)


def _conv_relu(cin: int, cout: int, k: int, stride: int = 1, padding: int = 0, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, padding, groups=groups), nn.ReLU(inplace=True)]


class AlexNet(nn.Module):
    """BVLC AlexNet (the ONNX model zoo's bvlc_alexnet): LRN, convolutions in two groups, dropout, softmax."""

    def __init__(self, w: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c = _Width(w)
        self.features = nn.Sequential(
            *_conv_relu(3, c(96), 11, 4), LRN(), nn.MaxPool2d(3, 2, ceil_mode=True),
            *_conv_relu(c(96), c(256), 5, padding=2, groups=2), LRN(), nn.MaxPool2d(3, 2, ceil_mode=True),
            *_conv_relu(c(256), c(384), 3, padding=1), *_conv_relu(c(384), c(384), 3, padding=1, groups=2),
            *_conv_relu(c(384), c(256), 3, padding=1, groups=2), nn.MaxPool2d(3, 2, ceil_mode=True))
        self.classifier = nn.Sequential(nn.Linear(c(256) * 36, c(4096)), nn.ReLU(inplace=True), ExportedDropout(),
                                        nn.Linear(c(4096), c(4096)), nn.ReLU(inplace=True), ExportedDropout(),
                                        nn.Linear(c(4096), num_classes), nn.Softmax(1))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def alexnet(small: bool = True) -> Example:
    return _prepare(AlexNet(1 / 16, 10) if small else AlexNet(), _image(1, 3, 227))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, e1: int, e3: int):
        super().__init__()
        self.squeeze = nn.Sequential(*_conv_relu(cin, squeeze, 1))
        self.e1, self.e3 = nn.Sequential(*_conv_relu(squeeze, e1, 1)), nn.Sequential(*_conv_relu(squeeze, e3, 3, padding=1))

    def forward(self, x):
        x = self.squeeze(x)
        return torch.cat([self.e1(x), self.e3(x)], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.0: Fire modules, ceil-mode pooling, dropout, a 1x1 classifier convolution, global pooling,
    softmax."""

    def __init__(self, w: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c = _Width(w)

        def fire(cin, s, e):
            return Fire(c(cin), c(s), c(e), c(e))

        self.features = nn.Sequential(
            *_conv_relu(3, c(96), 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), fire(96, 16, 64), fire(128, 16, 64),
            fire(128, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True), fire(256, 32, 128), fire(256, 48, 192),
            fire(384, 48, 192), fire(384, 64, 256), nn.MaxPool2d(3, 2, ceil_mode=True), fire(512, 64, 256))
        self.classifier = nn.Sequential(ExportedDropout(), *_conv_relu(2 * c(256), num_classes, 1),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.softmax(torch.flatten(self.classifier(self.features(x)), 1), 1)


def squeezenet(small: bool = True) -> Example:
    if small:
        return _prepare(SqueezeNet(1 / 4, 10), _image(1, 3, 64))
    return _prepare(SqueezeNet(), _image(1, 3, 224))


class InceptionModule(nn.Module):
    """GoogLeNet's inception module: 1x1; 1x1 -> 3x3; 1x1 -> 5x5; 3x3 max pool -> 1x1; concatenated."""

    def __init__(self, cin: int, b1: int, r3: int, b3: int, r5: int, b5: int, bp: int):
        super().__init__()
        self.b1 = nn.Sequential(*_conv_relu(cin, b1, 1))
        self.b3 = nn.Sequential(*_conv_relu(cin, r3, 1), *_conv_relu(r3, b3, 3, padding=1))
        self.b5 = nn.Sequential(*_conv_relu(cin, r5, 1), *_conv_relu(r5, b5, 5, padding=2))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), *_conv_relu(cin, bp, 1))
        self.out = b1 + b3 + b5 + bp

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


GOOGLENET = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64), "pool3": None,
             "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
             "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128), "pool4": None,
             "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128)}


class GoogLeNet(nn.Module):
    """BVLC GoogLeNet (Inception-v1, the ONNX model zoo's bvlc_googlenet): LRN, nine inception modules, average
    pooling over the last map, dropout 0.4, softmax."""

    def __init__(self, w: float = 1.0, last_map: int = 7, num_classes: int = 1000):
        super().__init__()
        c = _Width(w)
        layers = [*_conv_relu(3, c(64), 7, 2, 3), nn.MaxPool2d(3, 2, ceil_mode=True), LRN(),
                  *_conv_relu(c(64), c(64), 1), *_conv_relu(c(64), c(192), 3, padding=1), LRN(),
                  nn.MaxPool2d(3, 2, ceil_mode=True)]
        cin = c(192)
        for row in GOOGLENET.values():
            if row is None:
                layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
                continue
            layers.append(InceptionModule(cin, *(c(n) for n in row)))
            cin = layers[-1].out
        self.features = nn.Sequential(*layers, nn.AvgPool2d(last_map, 1))
        self.classifier = nn.Sequential(ExportedDropout(0.4), nn.Linear(cin, num_classes), nn.Softmax(1))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def googlenet(small: bool = True) -> Example:
    if small:
        return _prepare(GoogLeNet(1 / 8, 2, 10), _image(1, 3, 64))
    return _prepare(GoogLeNet(), _image(1, 3, 224))


# ------------------------------------------------------------------------------------------- small nets

class DQN(nn.Module):
    """The Nature DQN (Mnih et al. 2015): three convolutions over 4 stacked 84x84 frames, fc 512, one value per
    action."""

    def __init__(self, actions: int = 18):
        super().__init__()
        self.net = nn.Sequential(*_conv_relu(4, 32, 8, 4), *_conv_relu(32, 64, 4, 2), *_conv_relu(64, 64, 3, 1),
                                 nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, actions))

    def forward(self, x):
        return self.net(x)


def dqn(small: bool = True) -> Example:
    """The same net in both sizes (it is small)."""
    x = torch.rand(1, 4, 84, 84, generator=torch.Generator().manual_seed(1))
    return _prepare(DQN(), (x,))


class DCGANGenerator(nn.Module):
    """The DCGAN generator of the PyTorch examples: transposed convolutions with batch norm and ReLU, Tanh."""

    def __init__(self, nz: int = 100, ngf: int = 64, nc: int = 3):
        super().__init__()
        layers: list[nn.Module] = []
        chans = [nz, ngf * 8, ngf * 4, ngf * 2, ngf]
        for i, (cin, cout) in enumerate(zip(chans, chans[1:])):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 1 if i == 0 else 2, 0 if i == 0 else 1, bias=False),
                       nn.BatchNorm2d(cout), nn.ReLU(True)]
        self.main = nn.Sequential(*layers, nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


def dcgan(small: bool = True) -> Example:
    nz = 16 if small else 100
    z = torch.randn(1, nz, 1, 1, generator=torch.Generator().manual_seed(1))
    return _prepare(DCGANGenerator(nz, 8 if small else 64), (z,))


class LSTMLanguageModel(nn.Module):
    """The word language model of the PyTorch examples (Zaremba et al. medium: 650 units, 2 layers): embedding,
    LSTM, linear decoder, log-softmax; the hidden state in and out."""

    def __init__(self, vocab: int, hidden: int, layers: int = 2):
        super().__init__()
        self.encoder = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden, layers, dropout=0.5)
        self.decoder = nn.Linear(hidden, vocab)
        self.vocab = vocab

    def forward(self, tokens, h0, c0):
        output, (h, c) = self.rnn(self.encoder(tokens), (h0, c0))
        decoded = self.decoder(output).view(-1, self.vocab)
        return F.log_softmax(decoded, dim=1), h, c


def lstm_lm(small: bool = True) -> Example:
    vocab, hidden, steps = (100, 32, 5) if small else (10000, 650, 35)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (steps, 1), generator=gen)
    states = tuple(torch.randn(2, 1, hidden, generator=gen) * 0.5 for _ in range(2))
    torch.manual_seed(0)
    return LSTMLanguageModel(vocab, hidden).eval(), (tokens, *states)


class GRUClassifier(nn.Module):
    """A batch-first, bidirectional 2-layer GRU over feature frames; its last step classified."""

    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.gru = nn.GRU(features, hidden, 2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.fc(out[:, -1])


def gru(small: bool = True) -> Example:
    features, hidden, steps = (16, 24, 6) if small else (80, 256, 100)
    x = torch.randn(1, steps, features, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    return GRUClassifier(features, hidden, 10).eval(), (x,)


# ------------------------------------------------------------------------------------------- transformers

class _LastHidden(nn.Module):
    """A ``transformers`` model that returns its last hidden state tensor."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        return self.model(*inputs).last_hidden_state


def _tokens(vocab: int, seq: int, masked: int = 0) -> tuple[torch.Tensor, ...]:
    """Token ids ``[1, seq]``, and with ``masked`` an attention mask whose last ``masked`` tokens are padding."""
    ids = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(1))
    if not masked:
        return (ids,)
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[:, seq - masked:] = 0
    return ids, mask


def bert(small: bool = True) -> Example:
    """BERT's encoder (base in full: 12 layers of 768, 12 heads, 128 tokens), token ids and a padding mask."""
    from transformers import BertConfig, BertModel

    sizes = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  vocab_size=1000) if small else {})
    torch.manual_seed(0)
    model = BertModel(BertConfig(**sizes), add_pooling_layer=False)
    seq = 13 if small else 128
    return _LastHidden(model).eval(), _tokens(model.config.vocab_size, seq, seq // 8)


def distilbert(small: bool = True) -> Example:
    """DistilBERT (6 layers of 768, 12 heads, 128 tokens in full), token ids and a padding mask."""
    from transformers import DistilBertConfig, DistilBertModel

    sizes = dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=1000) if small else {}
    torch.manual_seed(0)
    model = DistilBertModel(DistilBertConfig(**sizes))
    seq = 16 if small else 128
    return _LastHidden(model).eval(), _tokens(model.config.vocab_size, seq, seq // 8)


def gpt2(small: bool = True) -> Example:
    """GPT-2 (small in full: 12 layers of 768, 12 heads, 64 tokens), causal, without a key/value cache."""
    from transformers import GPT2Config, GPT2Model

    sizes = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=64) if small else {}
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(use_cache=False, **sizes))
    return _LastHidden(model).eval(), _tokens(model.config.vocab_size, 11 if small else 64)


def vit(small: bool = True) -> Example:
    """ViT (B/16 in full: 12 layers of 768 over the 196 patches of a 224x224 image and the class token)."""
    from transformers import ViTConfig, ViTModel

    sizes = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  image_size=32, patch_size=8) if small else {})
    torch.manual_seed(0)
    model = ViTModel(ViTConfig(**sizes), add_pooling_layer=False)
    size = model.config.image_size
    return _LastHidden(model).eval(), _image(1, 3, size)


def whisper_encoder(small: bool = True) -> Example:
    """Whisper's encoder (tiny in full: 4 layers of 384, 6 heads, 3000 mel frames), random weights."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    sizes = (dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                  max_source_positions=50) if small else
             dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                  max_source_positions=1500))
    config = WhisperConfig(num_mel_bins=80, decoder_layers=1, decoder_attention_heads=4, **sizes)
    torch.manual_seed(0)
    frames = 2 * sizes["max_source_positions"]
    x = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(1))
    return _LastHidden(WhisperEncoder(config)).eval(), (x,)


def wav2vec2(small: bool = True) -> Example:
    """wav2vec2 (base in full: the 7-layer convolutional feature encoder, 12 transformer layers of 768) on one
    second of audio, random weights."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    sizes = (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4) if small else
             dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                  conv_dim=(512,) * 7, num_conv_pos_embeddings=128, num_conv_pos_embedding_groups=16))
    config = Wav2Vec2Config(feat_extract_norm="group", do_stable_layer_norm=False, **sizes)
    torch.manual_seed(0)
    x = torch.randn(1, 4000 if small else 16000, generator=torch.Generator().manual_seed(1))
    return _LastHidden(Wav2Vec2Model(config)).eval(), (x,)


# ------------------------------------------------------------------------------------------- export

def to_onnx(module: nn.Module, inputs: tuple[torch.Tensor, ...], opset: int = 17, dynamo: bool = False,
            input_names: tuple[str, ...] = ("input",), output_names: tuple[str, ...] = ("output",),
            dynamic_axes: dict[str, dict[int, str]] | None = None) -> onnx.ModelProto:
    """``module`` exported by ``torch.onnx.export``: the legacy TorchScript exporter, or the dynamo one (which
    writes opset 18 or later; ``opset`` below 18 is raised to 18)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            dynamic_shapes = None
            if dynamic_axes:
                dynamic_shapes = tuple({a: torch.export.Dim.AUTO for a in dynamic_axes.get(n, {})} or None
                                       for n in input_names)
            program = torch.onnx.export(module, inputs, dynamo=True, opset_version=max(opset, 18),
                                        input_names=list(input_names), output_names=list(output_names),
                                        dynamic_shapes=dynamic_shapes, verbose=False)
            return program.model_proto
        f = io.BytesIO()
        torch.onnx.export(module, inputs, f, dynamo=False, opset_version=opset, input_names=list(input_names),
                          output_names=list(output_names), dynamic_axes=dynamic_axes)
        return onnx.load_model_from_string(f.getvalue())


def with_dropout_masks(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every Dropout node given a mask output that nothing reads, as the ONNX model zoo's old files have them."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for n in out.graph.node:
        if n.op_type == "Dropout" and len(n.output) < 2:
            n.output.append(f"{n.output[0]}_mask")
    return out


@dataclass(frozen=True)
class ZooModel:
    """A network and how it is exported."""
    build: Callable[[bool], Example]
    opset: int = 17
    input_names: tuple[str, ...] = ("input",)
    output_names: tuple[str, ...] = ("output",)
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    dropout_masks: bool = False
    dynamo: bool = False  # the legacy exporter cannot export it (GPT-2's masks call aten::diff)


_OLD_ZOO = dict(opset=9, dropout_masks=True)

ZOO: dict[str, ZooModel] = {
    "resnet50": ZooModel(resnet50, dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}),
    "resnext50": ZooModel(resnext50),
    "mobilenet_v3": ZooModel(mobilenet_v3),
    "efficientnet_b0": ZooModel(efficientnet_b0),
    "convnext": ZooModel(convnext),
    "deeplabv3": ZooModel(deeplabv3),
    "unet": ZooModel(unet),
    "unet_transposed": ZooModel(unet_transposed),
    "shufflenet_v2": ZooModel(shufflenet_v2),
    "inception_v3": ZooModel(inception_v3),
    "densenet121": ZooModel(densenet121),
    "regnet_y": ZooModel(regnet_y),
    "alexnet": ZooModel(alexnet, **_OLD_ZOO),
    "squeezenet": ZooModel(squeezenet, **_OLD_ZOO),
    "googlenet": ZooModel(googlenet, **_OLD_ZOO),
    "whisper_encoder": ZooModel(whisper_encoder, input_names=("input_features",)),
    "wav2vec2": ZooModel(wav2vec2, input_names=("input_values",)),
    "bert": ZooModel(bert, input_names=("input_ids", "attention_mask")),
    "distilbert": ZooModel(distilbert, input_names=("input_ids", "attention_mask")),
    "gpt2": ZooModel(gpt2, input_names=("input_ids",), dynamo=True),
    "vit": ZooModel(vit, input_names=("pixel_values",)),
    "lstm_lm": ZooModel(lstm_lm, input_names=("tokens", "h0", "c0"), output_names=("log_probs", "h", "c"),
                        dynamic_axes={"tokens": {0: "steps"}, "log_probs": {0: "steps"}}),
    "gru": ZooModel(gru),
    "dcgan": ZooModel(dcgan),
    "dqn": ZooModel(dqn),
}


def export(name: str, small: bool = True, dynamo: bool = False) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The zoo network ``name`` as an ONNX model and the feeds of its example inputs."""
    z = ZOO[name]
    module, inputs = z.build(small)
    model = to_onnx(module, inputs, z.opset, dynamo or z.dynamo, z.input_names, z.output_names, z.dynamic_axes or None)
    if z.dropout_masks:
        model = with_dropout_masks(model)
    return model, {n: x.numpy() for n, x in zip(z.input_names, inputs)}


def static_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]] | None:
    """The feeds' shapes for the inputs of ``model`` declared with dynamic dimensions (None when there are none):
    what ``tensortune.network.compile`` needs as ``shapes=``."""
    dynamic = {i.name for i in model.graph.input if any(not d.HasField("dim_value") for d in
                                                         i.type.tensor_type.shape.dim)}
    return {n: tuple(feeds[n].shape) for n in dynamic if n in feeds} or None


def main() -> None:  # pragma: no cover - a quick look from the command line
    import sys

    for name in sys.argv[1:] or ZOO:
        model, _ = export(name)
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"{name}: opset {model.opset_import[0].version}, {len(model.graph.node)} nodes: {' '.join(ops)}")


if __name__ == "__main__":  # pragma: no cover
    main()
