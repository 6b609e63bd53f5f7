"""torchvision architectures with random weights, for the corpus (``torchvision.toml``).

The rule. From ``torchvision.models.list_models(module)`` for module in classification
(``torchvision.models``), detection, segmentation, video and optical_flow, builders are
grouped into families by the builder's Python module (``get_model_builder(name).__module__``),
except that ``efficientnet_v2_*`` and ``swin_v2_*`` are families of their own (mobilenet v2
and v3 already live in different modules; regnet x and y, resnet / resnext / wide_resnet,
retinanet v1 and v2 stay one family each). Each family is represented by its builder with
the fewest parameters (``get_model_weights(name).DEFAULT.meta["num_params"]``, no weights
downloaded; a tie goes to the first name in alphabetical order). Families whose smallest
builder has more than 40M parameters are dropped (alexnet, vgg, vision_transformer), except
in detection, where every family is kept (they carry NMS and data-dependent shapes).
``convnext_tiny`` is also exported by the held-out suite; it is kept here under its own
names (``tv_convnext_tiny__dynamo`` / ``__legacy``), as are the held-out suite's neighbours
(its ``regnet_x_400mf`` and ``mnasnet1_0`` are not what the rule picks).

Every model is built with ``weights=None`` (and ``weights_backbone=None`` where the builder
takes it) after ``torch.manual_seed(0)``, in eval mode, with seeded non-trivial BatchNorm
statistics. Inputs: classification 1x3x224x224 (inception_v3 299), detection a list of one
3x320x320 image in [0, 1], segmentation 1x3x256x256, video 1x3x8x112x112 (s3d and mvit_v2_s
need 16x224x224), optical flow two 1x3x128x128 images in [-1, 1]. Two detectors that find
nothing with random weights get a lower score threshold (``SCORE_THRESHOLD``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torchvision
from torch import nn
from torchvision.ops.misc import FrozenBatchNorm2d

Built = tuple[nn.Module, tuple[Any, ...]]

CLASSIFICATION = [
    "convnext_tiny",
    "densenet121",
    "efficientnet_b0",
    "efficientnet_v2_s",
    "googlenet",
    "inception_v3",
    "maxvit_t",
    "mnasnet0_5",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "regnet_y_400mf",
    "resnet18",
    "shufflenet_v2_x0_5",
    "squeezenet1_1",
    "swin_t",
    "swin_v2_t",
]
DETECTION = [
    "fasterrcnn_mobilenet_v3_large_320_fpn",
    "fcos_resnet50_fpn",
    "keypointrcnn_resnet50_fpn",
    "maskrcnn_resnet50_fpn",
    "retinanet_resnet50_fpn",
    "ssd300_vgg16",
    "ssdlite320_mobilenet_v3_large",
]
SEGMENTATION = ["deeplabv3_mobilenet_v3_large", "fcn_resnet50", "lraspp_mobilenet_v3_large"]
VIDEO = ["mc3_18", "mvit_v2_s", "s3d", "swin3d_t"]
OPTICAL_FLOW = ["raft_small"]

FAMILY: dict[str, str] = {
    **dict.fromkeys(CLASSIFICATION, "vision-classification"),
    **dict.fromkeys(SEGMENTATION, "segmentation"),
    **dict.fromkeys(VIDEO, "video"),
    **dict.fromkeys(OPTICAL_FLOW, "optical-flow"),
    **dict.fromkeys(DETECTION, "detection"),
}

# The domain of every graph input, per family (see SCHEMA.md).
DOMAIN: dict[str, tuple[str, str]] = {
    "vision-classification": ("normal", "a normalised RGB image"),
    "segmentation": ("normal", "a normalised RGB image"),
    "video": ("normal", "a normalised RGB clip (N, C, T, H, W)"),
    "detection": ("uniform:0:1", "an RGB image in [0, 1]; the model normalises inside"),
    "optical-flow": ("uniform:-1:1", "two RGB frames scaled to [-1, 1] (torchvision's preset)"),
}

# With random weights these two detect nothing at their default score threshold (softmax
# over 91 classes ~0.011 < 0.05; FCOS ~0.07 < 0.2): lowered so that their outputs are not empty.
SCORE_THRESHOLD: dict[str, dict[str, float]] = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": {"box_score_thresh": 0.005},
    "fcos_resnet50_fpn": {"score_thresh": 0.05},
}

VIDEO_SHAPE = {"s3d": (1, 3, 16, 224, 224), "mvit_v2_s": (1, 3, 16, 224, 224)}


def randomise_norms(model: nn.Module) -> None:
    """Seeded, non-trivial BatchNorm statistics and affine weights (as the held-out suite)."""
    generator = torch.Generator().manual_seed(2)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm | FrozenBatchNorm2d):
            n = module.running_mean.shape[0]
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
            module.weight.data.copy_(torch.rand(n, generator=generator) * 0.4 + 0.8)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)


def _model(name: str) -> nn.Module:
    kwargs: dict[str, Any] = {"weights": None}
    if FAMILY[name] in ("detection", "segmentation"):
        kwargs["weights_backbone"] = None
    if name in ("inception_v3", "googlenet"):
        kwargs["init_weights"] = True  # torchvision warns when left unset
    kwargs.update(SCORE_THRESHOLD.get(name, {}))
    return torchvision.models.get_model(name, **kwargs)


def _inputs(name: str) -> tuple[Any, ...]:
    family = FAMILY[name]
    if family == "detection":
        return ([torch.rand(3, 320, 320)],)
    if family == "optical-flow":
        return (torch.rand(1, 3, 128, 128) * 2 - 1, torch.rand(1, 3, 128, 128) * 2 - 1)
    if family == "video":
        return (torch.randn(*VIDEO_SHAPE.get(name, (1, 3, 8, 112, 112))),)
    size = {"inception_v3": 299}.get(name, 256 if family == "segmentation" else 224)
    return (torch.randn(1, 3, size, size),)


def build(name: str) -> Built:
    """Model ``name`` in eval mode with seeded weights, and its seeded example inputs."""
    torch.manual_seed(0)
    model = _model(name).eval()
    with torch.no_grad():
        randomise_norms(model)
    torch.manual_seed(1)
    return model, _inputs(name)


def _recipe(name: str) -> Callable[[], Built]:
    def recipe() -> Built:
        """Build the model and its example inputs."""
        return build(name)

    recipe.__name__ = name
    recipe.__doc__ = f"torchvision {name} ({FAMILY[name]}), random weights."
    return recipe


RECIPES: dict[str, Callable[[], Built]] = {name: _recipe(name) for name in FAMILY}


def __getattr__(name: str) -> Callable[[], Built]:
    """``torchvision_recipes:<builder>`` names a recipe (PEP 562 module attribute)."""
    try:
        return RECIPES[name]
    except KeyError:
        raise AttributeError(name) from None
