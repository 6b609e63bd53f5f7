"""Generated large models for scale tests and ``experiments/bench_scale.py``.

Two families, built with :mod:`onnx.helper` and shape-inferred:

- :func:`transformer_stack`: pre-norm transformer blocks of :data:`BLOCK_NODES` nodes on
  ``16 x 64`` tensors (LayerNormalization, three projections, four heads through
  Reshape/Transpose, scaled Softmax attention, an output projection, a residual Add, a
  second LayerNormalization, an MLP with a sigmoid-gated GELU and a second residual Add),
  each block with its own weights, as an exported encoder has;
- :func:`op_chain`: a chain of small elementwise ops (Add, Mul, Relu, Sigmoid, Tanh, Neg,
  Abs, Sqrt) on one ``16 x 64`` tensor, constants shared.

Both take the number of nodes wanted; the result has that many nodes, rounded to whole
blocks for the stack (at least one). :func:`synthetic_costs` prices an imported graph as a
profile would, without running anything, for tests of the search at scale.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from autopart.costmodel.costs import Costs, TransferModel
from autopart.costmodel.fusion import fusion_pairs
from autopart.ir.graph import Graph
from autopart.ir.signature import op_signature
from autopart.ir.target import VirtualDevice
from autopart.targets.registry import get_codegen

ROWS, WIDTH, HEADS, HIDDEN = 16, 64, 4, 128
BLOCK_NODES = 31
OPSET = 17
_CHAIN_OPS = ("Add", "Relu", "Mul", "Sigmoid", "Tanh", "Neg", "Abs", "Sqrt")


def transformer_stack(nodes: int, seed: int = 0, mask: bool = False) -> onnx.ModelProto:
    """A stack of ``round(nodes / BLOCK_NODES)`` transformer blocks (at least one).

    With ``mask``, every block adds a second graph input, ``mask`` (16 x 16), to its
    attention scores, as an exported encoder adds its attention mask (one node more each).
    """
    rng = np.random.default_rng(seed)
    per_block = BLOCK_NODES + int(mask)
    blocks = max(1, round(nodes / per_block))
    builder = _Builder(rng, with_mask=mask)
    value = "x"
    for block in range(blocks):
        value = _block(builder, value, f"b{block}")
    return builder.model(f"transformer_stack_{blocks * per_block}", value)


def op_chain(nodes: int, seed: int = 0) -> onnx.ModelProto:
    """A chain of ``nodes`` small elementwise ops (at least one) on a 16 x 64 tensor."""
    builder = _Builder(np.random.default_rng(seed))
    builder.const("half", np.full((1, WIDTH), 0.5, np.float32))
    builder.const("shift", np.full((1, WIDTH), 0.01, np.float32))
    value = "x"
    for index in range(max(1, nodes)):
        op = _CHAIN_OPS[index % len(_CHAIN_OPS)]
        operand = {"Add": ["shift"], "Mul": ["half"]}.get(op, [])
        value = builder.node(op, [value, *operand], f"n{index}")
    return builder.model(f"op_chain_{max(1, nodes)}", value)


class _Builder:
    """Nodes and initializers of a model under construction."""

    def __init__(self, rng: np.random.Generator, with_mask: bool = False) -> None:
        self.rng, self.with_mask = rng, with_mask
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, array: np.ndarray) -> str:
        """Add an initializer; returns its name."""
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, *shape: int) -> str:
        """A random float32 initializer of ``shape``, scaled to keep activations bounded."""
        scale = 1.0 / np.sqrt(shape[0])
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def node(self, op: str, inputs: list[str], name: str, **attrs: object) -> str:
        """Add a one-output node named ``name``; returns its output's name."""
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def model(self, name: str, output: str) -> onnx.ModelProto:
        """The shape-inferred model whose input is ``x`` and whose output is ``output``."""
        graph = helper.make_graph(
            self.nodes,
            name,
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, WIDTH]),
                *(
                    [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [ROWS, ROWS])]
                    if self.with_mask
                    else []
                ),
            ],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
            initializer=self.initializers,
        )
        opsets = [helper.make_opsetid("", OPSET)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = helper.find_min_ir_version_for(opsets)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _block(b: _Builder, x: str, p: str) -> str:
    """One pre-norm transformer block of :data:`BLOCK_NODES` nodes reading ``x``."""
    dh = WIDTH // HEADS
    ones = b.const(f"{p}.one", np.ones(WIDTH, np.float32))
    zeros = b.const(f"{p}.zero", np.zeros(WIDTH, np.float32))
    heads = b.const(f"{p}.heads", np.array([ROWS, HEADS, dh], np.int64))
    flat = b.const(f"{p}.flat", np.array([ROWS, WIDTH], np.int64))
    scale = b.const(f"{p}.scale", np.array(1.0 / np.sqrt(dh), np.float32))
    gate = b.const(f"{p}.gelu_k", np.array(1.702, np.float32))
    ln = b.node("LayerNormalization", [x, ones, zeros], f"{p}.ln1", axis=-1)
    split = {}
    for part, perm in (("q", (1, 0, 2)), ("k", (1, 2, 0)), ("v", (1, 0, 2))):
        mm = b.node("MatMul", [ln, b.weight(f"{p}.w{part}", WIDTH, WIDTH)], f"{p}.{part}")
        biased = b.node("Add", [mm, b.weight(f"{p}.b{part}", WIDTH)], f"{p}.{part}b")
        shaped = b.node("Reshape", [biased, heads], f"{p}.{part}r")
        split[part] = b.node("Transpose", [shaped], f"{p}.{part}t", perm=list(perm))
    scores = b.node("MatMul", [split["q"], split["k"]], f"{p}.qk")
    scaled = b.node("Mul", [scores, scale], f"{p}.scaled")
    if b.with_mask:
        scaled = b.node("Add", [scaled, "mask"], f"{p}.masked")
    attention = b.node("Softmax", [scaled], f"{p}.softmax", axis=-1)
    context = b.node("MatMul", [attention, split["v"]], f"{p}.ctx")
    merged = b.node("Transpose", [context], f"{p}.ctxt", perm=[1, 0, 2])
    rows = b.node("Reshape", [merged, flat], f"{p}.ctxr")
    out = b.node("MatMul", [rows, b.weight(f"{p}.wo", WIDTH, WIDTH)], f"{p}.o")
    out = b.node("Add", [out, b.weight(f"{p}.bo", WIDTH)], f"{p}.ob")
    residual = b.node("Add", [x, out], f"{p}.res1")
    ln2 = b.node("LayerNormalization", [residual, ones, zeros], f"{p}.ln2", axis=-1)
    up = b.node("MatMul", [ln2, b.weight(f"{p}.w1", WIDTH, HIDDEN)], f"{p}.up")
    up = b.node("Add", [up, b.weight(f"{p}.b1", HIDDEN)], f"{p}.upb")
    gated = b.node("Mul", [up, gate], f"{p}.gate")
    sigmoid = b.node("Sigmoid", [gated], f"{p}.sig")
    gelu = b.node("Mul", [up, sigmoid], f"{p}.gelu")
    down = b.node("MatMul", [gelu, b.weight(f"{p}.w2", HIDDEN, WIDTH)], f"{p}.down")
    down = b.node("Add", [down, b.weight(f"{p}.b2", WIDTH)], f"{p}.downb")
    return b.node("Add", [residual, down], f"{p}.res2")


def synthetic_costs(graph: Graph, targets: Sequence[str], seed: int = 0) -> Costs:
    """Costs of ``graph`` on ``targets`` drawn as a profile would give them, nothing run.

    Nodes of one op signature cost alike on a target (as measured once per signature):
    bytes moved over a per-target speed, times a seeded factor per (signature, target).
    Launches, cold entries and copies between devices have fixed prices; the fusion pairs
    of the graph (:func:`autopart.costmodel.fusion.fusion_pairs`) pay an unfused extra, and
    the nodes of codegens that convert layouts (``converts_layouts``) a layout cost at
    partition edges.
    """
    chosen = [VirtualDevice.parse(t) for t in targets]
    node_cost: dict[str, dict[VirtualDevice, float]] = {}
    factors: dict[tuple[str, VirtualDevice], float] = {}
    for node in graph.nodes:
        signature = op_signature(node, graph)
        moved = sum(graph.value(n).nbytes for n in [*node.present_inputs, *node.outputs] if n)
        entry = {}
        for target in chosen:
            if (signature, target) not in factors:
                digest = hashlib.sha256(f"{seed}:{signature}:{target}".encode()).digest()
                factors[(signature, target)] = 0.25 + 2 * digest[0] / 255
            entry[target] = (2e-6 + moved / 4e9) * factors[(signature, target)]
        node_cost[node.name] = entry
    pairs = fusion_pairs(graph)
    fused = {name: pair.producer.name for name, pair in pairs.items()}
    unfused = {name: {t: 0.5 * node_cost[name][t] for t in chosen} for name in pairs}
    converts = {t.codegen: get_codegen(t.codegen).converts_layouts for t in chosen}
    layout = {node.name: {t: 1e-6 for t in chosen if converts[t.codegen]} for node in graph.nodes}
    devices = {str(t.device) for t in chosen} - {"cpu"}
    copies = TransferModel(2e-5, 4e9)
    transfers = {pair: copies for d in devices for pair in (("cpu", d), (d, "cpu"))}
    launch = {t: 5e-6 for t in chosen}
    cold = {t: 5e-6 for t in chosen}
    return Costs(graph, chosen, node_cost, launch, transfers, fused, unfused, layout, cold)
