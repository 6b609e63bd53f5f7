"""Training-only modes of inference ops, which autopart never runs.

BatchNormalization and Dropout compute something else when training: batch statistics
(and updated running ones), a random mask. autopart plans and checks inference, so every
codegen refuses these modes, including libraries that implement them (onnxruntime does).
:func:`training_refusal` is the one-line reason, naming the attribute or input and value.
"""

from __future__ import annotations

import numpy as np

from autopart.ir.graph import Graph, Node

# Before opset 7, BatchNormalization and Dropout train unless ``is_test`` is 1.
LEGACY_TRAINING_OPSET = 7


def training_refusal(node: Node, graph: Graph) -> str | None:
    """Why ``node`` would train rather than infer (one line), or None when it infers."""
    if node.op_type not in ("BatchNormalization", "Dropout") or node.domain not in ("", "ai.onnx"):
        return None
    if graph.opset_of(node) < LEGACY_TRAINING_OPSET:
        is_test = node.attrs.get("is_test", 0)
        return None if is_test == 1 else f"attribute is_test={is_test} (training) is not supported"
    mode = node.attrs.get("training_mode", 0)
    if mode != 0:
        return f"attribute training_mode={mode} is not supported (inference only)"
    if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
        flag = graph.value(node.inputs[2]).const
        if flag is None:
            return "input training_mode is not a constant (training is not supported)"
        if bool(np.asarray(flag).ravel()[0]):
            return "input training_mode=true is not supported (inference only)"
    return None
