"""Speech, vision and multimodal ``transformers`` recipes (the rule: see transformers_recipes)."""

from __future__ import annotations

from collections.abc import Callable

import transformers as tf
from transformers_wrappers import (
    SEQ,
    VOCAB,
    Audio,
    Built,
    Features,
    Pixels,
    TextImage,
    ids,
    inputs,
    mask,
)

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
EAGER = {"attn_implementation": "eager"}  # the default SDPA path fails the dynamo exporter
VIT = {**SMALL, "intermediate_size": 256, "image_size": 224, "patch_size": 16}
MEL_FRAMES = 200  # Whisper log-mel frames (max_source_positions 100 after the stride-2 conv)


def _pixels(model: object, size: int = 224) -> Built:
    """A vision model fed one normalised ``size`` x ``size`` RGB image."""
    args, specs = inputs(("pixel_values", (1, 3, size, size), "normal", "normalised RGB"))
    return Pixels(model), args, specs


def _audio(model: object) -> Built:
    """A speech model fed 1 s of raw 16 kHz audio in [-1, 1]."""
    args, specs = inputs(("input_values", (1, 16000), "uniform:-1:1", "1 s of 16 kHz audio"))
    return Audio(model), args, specs


def whisper() -> Built:
    """Whisper (2 conv stem on log-mel, sinusoidal encoder positions, cross-attention)."""
    config = tf.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
        decoder_ffn_dim=256, max_source_positions=MEL_FRAMES // 2, max_target_positions=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        suppress_tokens=None, begin_suppress_tokens=None,
    )  # fmt: skip
    args, specs = inputs(
        ("input_features", (1, 80, MEL_FRAMES), "normal", "80-bin log-mel, 200 frames"),
        ids("decoder_input_ids", 8),
        mask(8, "decoder_attention_mask"),
    )
    model = tf.WhisperForConditionalGeneration(config)
    return Features(model, use_cache=False), args, specs


def wav2vec2() -> Built:
    """Wav2Vec2 CTC (7 conv feature extractor with GroupNorm, conv positions, post-LN)."""
    config = tf.Wav2Vec2Config(**SMALL, intermediate_size=256, vocab_size=32, conv_dim=(32,) * 7)
    return _audio(tf.Wav2Vec2ForCTC(config))


def hubert() -> Built:
    """HuBERT CTC (Wav2Vec2 body, no quantizer)."""
    config = tf.HubertConfig(**SMALL, intermediate_size=256, vocab_size=32, conv_dim=(32,) * 7)
    return _audio(tf.HubertForCTC(config))


def wavlm() -> Built:
    """WavLM CTC (gated relative position bias, LayerNorm conv extractor, pre-LN)."""
    config = tf.WavLMConfig(
        **SMALL, intermediate_size=256, vocab_size=32, conv_dim=(32,) * 7,
        feat_extract_norm="layer", do_stable_layer_norm=True,
    )  # fmt: skip
    return _audio(tf.WavLMForCTC(config))


def vit() -> Built:
    """ViT classifier (16x16 patches, class token, learned positions, pre-LN)."""
    return _pixels(tf.ViTForImageClassification(tf.ViTConfig(**VIT, num_labels=100)))


def deit() -> Built:
    """DeiT with distillation token (class and distillation heads averaged)."""
    config = tf.DeiTConfig(**VIT, num_labels=100)
    return _pixels(tf.DeiTForImageClassificationWithTeacher(config))


def beit() -> Built:
    """BEiT classifier (relative position bias per layer, layer scale, mean pooling)."""
    config = tf.BeitConfig(
        **VIT, **EAGER, num_labels=100, use_relative_position_bias=True, use_mean_pooling=True
    )
    return _pixels(tf.BeitForImageClassification(config))


def swin() -> Built:
    """Swin classifier (shifted 7x7 windows, patch merging, 2 stages)."""
    config = tf.SwinConfig(
        image_size=224, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
        window_size=7, num_labels=100, **EAGER,
    )  # fmt: skip
    return _pixels(tf.SwinForImageClassification(config))


def dinov2() -> Built:
    """DINOv2 backbone (14x14 patches, bicubic-interpolated positions, layer scale)."""
    config = tf.Dinov2Config(**SMALL, mlp_ratio=4, image_size=224, patch_size=14, **EAGER)
    return _pixels(tf.Dinov2Model(config))


def detr() -> Built:
    """DETR (ResNet backbone, frozen BatchNorm, encoder-decoder with 20 object queries), 320px."""
    backbone = tf.ResNetConfig(
        embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
        out_features=["stage4"],
    )  # fmt: skip
    config = tf.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone,
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_queries=20,
        num_labels=10,
    )  # fmt: skip
    model, args, specs = _pixels(tf.DetrForObjectDetection(config), 320)
    model.keep = 2  # class logits and boxes
    return model, args, specs


def convnext() -> Built:
    """ConvNeXt classifier (7x7 depthwise, channels-last LayerNorm, layer scale)."""
    config = tf.ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_labels=100)
    return _pixels(tf.ConvNextForImageClassification(config))


def segformer() -> Built:
    """SegFormer (overlapping patch embeds, reduced-key attention, all-MLP decoder), 256x256."""
    config = tf.SegformerConfig(
        hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 4, 8],
        decoder_hidden_size=64, num_labels=19,
    )  # fmt: skip
    return _pixels(tf.SegformerForSemanticSegmentation(config), 256)


def mobilevit() -> Built:
    """MobileViT classifier (inverted residuals + unfold/fold transformer blocks), 256x256."""
    config = tf.MobileViTConfig(
        image_size=256, hidden_sizes=[64, 80, 96],
        neck_hidden_sizes=[16, 24, 48, 64, 80, 96, 384], num_labels=100,
    )  # fmt: skip
    return _pixels(tf.MobileViTForImageClassification(config), 256)


def clip() -> Built:
    """CLIP (causal text tower pooled at the EOS argmax, ViT-B/32-style vision tower)."""
    text = {**SMALL, "vocab_size": VOCAB, "intermediate_size": 256, "max_position_embeddings": SEQ}
    text.update(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = {**VIT, "patch_size": 32}
    config = tf.CLIPConfig(text_config=text, vision_config=vision, projection_dim=64)
    args, specs = inputs(
        ids(),
        mask(),
        ("pixel_values", (1, 3, 224, 224), "normal", "normalised RGB"),
    )
    return TextImage(tf.CLIPModel(config), keep=4), args, specs


MEDIA: dict[str, tuple[str, Callable[[], Built]]] = {
    "whisper": ("speech", whisper),
    "wav2vec2": ("speech", wav2vec2),
    "hubert": ("speech", hubert),
    "wavlm": ("speech", wavlm),
    "vit": ("vision-transformer", vit),
    "deit": ("vision-transformer", deit),
    "beit": ("vision-transformer", beit),
    "swin": ("vision-transformer", swin),
    "mobilevit": ("vision-transformer", mobilevit),
    "dinov2": ("vision-transformer", dinov2),
    "convnext": ("vision-classification", convnext),
    "detr": ("detection", detr),
    "segformer": ("segmentation", segformer),
    "clip": ("multimodal", clip),
}
