"""User-facing errors.

Every error a user can cause (a bad model file, an unknown op, a wrong input) is raised
as an :class:`AutopartError`. The CLI prints its message on one line and exits non-zero;
anything else escaping is a bug in autopart.
"""

from __future__ import annotations


class AutopartError(Exception):
    """Base class of every error caused by user input; its message is one line."""


class ModelError(AutopartError):
    """The model file cannot be read, is not ONNX, or is structurally invalid."""


class UnsupportedOpError(AutopartError):
    """One or more nodes use ops that no available codegen implements."""


class InputError(AutopartError):
    """Inputs given to a model are missing, misnamed, or of the wrong shape or dtype."""


class TargetError(AutopartError):
    """A target (device, unit or codegen) is malformed or absent."""


class ExecutionError(AutopartError):
    """A library rejected a run of a compiled subgraph (its own message, on one line)."""


class ProfileError(AutopartError):
    """A profile file is corrupt, of another schema, or belongs to another machine."""


class OutputError(AutopartError):
    """A file or folder autopart was asked to write cannot be written."""


class ResourceError(AutopartError):
    """A model, input or saved file declares more data than this machine can hold."""
