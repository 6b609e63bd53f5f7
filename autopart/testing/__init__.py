"""Test helpers for codegen authors: the conformance suite every codegen must pass.

Needs the ``test`` extra (pytest and hypothesis). See :mod:`autopart.testing.conformance`.
"""
