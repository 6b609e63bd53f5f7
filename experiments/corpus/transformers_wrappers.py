"""Plain-tensor wrappers and input helpers shared by the ``transformers`` recipes.

Each wrapper's ``forward`` takes tensors under the names the graph inputs should carry
(``input_ids``, ``pixel_values``, ``past_key_0`` ...) and returns a flat tuple of tensors,
calling the Hugging Face model with ``return_dict=False`` and ``use_cache`` set explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

SEQ = 32  # text sequence length
PAST = 16  # past length of the KV-cache decode step
VOCAB = 4000  # text vocabulary of every shrunken config
Built = tuple[nn.Module, tuple[torch.Tensor, ...], list["InputSpec"]]


@dataclass(frozen=True)
class InputSpec:
    """One graph input as the manifest records it (see SCHEMA.md)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    domain: str
    note: str = ""


def sample(shape: tuple[int, ...], domain: str) -> torch.Tensor:
    """A seeded example tensor drawn from a SCHEMA.md ``domain``."""
    gen = torch.Generator().manual_seed(1234)
    kind, _, rest = domain.partition(":")
    if kind == "int":
        low, high = (int(v) for v in rest.split(":"))
        return torch.randint(low, high, shape, generator=gen, dtype=torch.int64)
    if kind == "value":
        return torch.full(shape, int(rest), dtype=torch.int64)
    if kind == "zeros":
        return torch.zeros(shape, dtype=torch.int64)
    if kind == "uniform":
        low, high = (float(v) for v in rest.split(":"))
        return torch.rand(shape, generator=gen) * (high - low) + low
    if kind == "normal":
        return torch.randn(shape, generator=gen)
    raise ValueError(f"unknown domain {domain!r}")


def inputs(*specs: tuple[str, tuple[int, ...], str, str]) -> tuple[tuple, list[InputSpec]]:
    """Example tensors and their specs from ``(name, shape, domain, note)`` tuples."""
    tensors = tuple(sample(shape, domain) for _, shape, domain, _ in specs)
    listed = [
        InputSpec(name, shape, str(t.dtype).removeprefix("torch."), domain, note)
        for (name, shape, domain, note), t in zip(specs, tensors, strict=True)
    ]
    return tensors, listed


def ids(name: str = "input_ids", length: int = SEQ, vocab: int = VOCAB) -> tuple:
    """The spec tuple of a token-id input."""
    return (name, (1, length), f"int:0:{vocab}", f"token ids, vocabulary {vocab}")


def mask(length: int = SEQ, name: str = "attention_mask") -> tuple:
    """The spec tuple of an all-ones attention mask."""
    return (name, (1, length), "value:1", "all-ones attention mask")


def _tensors(out: object) -> tuple[torch.Tensor, ...]:
    """The top-level tensors of a model's tuple output (nested tuples and None dropped)."""
    items = out if isinstance(out, tuple) else (out,)
    return tuple(o for o in items if isinstance(o, torch.Tensor))


def realistic_batchnorm(model: nn.Module) -> nn.Module:
    """Give every BatchNorm seeded, non-trivial statistics and an O(1) affine.

    Some ``_init_weights`` draw BatchNorm scales from N(0, 0.02), which drives a deep
    conv stack's output to zero (MobileViT) and makes the accuracy check vacuous.
    """
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.affine:
                n = module.num_features
                module.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                module.bias.copy_(torch.randn(n, generator=gen) * 0.1)
                if module.running_mean is not None and module.running_var is not None:
                    module.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                    module.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
    return model


class _Wrapper(nn.Module):
    """Holds the model, the number of outputs kept and fixed keyword arguments."""

    def __init__(self, model: nn.Module, keep: int | None = None, **fixed: object) -> None:
        super().__init__()
        self.model = realistic_batchnorm(model).eval()
        self.keep = keep
        self.fixed = fixed

    def run(self, **kwargs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Call the model with ``return_dict=False`` and keep its first tensors."""
        out = _tensors(self.model(**kwargs, **self.fixed, return_dict=False))
        return out[: self.keep] if self.keep else out


class Ids(_Wrapper):
    """input_ids only (decoders without a cache)."""

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run on token ids."""
        return self.run(input_ids=input_ids)


class IdsMask(_Wrapper):
    """input_ids and attention_mask."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run on token ids and a mask."""
        return self.run(input_ids=input_ids, attention_mask=attention_mask)


class IdsMaskTypes(_Wrapper):
    """input_ids, attention_mask and token_type_ids."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run on token ids, a mask and segment ids."""
        return self.run(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )


class Seq2Seq(_Wrapper):
    """Encoder input_ids and attention_mask, decoder_input_ids."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run the encoder and one decoder pass."""
        return self.run(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids
        )


class Features(_Wrapper):
    """Whisper: log-mel input_features, decoder_input_ids and decoder_attention_mask."""

    def forward(
        self,
        input_features: torch.Tensor,
        decoder_input_ids: torch.Tensor,
        decoder_attention_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """Run the audio encoder and one decoder pass."""
        return self.run(
            input_features=input_features,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
        )


class Audio(_Wrapper):
    """Raw audio input_values."""

    def forward(self, input_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run on a waveform."""
        return self.run(input_values=input_values)


class Pixels(_Wrapper):
    """Image pixel_values."""

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run on an image."""
        return self.run(pixel_values=pixel_values)


class TextImage(_Wrapper):
    """CLIP: input_ids, attention_mask and pixel_values."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pixel_values: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run the text and vision towers."""
        return self.run(
            input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values
        )


class DecodeStep(nn.Module):
    """One decode step of a 2-layer causal LM with its KV cache as explicit tensors.

    The past key/values enter as a ``DynamicCache`` built from the four tensors; the
    outputs are the logits and the updated (past + 1) keys and values of each layer.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.eval()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_0: torch.Tensor,
        past_value_0: torch.Tensor,
        past_key_1: torch.Tensor,
        past_value_1: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """Return the logits and the present keys and values of layers 0 and 1."""
        from transformers import DynamicCache

        cache = DynamicCache([(past_key_0, past_value_0), (past_key_1, past_value_1)])
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            return_dict=False,
        )
        present = out[1]
        flat = [t for layer in present.layers for t in (layer.keys, layer.values)]
        return (out[0], *flat)


def decode_step(model: nn.Module, kv_heads: int, head_dim: int, max_pos: int) -> Built:
    """Wrap a causal LM as a decode step: 1 new token after ``PAST`` cached ones."""
    kv = (1, kv_heads, PAST, head_dim)
    args, specs = inputs(
        ids(length=1),
        mask(PAST + 1),
        ("position_ids", (1, 1), f"value:{PAST}", f"the new token's position (< {max_pos})"),
        *[
            (f"past_{kind}_{layer}", kv, "normal", f"layer {layer} cached {kind}s, past {PAST}")
            for layer in (0, 1)
            for kind in ("key", "value")
        ],
    )
    return DecodeStep(model), args, specs
