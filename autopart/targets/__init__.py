"""Targets: devices, units and codegens, and the codegen registry."""

from autopart.targets.codegen import Codegen, CompiledSubgraph
from autopart.targets.registry import codegen_names, get_codegen, register_codegen

__all__ = [
    "Codegen",
    "CompiledSubgraph",
    "codegen_names",
    "get_codegen",
    "register_codegen",
]
