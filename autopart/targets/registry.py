"""The codegen registry: the built-in codegens found on disk, plugins, and lookups.

Every built-in codegen lives in a folder of its own under ``autopart/targets/``, whose
``codegen`` module defines it (:func:`builtin_codegen_modules`); plugins come from the
``autopart.codegens`` entry points or :func:`register_codegen`. The contract a codegen
keeps is :mod:`autopart.targets.codegen`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from autopart.errors import TargetError
from autopart.targets.codegen import Codegen, Role
from autopart.targets.peer import Peer

_CODEGENS: dict[str, Callable[[], Codegen]] = {}
CODEGEN_MODULE = "codegen"  # the module of a codegen folder that defines its codegen
ENTRY_POINT_GROUP = "autopart.codegens"
_loaded = False


def builtin_codegen_modules() -> list[str]:
    """The ``codegen`` module of every subpackage of :mod:`autopart.targets`, by folder name.

    Found on disk, as tinygrad finds its devices: a codegen is a folder, not a list entry.
    """
    package = __name__.rpartition(".")[0]
    folders = pkgutil.iter_modules([str(Path(__file__).parent)])
    return [f"{package}.{info.name}.{CODEGEN_MODULE}" for info in folders if info.ispkg]


def _defined_codegens(module: ModuleType) -> list[type[Codegen]]:
    """The concrete :class:`Codegen` classes ``module`` defines (not those it imports)."""
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, Codegen)
        and value.__module__ == module.__name__
        and not inspect.isabstract(value)
    ]


def _load_builtins() -> None:
    """Register every codegen the built-in folders define, ahead of any registered already.

    A folder without a ``codegen`` module is no codegen; a codegen whose optional
    dependency is missing registers anyway (it reports itself unavailable), and an
    ImportError of the dependency itself leaves the codegen out.
    """
    found: dict[str, Callable[[], Codegen]] = {}
    for name in builtin_codegen_modules():
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            if error.name and error.name.startswith("autopart") and not name.startswith(error.name):
                raise
            continue  # no codegen module, or an optional dependency (pyopencl, ...) is absent
        for codegen in _defined_codegens(module):
            found[codegen.name] = _CODEGENS.get(codegen.name, codegen)
    ordered = {**found, **_CODEGENS}
    _CODEGENS.clear()
    _CODEGENS.update(ordered)


def load_codegens() -> None:
    """Find the built-in codegens and load every plugin of the ``autopart.codegens`` group.

    Built-ins come first (:func:`builtin_codegen_modules`). An entry point may name a
    Codegen class (it is registered) or a module whose import registers codegens with
    :func:`register_codegen`. A built-in codegen whose optional dependency is missing is
    simply absent; a broken plugin raises :class:`TargetError`.
    """
    global _loaded
    if _loaded:
        return
    _loaded = True
    _load_builtins()
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry_point.load()
        except Exception as error:
            raise TargetError(
                f"codegen plugin {entry_point.name!r} ({entry_point.value}) failed to load: {error}"
            ) from None
        if isinstance(loaded, type) and issubclass(loaded, Codegen):
            register_codegen(loaded)


def register_codegen(factory: Callable[[], Codegen]) -> Callable[[], Codegen]:
    """Register a codegen class (or zero-argument factory) under its ``name``.

    Built-in codegens need not: the registry finds them. Scripts and plugins use it.
    """
    name = getattr(factory, "name", None)
    if not isinstance(name, str):
        raise TypeError("a registered codegen needs a class attribute `name`")
    _CODEGENS[name] = factory
    return factory


def get_codegen(name: str) -> Codegen:
    """Instantiate the codegen called ``name``; the error lists the available ones."""
    load_codegens()
    try:
        return _CODEGENS[name]()
    except KeyError:
        available = ", ".join(sorted(_CODEGENS))
        raise TargetError(f"unknown codegen {name!r}; available: {available}") from None


def codegen_names() -> list[str]:
    """Names of every registered codegen, sorted."""
    load_codegens()
    return sorted(_CODEGENS)


def registered_codegens() -> list[Codegen]:
    """An instance of every registered codegen: built-ins first, then in registration order."""
    load_codegens()
    return [factory() for factory in _CODEGENS.values()]


def forget_compiled() -> None:
    """Have every registered codegen drop its compiled cache (:meth:`Codegen.forget_compiled`)."""
    for codegen in registered_codegens():
        codegen.forget_compiled()


def codegen_for(role: Role) -> Codegen | None:
    """The first registered codegen that plays ``role`` (built-ins first), or None."""
    return next((c for c in registered_codegens() if role in c.roles), None)


def reference_codegen() -> Codegen:
    """The codegen playing :attr:`Role.REFERENCE`; :class:`TargetError` when none does."""
    codegen = codegen_for(Role.REFERENCE)
    if codegen is None:
        raise TargetError("no registered codegen is the reference")
    return codegen


def declared_peers(available: bool = False) -> list[Peer]:
    """Every peer the registered codegens offer, each name once (the first codegen's).

    With ``available``, only the peers of codegens whose library is installed here, and
    of those only the ones that are not another's configuration here (``Peer.redundant``:
    ``openvino alone f32`` where OpenVINO computes in f32 by default).
    """
    found: dict[str, Peer] = {}
    for codegen in registered_codegens():
        if available and not codegen.available():
            continue
        for peer in codegen.peers():
            if not (available and peer.redundant()):
                found.setdefault(peer.name, peer)
    return list(found.values())


def codegen_libraries() -> dict[str, str]:
    """The installed version of each registered codegen's library, by library name."""
    versions: dict[str, str] = {}
    for codegen in registered_codegens():
        version = codegen.library_version()
        if codegen.library is not None and version is not None:
            versions.setdefault(codegen.library, version)
    return versions
