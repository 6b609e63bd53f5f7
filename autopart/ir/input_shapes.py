"""Input shapes: which dims of a model's inputs are symbolic, and how a user fixes them.

A dim is symbolic when it has a name (``dim_param``), no value at all, or a negative value
(an exporter's ``-1``). A ``dim_value`` of 0 is a real, empty dim. A name of only ``?``
marks a dim as unknown (paddle2onnx writes it for every unknown dim), so it names nothing.

A user fixes shapes with a mapping (``--input-shape`` on the command line): an input's name
maps to its full shape; a symbolic dim's name maps to one size, which fixes that dim in every
input that has it. An input's name wins over a dim's name. Every symbolic dim left unfixed is
1.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx

from autopart.errors import ModelError

# A declared dim: a size, the name of a symbolic dim, or None for an unnamed symbolic one.
Dim = int | str | None
# What a user gives: input name -> full shape, or dim name -> size (an int or one-item list).
InputShapes = Mapping[str, Sequence[int] | int]


def declared_dims(info: onnx.ValueInfoProto) -> list[Dim] | None:
    """The dims ``info`` declares (see the module doc), or None when it declares no shape."""
    kind = info.type
    if kind.HasField("optional_type") and kind.optional_type.elem_type.HasField("tensor_type"):
        kind = kind.optional_type.elem_type
    if not kind.HasField("tensor_type") or not kind.tensor_type.HasField("shape"):
        return None
    return [_dim(dim) for dim in kind.tensor_type.shape.dim]


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    if dim.HasField("dim_value"):
        return dim.dim_value if dim.dim_value >= 0 else None
    name = dim.dim_param.strip() if dim.HasField("dim_param") else ""
    return name if name.strip("?") else None


def dim_names(declared: Mapping[str, list[Dim] | None]) -> list[str]:
    """Every symbolic dim name the inputs declare, sorted."""
    return sorted({d for dims in declared.values() if dims for d in dims if isinstance(d, str)})


def resolve_input_shapes(
    declared: Mapping[str, list[Dim] | None],
    given: InputShapes,
    fixed: Mapping[str, tuple[int, ...]] | None = None,
) -> dict[str, tuple[int, ...]]:
    """The static shape of every input in ``declared``, from what the user ``given``.

    ``fixed`` are full shapes decided elsewhere (those of frozen inputs); like a full shape
    in ``given`` they are checked against the declared shape and fix the dims they name.
    Raises :class:`ModelError` for a name that is neither an input nor a dim name, a rank
    or a fixed dim that disagrees, a dim given two sizes, and an input that declares no
    shape and is given none.
    """
    names = dim_names(declared)
    full: dict[str, tuple[int, ...]] = dict(fixed or {})
    sizes: dict[str, int] = {}
    for name, spec in given.items():
        if name in declared:
            if name in full:
                raise ModelError(f"input {name!r} is frozen: its shape is its value's")
            full[name] = _shape(spec, f"the shape of input {name!r}")
        elif name in names:
            sizes[name] = _size(spec, name)
        else:
            raise ModelError(
                f"input shape given for {name!r}, which is neither an input nor a dimension "
                f"name; inputs: {list(declared)}; dimension names: {names or 'none'}"
            )
    origin = {name: f"--input-shape {name}={size}" for name, size in sizes.items()}
    for name, shape in full.items():
        _match(name, declared[name], shape, sizes, origin)
    resolved = {}
    for name, dims in declared.items():
        if name in full:
            resolved[name] = full[name]
        elif dims is None:
            raise ModelError(f"input {name!r} has no shape; give one with --input-shape")
        else:
            resolved[name] = tuple(
                d if isinstance(d, int) else sizes.get(d, 1) if d is not None else 1 for d in dims
            )
    return resolved


def shapes_from_samples(
    declared: Mapping[str, list[Dim] | None],
    given: InputShapes,
    seen: Mapping[str, Sequence[int]],
) -> dict[str, tuple[int, ...]]:
    """Full shapes for the inputs ``given`` leaves symbolic, from the user's samples.

    ``seen`` is one sample file's array shapes by input: an input's own rank is one
    sample, one more a leading sample axis. Only an input with a symbolic dim gets one,
    and not where the user shaped it (its name or one of its dims' in ``given``) or
    ``seen`` lacks it or does not fit its rank and fixed sizes: the samples are then checked
    against the shape resolved without them, and refused with one line naming the file.
    """
    found: dict[str, tuple[int, ...]] = {}
    for name, dims in declared.items():
        if dims is None or all(isinstance(d, int) for d in dims) or name in given:
            continue
        if any(isinstance(d, str) and d in given for d in dims) or name not in seen:
            continue
        shape = tuple(int(size) for size in seen[name])
        sample = shape[1:] if len(shape) == len(dims) + 1 else shape
        if _fits(sample, dims):
            found[name] = sample
    return found


def _fits(shape: tuple[int, ...], dims: list[Dim]) -> bool:
    """Whether ``shape`` has ``dims``' rank and every size they fix."""
    if len(shape) != len(dims):
        return False
    return all(not isinstance(d, int) or d == size for d, size in zip(dims, shape, strict=True))


def defaulted_dims(
    declared: Mapping[str, list[Dim] | None], given: InputShapes, fixed: Collection[str] = ()
) -> list[str]:
    """The symbolic dims :func:`resolve_input_shapes` takes as 1 for want of a size, sorted.

    A named dim by its name; an unnamed one (``-1`` or ``?``) as ``input[axis]``. Inputs
    ``given`` a full shape, or ``fixed`` (frozen ones), default nothing, nor do the dims
    they name.
    """
    whole = {name for name in declared if name in given or name in fixed}
    sized = {d for name in whole for d in declared[name] or () if isinstance(d, str)}
    defaulted: set[str] = set()
    for name, dims in declared.items():
        for axis, dim in enumerate(() if name in whole else dims or ()):
            if dim is None:
                defaulted.add(f"{name}[{axis}]")
            elif isinstance(dim, str) and dim not in given and dim not in sized:
                defaulted.add(dim)
    return sorted(defaulted)


def _match(
    name: str,
    dims: list[Dim] | None,
    shape: tuple[int, ...],
    sizes: dict[str, int],
    origin: dict[str, str],
) -> None:
    """Check ``shape`` against input ``name``'s declared ``dims``; record the dims it names."""
    if dims is None:
        return
    shown = [d if d is not None else "?" for d in dims]
    if len(dims) != len(shape):
        raise ModelError(
            f"input {name!r} has rank {len(dims)} {shown}, but shape {list(shape)} was given"
        )
    for dim, size in zip(dims, shape, strict=True):
        if isinstance(dim, int) and dim != size:
            raise ModelError(
                f"input {name!r} has fixed shape {shown}; cannot set it to {list(shape)}"
            )
        if isinstance(dim, str):
            if sizes.setdefault(dim, size) != size:
                raise ModelError(
                    f"dimension {dim!r} is {sizes[dim]} by {origin[dim]}, but input {name!r} "
                    f"is given {list(shape)}"
                )
            origin.setdefault(dim, f"input {name!r} {list(shape)}")


def _is_size(dim: object) -> bool:
    return isinstance(dim, int | np.integer) and not isinstance(dim, bool) and int(dim) >= 0


def _shape(spec: Sequence[int] | int, what: str) -> tuple[int, ...]:
    dims = [spec] if _is_size(spec) else spec
    if isinstance(dims, str | bytes) or not isinstance(dims, Sequence | np.ndarray):
        raise ModelError(f"{what} must be a list of dims >= 0, not {spec!r}")
    if not all(_is_size(d) for d in dims):
        raise ModelError(f"{what} must be a list of dims >= 0, not {list(dims)}")
    return tuple(int(d) for d in dims)


def _size(spec: Sequence[int] | int, name: str) -> int:
    dims = _shape(spec, f"the size of dimension {name!r}")
    if len(dims) != 1:
        raise ModelError(f"dimension {name!r} takes one size, not {list(dims)}")
    return dims[0]
