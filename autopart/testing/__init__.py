"""Test helpers: the conformance suite every codegen must pass, and search oracles.

:mod:`autopart.testing.conformance` needs the ``test`` extra (pytest and hypothesis);
:mod:`autopart.testing.exhaustive` is the brute-force ground truth the ILP is tested against.
"""
