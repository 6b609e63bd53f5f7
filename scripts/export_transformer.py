"""Export a small hand-written transformer encoder to ONNX (dev-only).

This script is **not** part of the ``autopart`` package and ``torch`` is **not** a
runtime (or test) dependency. It exists only to (re)generate the committed test
fixture ``tests/fixtures/transformer_encoder.onnx``, a tiny transformer encoder
whose graph exercises a broad range of ONNX operators (including the classic
TorchScript shape-computation chains ``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape`` that the importer's constant folding must handle).

Regenerate the fixture from the repository root with::

    pip install torch==2.13.0  # dev-only; onnx and onnxruntime are also needed
    python scripts/export_transformer.py
    # or: python scripts/export_transformer.py --output path/to/model.onnx

The model uses the legacy TorchScript exporter (``dynamo=False``, no onnxscript
needed) at opset 17 with the default constant folding. With fully static inputs that
exporter folds every ``x.size(i)`` into a constant, so the batch dim is marked dynamic
during export and then pinned back to 1 on the graph inputs/outputs (followed by a
strict ONNX shape inference pass). The committed model therefore has static I/O:

* ``input_ids``      int64 ``[1, 16]``
* ``attention_mask`` int64 ``[1, 16]`` (1 = keep, 0 = padding)

and produces

* ``logits`` float32 ``[1, 4]`` (sigmoid probabilities of a pooled classifier head)
* ``hidden`` float32 ``[1, 16, 64]`` (final encoder hidden states)

After export the script runs ``onnx.checker``, prints the operator histogram and
checks with onnxruntime that the ONNX outputs match PyTorch (max abs error < 1e-4).
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

VOCAB_SIZE = 500
D_MODEL = 64
N_HEADS = 4
N_LAYERS = 2
D_FF = 128
SEQ_LEN = 16
MAX_POS = 32
BATCH = 1
N_LABELS = 4
OPSET = 17
TOLERANCE = 1e-4
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("logits", "hidden")

DEFAULT_OUTPUT = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "transformer_encoder.onnx"
)


class ManualLayerNorm(nn.Module):
    """LayerNorm written out by hand (ReduceMean, Sub, Pow, Add, Sqrt, Div, Mul)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        centered = x - mean
        var = centered.pow(2).mean(dim=-1, keepdim=True)
        return centered / torch.sqrt(var + self.eps) * self.weight + self.bias


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection split into three."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        # Runtime sizes -> Shape/Gather/Unsqueeze/Concat/Reshape in the exported graph.
        b, s = t.size(0), t.size(1)
        return t.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.size(0), x.size(1), x.size(2)
        q, k, v = torch.split(self.qkv(x), d, dim=-1)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + additive_mask, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)
        return self.out(ctx)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """Tanh-approximate GELU written out by hand (Pow, Mul, Add, Tanh)."""
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3))
    return 0.5 * x * (1.0 + torch.tanh(inner))


class EncoderLayer(nn.Module):
    """Pre-norm encoder layer; ``variant`` selects the norm and GELU flavour."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, variant: int) -> None:
        super().__init__()
        self.variant = variant
        self.norm1: nn.Module
        self.norm2: nn.Module
        if variant == 0:
            self.norm1 = nn.LayerNorm(d_model)  # LayerNormalization at opset 17
            self.norm2 = nn.LayerNorm(d_model)
        else:
            self.norm1 = ManualLayerNorm(d_model)
            self.norm2 = ManualLayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_heads)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), additive_mask)
        h = self.ff1(self.norm2(x))
        # Exact GELU (Erf) in layer 0, tanh approximation (Tanh, Pow) in layer 1.
        h = nn.functional.gelu(h) if self.variant == 0 else gelu_tanh(h)
        return x + self.ff2(h)


class TinyEncoder(nn.Module):
    """Token + learned positional embeddings, two encoder layers, pooled classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.n_heads = N_HEADS
        self.tok_emb = nn.Embedding(VOCAB_SIZE, D_MODEL)
        self.pos_emb = nn.Parameter(torch.randn(MAX_POS, D_MODEL) * 0.02)
        self.layers = nn.ModuleList(
            [EncoderLayer(D_MODEL, N_HEADS, D_FF, variant=i) for i in range(N_LAYERS)]
        )
        self.final_norm = nn.LayerNorm(D_MODEL)
        self.pooler = nn.Linear(D_MODEL, D_MODEL)
        self.classifier = nn.Linear(D_MODEL, N_LABELS)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, s = input_ids.size(0), input_ids.size(1)
        x = self.tok_emb(input_ids) + self.pos_emb[:s]  # Gather + Slice

        # [B, S] int64 -> [B, H, S, S] additive float mask (Unsqueeze, Cast, Where, Expand).
        keep = attention_mask.unsqueeze(1).unsqueeze(2).to(torch.bool)
        additive = torch.where(keep, 0.0, -1e4)
        additive = additive.expand(b, self.n_heads, s, s)

        for layer in self.layers:
            x = layer(x, additive)
        hidden = self.final_norm(x)

        cls = hidden[:, 0]  # Gather
        # ReduceMean(keepdims) gives a dim statically known to be 1 -> a plain Squeeze
        # (squeezing a dim of unknown size would make the exporter emit an If node).
        mean = hidden.mean(dim=1, keepdim=True).squeeze(1)
        pooled = torch.tanh(self.pooler(0.5 * (cls + mean)))  # Gemm + Tanh
        logits = torch.sigmoid(self.classifier(pooled))  # Gemm + Sigmoid
        return logits, hidden


def make_inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed random token ids and a mask whose last four positions are padding."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, VOCAB_SIZE, (BATCH, SEQ_LEN), generator=gen, dtype=torch.int64)
    attention_mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.int64)
    attention_mask[:, -4:] = 0
    return input_ids, attention_mask


def op_histogram(model: onnx.ModelProto) -> Counter[str]:
    """Count node op types in the top-level graph."""
    return Counter(node.op_type for node in model.graph.node)


def freeze_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """Pin every graph input/output to its concrete shape and re-run shape inference.

    The export marks the batch dim dynamic only so that the TorchScript exporter keeps
    the runtime shape-computation chains (with fully static inputs it folds every
    ``x.size(i)`` into a constant). Pinning the dims afterwards leaves a model with
    static I/O shapes whose graph still computes its Reshape targets at runtime.
    """
    for value in (*model.graph.input, *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        assert len(dims) == len(shapes[value.name]), value.name
        for dim, size in zip(dims, shapes[value.name], strict=True):
            dim.dim_value = size  # setting dim_value clears any dim_param (oneof)
    del model.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def shape_chain_count(model: onnx.ModelProto) -> int:
    """Count Reshapes whose target is ``Concat`` of ``Unsqueeze(Gather(Shape(x)))`` parts."""
    producer = {out: node for node in model.graph.node for out in node.output}

    def op(name: str) -> str:
        return producer[name].op_type if name in producer else ""

    count = 0
    for node in model.graph.node:
        if node.op_type != "Reshape" or op(node.input[1]) != "Concat":
            continue
        for part in producer[node.input[1]].input:
            if op(part) != "Unsqueeze":
                continue
            gathered = producer[part].input[0]
            if op(gathered) == "Gather" and op(producer[gathered].input[0]) == "Shape":
                count += 1
                break
    return count


def verify(
    path: Path, model: TinyEncoder, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> float:
    """Max abs difference between onnxruntime and PyTorch over both outputs."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = model(input_ids, attention_mask)
    got = sess.run(
        list(OUTPUT_NAMES),
        {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()},
    )
    return max(float(np.max(np.abs(g - r.numpy()))) for g, r in zip(got, ref, strict=True))


def export(output: Path) -> None:
    """Build the model, export it, check it and verify it against onnxruntime."""
    torch.manual_seed(0)
    model = TinyEncoder().eval()
    input_ids, attention_mask = make_inputs()
    with torch.no_grad():
        ref_logits, ref_hidden = model(input_ids, attention_mask)

    output.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # The legacy TorchScript exporter is chosen on purpose; silence its deprecation note.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.onnx.export(
            model,
            (input_ids, attention_mask),
            str(output),
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            opset_version=OPSET,
            dynamo=False,
            # Only to keep the runtime shape chains; pinned back to static by freeze_shapes.
            dynamic_axes={name: {0: "batch"} for name in INPUT_NAMES},
        )

    shapes = {
        "input_ids": tuple(input_ids.shape),
        "attention_mask": tuple(attention_mask.shape),
        "logits": tuple(ref_logits.shape),
        "hidden": tuple(ref_hidden.shape),
    }
    onnx_model = freeze_shapes(onnx.load(str(output)), shapes)
    onnx.checker.check_model(onnx_model, full_check=True)
    onnx.save(onnx_model, str(output))

    hist = op_histogram(onnx_model)
    print(f"wrote {output} ({output.stat().st_size} bytes, opset {OPSET})")
    print(f"{sum(hist.values())} nodes, {len(hist)} op types:")
    for op_type, count in sorted(hist.items()):
        print(f"  {op_type:<20} {count}")
    for value in (*onnx_model.graph.input, *onnx_model.graph.output):
        elem = onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type)
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        print(f"  io {value.name}: {elem} {dims}")

    chains = shape_chain_count(onnx_model)
    print(f"Shape->Gather->Unsqueeze->Concat->Reshape chains: {chains}")
    if chains == 0:
        raise SystemExit("expected at least one runtime shape chain feeding a Reshape")
    if "If" in hist or "Loop" in hist:
        raise SystemExit("unexpected control flow in the exported graph")

    err = verify(output, model, input_ids, attention_mask)
    err_full = verify(output, model, input_ids, torch.ones_like(attention_mask))
    print(f"max abs error vs PyTorch: {err:.3e} (padded mask), {err_full:.3e} (all-ones mask)")
    if max(err, err_full) >= TOLERANCE:
        raise SystemExit(f"ONNX output mismatch: {max(err, err_full)} >= {TOLERANCE}")


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    export(args.output)


if __name__ == "__main__":
    main()
