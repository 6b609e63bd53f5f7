"""The held-out suite's torch models: architectures the zoo and the test fixtures lack.

Imported only by ``export_torch.py`` once it knows torch and torchvision are installed.
Every model is built with random weights (``weights=None``, no hub download) after
``torch.manual_seed(0)``; BatchNorm statistics are then made non-trivial (seeded) so that
folding them is exercised. Each builder returns the module in eval mode and its example
inputs (static shapes: the exported file needs no ``--input-shape``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torchvision
from torch import nn
from torchvision.models.detection import ssdlite320_mobilenet_v3_large
from torchvision.models.segmentation import lraspp_mobilenet_v3_large
from torchvision.models.swin_transformer import SwinTransformer

Inputs = tuple[torch.Tensor, ...]


def _image(size: int) -> Inputs:
    return (torch.randn(1, 3, size, size),)


def regnet_x_400mf() -> tuple[nn.Module, Inputs]:
    """torchvision RegNetX-400MF: grouped 3x3 convs in residual bottlenecks, 224x224."""
    return torchvision.models.regnet_x_400mf(weights=None), _image(224)


def convnext_tiny() -> tuple[nn.Module, Inputs]:
    """torchvision ConvNeXt-T: 7x7 depthwise, channels-last LayerNorm, GELU, layer scale."""
    return torchvision.models.convnext_tiny(weights=None), _image(224)


def mnasnet1_0() -> tuple[nn.Module, Inputs]:
    """torchvision MNASNet 1.0: NAS-found inverted residuals with 3x3 and 5x5 depthwise."""
    return torchvision.models.mnasnet1_0(weights=None), _image(224)


def swin_mini() -> tuple[nn.Module, Inputs]:
    """A Swin transformer (shifted 7x7 windows, relative position bias), embed 48, 2-2-2-2."""
    model = SwinTransformer(
        patch_size=[4, 4],
        embed_dim=48,
        depths=[2, 2, 2, 2],
        num_heads=[3, 6, 12, 24],
        window_size=[7, 7],
        num_classes=100,
    )
    return model, _image(224)


class _SSDLiteRaw(nn.Module):
    """SSDLite's MobileNetV3 backbone and its head: raw box offsets and class logits.

    The anchors, box decoding and NMS (data-dependent shapes) are left to the caller, as
    deployed detectors usually do.
    """

    def __init__(self) -> None:
        super().__init__()
        ssd = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)
        self.backbone = ssd.backbone
        self.head = ssd.head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.head(list(self.backbone(x).values()))
        return out["bbox_regression"], out["cls_logits"]


def ssdlite_head() -> tuple[nn.Module, Inputs]:
    """SSDLite320 (MobileNetV3-large, 6 feature maps, depthwise heads), 320x320."""
    return _SSDLiteRaw(), _image(320)


class _LRASPP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def lraspp_segmentation() -> tuple[nn.Module, Inputs]:
    """LR-ASPP segmentation (MobileNetV3-large, pooled gate, bilinear upsampling), 256x256."""
    return _LRASPP(), _image(256)


class _LSTMText(nn.Module):
    """A text classifier: embeddings, a 2-layer bidirectional LSTM, mean pool, linear."""

    def __init__(self, vocab: int = 5000, dim: int = 128, hidden: int = 192) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.classify = nn.Linear(2 * hidden, 20)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        states, _ = self.lstm(self.embed(ids))
        return self.classify(states.mean(dim=1))


def lstm_text() -> tuple[nn.Module, Inputs]:
    """A bidirectional 2-layer LSTM text classifier on 64 int64 token ids."""
    return _LSTMText(), (torch.randint(0, 5000, (1, 64)),)


MODELS: dict[str, Callable[[], tuple[nn.Module, Inputs]]] = {
    f.__name__: f
    for f in (
        regnet_x_400mf,
        convnext_tiny,
        mnasnet1_0,
        swin_mini,
        ssdlite_head,
        lraspp_segmentation,
        lstm_text,
    )
}


def randomise_norms(model: nn.Module) -> None:
    """Seeded, non-trivial BatchNorm statistics and affine weights."""
    generator = torch.Generator().manual_seed(2)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            assert module.running_mean is not None and module.running_var is not None
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
            module.weight.data.copy_(torch.rand(n, generator=generator) * 0.4 + 0.8)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)


def build(name: str) -> tuple[nn.Module, Inputs]:
    """Model ``name`` in eval mode with seeded weights, and its seeded example inputs."""
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    model.eval()
    with torch.no_grad():
        randomise_norms(model)
    return model, inputs
