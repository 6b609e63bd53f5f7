"""Export seven small modern architectures to ONNX test fixtures (dev-only).

This script is **not** part of the ``autopart`` package, and ``torch`` is **not** a
runtime or test dependency: it only (re)generates the committed fixtures
``tests/fixtures/<name>.onnx`` that ``tests/test_fixtures_modern.py`` runs on every
codegen. Regenerate them from the repository root with::

    pip install torch==2.13.0 onnxscript  # dev-only (torch 2.13.0+cpu, onnxscript 0.7.2)
    python scripts/export_fixtures.py            # all fixtures
    python scripts/export_fixtures.py vit_tiny gpt_tiny  # some of them

Exporter: torch 2.13's default, ``torch.onnx.export(model, args)`` with every option at
its default, which is the dynamo (``torch.export``) exporter at its default opset 20 with
the onnxscript optimizer. The only non-default is how the file is written: the program is
saved with its weights inside the ``.onnx`` (``external_data=False``) so each fixture is one
file. ``torch.export`` traces with static shapes unless told otherwise, so every input and
output shape is static (batch 1); no ``--input-shape`` is needed.

The models are written here in ``torch.nn`` (no torchvision), scaled down so that each file
stays well under 3 MB, with weights from ``torch.manual_seed(0)``; the layer recipes follow
the published architectures:

=================  =========================================  ==================  =======
fixture            architecture                               input               size
=================  =========================================  ==================  =======
mobilenetv3_small  MobileNetV3-small, width 0.5, SE, h-swish  float32 1x3x96x96   1.5 MB
efficientnet_b0    EfficientNet-B0 stages, width 0.5, 1 block float32 1x3x96x96   1.9 MB
                   per stage, SiLU, SE, 5x5 depthwise
vit_tiny           ViT: 8x8 patches, 4 layers, d=96, 4 heads  float32 1x3x64x64   1.9 MB
bert_tiny          BERT: word/pos/type embeddings, 2 layers,  int64 1x32 ids,     2.2 MB
                   d=128, additive attention mask             int64 1x32 mask
gpt_tiny           GPT-2 style pre-norm causal decoder, 2     int64 1x32 ids      2.1 MB
                   layers, d=128, tied LM head
unet_small         UNet, 3 levels, ConvTranspose up, one      float32 1x3x64x64   0.5 MB
                   bilinear Resize skip
yolo_head          YOLO-style: backbone, FPN with nearest     float32 1x3x128x128 0.9 MB
                   Resize + Concat, 3 anchors, Split+Sigmoid
=================  =========================================  ==================  =======

(sizes as printed by the run that wrote the committed files). The exporter's per-node
metadata (stack traces naming this checkout's paths) is dropped so that a re-export is
byte-identical. After each export the script runs ``onnx.checker``, prints the opset, size
and operator histogram, refuses a file of 3 MB or more, and checks with onnxruntime that
the ONNX outputs match PyTorch.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the usual spelling

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
MAX_BYTES = 3 * 1024 * 1024
TOLERANCE = 1e-3


def conv_bn(cin: int, cout: int, k: int, s: int = 1, groups: int = 1) -> list[nn.Module]:
    """Conv (no bias) + BatchNorm, padding 'same' for odd kernels."""
    return [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: global pool, two 1x1 convs, a gate multiplied back in."""

    def __init__(self, channels: int, squeezed: int, gate: nn.Module, act: nn.Module) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.act, self.gate = act, gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvertedResidual(nn.Module):
    """MobileNetV3 / EfficientNet block: expand 1x1, depthwise kxk, optional SE, project."""

    def __init__(
        self, cin: int, expand: int, cout: int, k: int, s: int, se: SqueezeExcite | None,
        act: Callable[[], nn.Module],
    ) -> None:  # fmt: skip
        super().__init__()
        layers: list[nn.Module] = []
        if expand != cin:
            layers += [*conv_bn(cin, expand, 1), act()]
        layers += [*conv_bn(expand, expand, k, s, groups=expand), act()]
        if se is not None:
            layers.append(se)
        layers += conv_bn(expand, cout, 1)
        self.block = nn.Sequential(*layers)
        self.residual = s == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


def _div8(v: float) -> int:
    return max(8, int(v + 4) // 8 * 8)


class MobileNetV3Small(nn.Module):
    """MobileNetV3-small (Howard et al. 2019) at width 0.5, 100 classes."""

    # kernel, expansion, out, SE, h-swish, stride (the paper's table 2)
    CONFIG: ClassVar[list[tuple[int, int, int, bool, bool, int]]] = [
        (3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1),
        (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
        (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1), (5, 288, 96, True, True, 2),
        (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1),
    ]  # fmt: skip

    def __init__(self, width: float = 0.5, classes: int = 100) -> None:
        super().__init__()
        cin = _div8(16 * width)
        layers: list[nn.Module] = [*conv_bn(3, cin, 3, 2), nn.Hardswish()]
        for k, exp, out, se, hs, s in self.CONFIG:
            exp, out = _div8(exp * width), _div8(out * width)
            act = nn.Hardswish if hs else nn.ReLU
            gate = nn.Hardsigmoid()
            squeeze = SqueezeExcite(exp, _div8(exp / 4), gate, nn.ReLU()) if se else None
            layers.append(InvertedResidual(cin, exp, out, k, s, squeeze, act))
            cin = out
        last = _div8(576 * width)
        layers += [*conv_bn(cin, last, 1), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(last, 256), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(256, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


class EfficientNetB0(nn.Module):
    """EfficientNet-B0 (Tan & Le 2019) stages at width 0.5, one block per stage."""

    # expansion ratio, kernel, stride, out channels (the paper's table 1)
    STAGES: ClassVar[list[tuple[int, int, int, int]]] = [
        (1, 3, 1, 16), (6, 3, 2, 24), (6, 5, 2, 40), (6, 3, 2, 80), (6, 5, 1, 112),
        (6, 5, 2, 192), (6, 3, 1, 320),
    ]  # fmt: skip

    def __init__(self, width: float = 0.5, classes: int = 100) -> None:
        super().__init__()
        cin = _div8(32 * width)
        layers: list[nn.Module] = [*conv_bn(3, cin, 3, 2), nn.SiLU()]
        for ratio, k, s, out in self.STAGES:
            out, exp = _div8(out * width), cin * ratio
            squeeze = SqueezeExcite(exp, max(1, cin // 4), nn.Sigmoid(), nn.SiLU())
            layers.append(InvertedResidual(cin, exp, out, k, s, squeeze, nn.SiLU))
            cin = out
        layers += [*conv_bn(cin, _div8(1280 * width), 1), nn.SiLU()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(_div8(1280 * width), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class Attention(nn.Module):
    """Multi-head self-attention through ``scaled_dot_product_attention``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Transformer layer, pre-norm (ViT, GPT) or post-norm (BERT)."""

    def __init__(self, dim: int, heads: int, pre_norm: bool, gelu: str = "none") -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(gelu), nn.Linear(4 * dim, dim))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.norm1(x), mask, causal)
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask, causal))
        return self.norm2(x + self.mlp(x))


class ViT(nn.Module):
    """Vision transformer (Dosovitskiy et al. 2021): patches, class token, 4 layers."""

    def __init__(self, image: int = 64, patch: int = 8, dim: int = 96, depth: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, 4, pre_norm=True) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class Bert(nn.Module):
    """BERT encoder (Devlin et al. 2019): 2 post-norm layers and a tanh pooler."""

    def __init__(self, vocab: int = 1000, dim: int = 128, depth: int = 2, seq: int = 64) -> None:
        super().__init__()
        self.words, self.positions = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.types = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(Block(dim, 4, pre_norm=False) for _ in range(depth))
        self.pooler = nn.Linear(dim, dim)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = input_ids.shape[1]
        positions = torch.arange(n, device=input_ids.device).unsqueeze(0)
        types = self.types(torch.zeros_like(input_ids))
        x = self.words(input_ids) + self.positions(positions) + types
        x = self.norm(x)
        # the HF recipe: (1 - mask) * finfo.min, broadcast over heads and queries
        extended = attention_mask[:, None, None, :].to(x.dtype)
        additive = (1.0 - extended) * torch.finfo(x.dtype).min
        for block in self.blocks:
            x = block(x, additive)
        return x, torch.tanh(self.pooler(x[:, 0]))


class Gpt(nn.Module):
    """GPT-2 style decoder (Radford et al. 2019): causal attention, tanh GELU, tied head."""

    def __init__(self, vocab: int = 1000, dim: int = 128, depth: int = 2, seq: int = 64) -> None:
        super().__init__()
        self.words, self.positions = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, 4, True, "tanh") for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.words(input_ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x, causal=True)
        return self.norm(x) @ self.words.weight.T


def double_conv(cin: int, cout: int) -> nn.Sequential:
    """Two 3x3 Conv + BatchNorm + ReLU."""
    return nn.Sequential(*conv_bn(cin, cout, 3), nn.ReLU(), *conv_bn(cout, cout, 3), nn.ReLU())


class UNet(nn.Module):
    """UNet (Ronneberger et al. 2015), 3 levels: ConvTranspose up, and a bilinear skip."""

    def __init__(self, base: int = 16, classes: int = 4) -> None:
        super().__init__()
        c1, c2, c3 = base, 2 * base, 4 * base
        self.enc1, self.enc2 = double_conv(3, c1), double_conv(c1, c2)
        self.mid = double_conv(c2, c3)
        self.up2 = nn.ConvTranspose2d(c3, c2, 2, 2)
        self.dec2 = double_conv(2 * c2, c2)
        self.up1 = nn.ConvTranspose2d(c2, c1, 2, 2)
        self.dec1 = double_conv(2 * c1 + c3, c1)
        self.out = nn.Conv2d(c1, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        deep = F.interpolate(m, scale_factor=4.0, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([self.up1(d2), e1, deep], 1))
        return self.out(d1)


class YoloHead(nn.Module):
    """YOLOv3/v5-style: a small backbone, an FPN neck (nearest Resize + Concat), and a
    head per scale that splits its output into xy, wh, objectness and classes and decodes
    them with Sigmoid into boxes on a grid."""

    def __init__(self, classes: int = 8, anchors: int = 3) -> None:
        super().__init__()
        act = nn.SiLU
        self.s8 = nn.Sequential(*conv_bn(3, 16, 3, 2), act(), *conv_bn(16, 32, 3, 2), act(),
                                *conv_bn(32, 32, 3, 2), act())  # fmt: skip
        self.s16 = nn.Sequential(*conv_bn(32, 64, 3, 2), act())
        self.s32 = nn.Sequential(*conv_bn(64, 128, 3, 2), act())
        self.lat32 = nn.Sequential(*conv_bn(128, 64, 1), act())
        self.fuse16 = nn.Sequential(*conv_bn(128, 64, 3), act())
        self.lat16 = nn.Sequential(*conv_bn(64, 32, 1), act())
        self.fuse8 = nn.Sequential(*conv_bn(64, 32, 3), act())
        self.classes, self.anchors = classes, anchors
        outs = anchors * (5 + classes)
        self.heads = nn.ModuleList(nn.Conv2d(c, outs, 1) for c in (32, 64, 64))
        self.register_buffer("sizes", torch.tensor([[10.0, 13], [16, 30], [33, 23]]))

    def decode(self, p: torch.Tensor, stride: int) -> torch.Tensor:
        """[B, A*(5+C), H, W] -> [B, A*H*W, 5+C] boxes in pixels, scores in [0, 1]."""
        b, _, h, w = p.shape
        p = p.view(b, self.anchors, 5 + self.classes, h, w).permute(0, 1, 3, 4, 2)
        xy, wh, rest = p.split([2, 2, 1 + self.classes], dim=-1)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack([xs, ys], -1).to(p.dtype)
        xy = (xy.sigmoid() * 2 - 0.5 + grid) * stride
        wh = (wh.sigmoid() * 2) ** 2 * self.sizes.view(1, self.anchors, 1, 1, 2) * stride / 8
        return torch.cat([xy, wh, rest.sigmoid()], -1).reshape(b, -1, 5 + self.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c8 = self.s8(x)
        c16 = self.s16(c8)
        p32 = self.lat32(self.s32(c16))
        p16 = self.fuse16(torch.cat([F.interpolate(p32, scale_factor=2.0), c16], 1))
        up = F.interpolate(self.lat16(p16), scale_factor=2.0, mode="nearest")
        p8 = self.fuse8(torch.cat([up, c8], 1))
        levels = zip(self.heads, (p8, p16, p32), (8, 16, 32), strict=True)
        return torch.cat([self.decode(head(p), s) for head, p, s in levels], 1)


def _image(size: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1)),)


def _tokens(with_mask: bool) -> tuple[torch.Tensor, ...]:
    ids = torch.randint(0, 1000, (1, 32), generator=torch.Generator().manual_seed(1))
    if not with_mask:
        return (ids,)
    mask = torch.ones(1, 32, dtype=torch.int64)
    mask[:, 24:] = 0
    return ids, mask


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "mobilenetv3_small": (MobileNetV3Small, lambda: _image(96)),
    "efficientnet_b0": (EfficientNetB0, lambda: _image(96)),
    "vit_tiny": (ViT, lambda: _image(64)),
    "bert_tiny": (Bert, lambda: _tokens(True)),
    "gpt_tiny": (Gpt, lambda: _tokens(False)),
    "unet_small": (UNet, lambda: _image(64)),
    "yolo_head": (YoloHead, lambda: _image(128)),
}


def _randomise_norms(model: nn.Module) -> None:
    """Non-trivial BatchNorm statistics, so that folding them into convs is exercised."""
    gen = torch.Generator().manual_seed(2)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            module.weight.data.copy_(torch.rand(n, generator=gen) * 0.4 + 0.8)
            module.bias.data.copy_(torch.randn(n, generator=gen) * 0.1)


def export(name: str, directory: Path) -> None:
    """Export fixture ``name`` with the default exporter, check it and verify it."""
    build, make_inputs = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    _randomise_norms(model)
    inputs = make_inputs()
    path = directory / f"{name}.onnx"
    program = torch.onnx.export(model, inputs)  # every option at torch 2.13's default
    assert program is not None
    program.save(str(path), external_data=False)
    onnx_model = onnx.load(str(path))
    for node in onnx_model.graph.node:  # stack traces naming this checkout's paths
        del node.metadata_props[:]
    onnx.save(onnx_model, str(path))
    onnx.checker.check_model(onnx_model, full_check=True)
    size = path.stat().st_size
    opset = next(o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx"))
    hist = Counter(node.op_type for node in onnx_model.graph.node)
    print(f"{name}: {size / 1e6:.2f} MB, opset {opset}, {sum(hist.values())} nodes")
    print("  " + ", ".join(f"{op} {n}" for op, n in sorted(hist.items())))
    if size >= MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over the {MAX_BYTES} limit")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs, strict=True)}
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, ref in zip(session.run(None, feeds), expected, strict=True):
        scale = max(float(ref.abs().max()), 1.0)
        error = float(np.abs(got - ref.numpy()).max()) / scale
        if not math.isfinite(error) or error > TOLERANCE:
            raise SystemExit(f"{name}: onnxruntime differs from PyTorch by {error:.2e}")


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(MODELS))
    parser.add_argument("--output-dir", type=Path, default=FIXTURES)
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}")
    unknown = set(args.names) - set(MODELS)
    if unknown:
        parser.error(f"unknown fixtures {sorted(unknown)}; choose from {', '.join(MODELS)}")
    for name in args.names or MODELS:
        export(name, args.output_dir)


if __name__ == "__main__":
    main()
