"""The package's structural limits: no import cycles, small modules and functions, and
cross-references in docstrings and docs that name things which exist.

Everything here reads the source with ``ast`` and regular expressions; only the reference
check imports the modules it names.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autopart"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
# A Sphinx role naming a fully-qualified autopart object, e.g. :func:`~autopart.api.run`.
ROLE = re.compile(r":(?:mod|func|class|data|meth|attr|exc|obj):`~?(autopart(?:\.\w+)*)`")
# A repository path under autopart/, e.g. autopart/search/ilp.py or autopart/ops/.
PACKAGE_PATH = re.compile(r"(?<![\w./-])autopart/[\w/]*(?:\.py)?")


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports anywhere: top level, functions, TYPE_CHECKING."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wanted += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                wanted.append(submodule if submodule in modules else base)
    found: set[str] = set()
    for target in wanted:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def _import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module: the import cycles."""
    names = sorted(edges)
    position = {name: i for i, name in enumerate(names)}
    rows = [position[a] for a in names for _ in edges[a]]
    cols = [position[b] for a in names for b in sorted(edges[a])]
    graph = csr_array((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(graph, directed=True, connection="strong")
    members: dict[int, list[str]] = {}
    for name, label in zip(names, labels, strict=True):
        members.setdefault(int(label), []).append(name)
    return [group for group in members.values() if len(group) > 1]


def test_cycle_finder_finds_a_cycle_through_three_modules() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _import_cycles(edges) == [["a", "b", "c"]]
    assert _import_cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_and_relative_imports_are_edges(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "def f():\n    from autopart.search import ilp\n    from . import options\n"
        "    import autopart.ir.graph as graph\n",
        encoding="utf-8",
    )
    modules = _modules()
    found = _imported("autopart.search.planner", source, modules)
    assert found == {"autopart.search.ilp", "autopart.search.options", "autopart.ir.graph"}


def test_no_import_cycles() -> None:
    modules = _modules()
    edges = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert _import_cycles(edges) == []


def test_modules_are_at_most_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in _modules().values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_functions_are_at_most_80_lines() -> None:
    long: dict[str, int] = {}
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from one by getattr.

    An attribute only annotated on a class (a dataclass field without a default, a
    protocol member) counts as existing.
    """
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
            break
        except ModuleNotFoundError:
            continue
    else:
        return False
    for attribute in parts[split:]:
        if hasattr(found, attribute):
            found = getattr(found, attribute)
        elif not isinstance(found, ModuleType) and any(
            attribute in vars(klass).get("__annotations__", {})
            for klass in getattr(found, "__mro__", ())
        ):
            found = None
        else:
            return False
    return True


def _sources() -> Iterator[tuple[str, str]]:
    """Each package module and docs page as (path relative to the repository, text)."""
    for path in [*_modules().values(), *sorted((ROOT / "docs").rglob("*.md"))]:
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def test_reference_checker_tells_stale_names_from_live_ones() -> None:
    assert _resolves("autopart.search.ilp_copies.NodePlacements.costs")  # annotated only
    assert _resolves("autopart.targets.devices.Machine.fingerprint")
    assert not _resolves("autopart.costmodel.from_profile_from_profile")
    assert not _resolves("autopart.ops.recurrent._run_directions")


def test_docstring_roles_name_what_exists() -> None:
    stale = [
        f"{where}: {match.group(0)}"
        for where, text in _sources()
        for match in ROLE.finditer(text)
        if not _resolves(match.group(1))
    ]
    assert stale == []


def test_cited_package_paths_exist() -> None:
    missing = [
        f"{where}: {match.group(0)}"
        for where, text in _sources()
        for match in PACKAGE_PATH.finditer(text)
        if not (ROOT / match.group(0)).exists()
    ]
    assert missing == []


# -- every codegen in a folder of its own, named by nothing outside it --------------------
TARGETS = PACKAGE / "targets"
# (module, literal) pairs that may name a codegen outside its folder, each with its reason.
CODEGEN_NAME_ALLOWED = {
    # the host's facts (and so the machine fingerprint) hold the numpy library's version,
    # the library every part of autopart computes with, not the codegen named after it
    ("autopart/targets/host.py", "numpy"),
}


def _codegen_folders() -> list[str]:
    """The folders under autopart/targets/ that hold a codegen (a ``codegen`` module)."""
    return sorted(path.parent.name for path in TARGETS.glob("*/codegen.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree``'s module, classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _names_codegen(literal: str, codegen: str) -> bool:
    """Whether a string literal is ``codegen``'s name or a target spec on it (cpu/0@x:bf16)."""
    spec = rf"(?:[\w:./-]*@)?{re.escape(codegen)}(?::[A-Za-z]\w*)?"
    return re.fullmatch(spec, literal) is not None


def _codegen_mentions(codegen: str) -> list[str]:
    """Every place outside ``codegen``'s folder that names it: a module path or a literal.

    A module path is ``autopart.targets.<codegen>`` (or its file path) anywhere in a
    module's text, and any import that reaches the folder, relative ones included. A
    literal is a string constant other than a docstring that is the name or a target spec
    naming it; prose that mentions it (help texts, messages, docstrings) is documentation.
    """
    folder = f"autopart.targets.{codegen}"
    path_text = re.compile(
        rf"autopart\.targets\.{re.escape(codegen)}\b|autopart/targets/{re.escape(codegen)}/"
    )
    found = []
    for name, (where, text, imported, literals) in _module_facts().items():
        if name == folder or name.startswith(folder + "."):
            continue
        found += [f"{where}: {m.group(0)}" for m in path_text.finditer(text)]
        found += [
            f"{where}: imports {target}"
            for target in sorted(imported)
            if target == folder or target.startswith(folder + ".")
        ]
        found += [
            f"{where}:{line}: {value!r}"
            for line, value in literals
            if _names_codegen(value, codegen) and (where, value) not in CODEGEN_NAME_ALLOWED
        ]
    return sorted(set(found))


@functools.cache
def _module_facts() -> dict[str, tuple[str, str, set[str], list[tuple[int, str]]]]:
    """Each module's path, text, imports and non-docstring string literals, parsed once."""
    modules = _modules()
    facts = {}
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        docstrings = _docstrings(tree)
        literals = [
            (node.lineno, node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ]
        where = str(path.relative_to(ROOT))
        facts[name] = (where, text, _imported(name, path, modules), literals)
    return facts


def test_the_codegen_name_check_tells_names_from_prose() -> None:
    assert _names_codegen("numpy", "numpy") and _names_codegen("cpu@numpy", "numpy")
    assert _names_codegen("cpu/0@openvino:bf16", "openvino")
    assert _names_codegen("opencl:0/1@opencl", "opencl")
    assert not _names_codegen("cpu@numpyish", "numpy")
    assert not _names_codegen("the numpy reference", "numpy")
    assert not _names_codegen("opencl:0", "opencl")  # a device name, not the codegen


def test_every_codegen_is_a_folder_whose_codegen_module_defines_it() -> None:
    from autopart.targets.codegen import Codegen
    from autopart.targets.registry import builtin_codegen_modules, codegen_names

    folders = _codegen_folders()
    assert {"numpy", "onnxruntime", "openvino", "opencl"} <= set(folders)
    assert builtin_codegen_modules() == [f"autopart.targets.{f}.codegen" for f in folders]
    for folder in folders:
        module = importlib.import_module(f"autopart.targets.{folder}.codegen")
        defined = [
            value.name
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Codegen)
            and value.__module__ == module.__name__
            and hasattr(value, "name")
        ]
        assert defined == [folder], folder
    assert set(folders) <= set(codegen_names())
    assert not list(TARGETS.glob("*_codegen.py"))  # no codegen beside the contract


def test_no_module_outside_a_codegen_folder_names_that_codegen() -> None:
    """A new codegen is one folder of its own plus its docs page: no other module names it."""
    mentions = {codegen: _codegen_mentions(codegen) for codegen in _codegen_folders()}
    assert mentions == {codegen: [] for codegen in mentions}


def test_the_name_check_finds_a_module_path_and_a_target_literal(tmp_path: Path) -> None:
    source = 'from autopart.targets.opencl import device\nFALLBACK = "cpu/0@opencl"\n'
    tree = ast.parse(source)
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert any(_names_codegen(value, "opencl") for value in literals)
    (tmp_path / "mod.py").write_text(source, encoding="utf-8")
    imported = _imported("autopart.search.mod", tmp_path / "mod.py", _modules())
    assert "autopart.targets.opencl.device" in imported


def test_every_codegen_has_its_docs_page_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for codegen in _codegen_folders():
        assert (ROOT / "docs" / f"{codegen}.md").is_file(), codegen
        assert re.search(rf":\s*{re.escape(codegen)}\.md\s*$", nav, re.MULTILINE), codegen
