"""Typed reading of a plan document's JSON sections, with one-line errors naming the field.

A :class:`Reader` wraps one JSON object (a ``dict``) and the dotted path that leads to it;
each accessor returns the field in its Python type, or ``None`` (empty for lists and maps)
when the key is absent or ``null``, and raises :class:`PlanError` naming the field and what
was found when it has another type. Booleans are never numbers here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from autopart.errors import AutopartError
from autopart.ir.target import VirtualDevice


class PlanError(AutopartError):
    """A plan file is corrupt, of another schema, or does not fit the model or machine."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Reader:
    """Typed access to the fields of one JSON object found at ``where`` in a plan.

    ``known`` lists the keys the object may hold; with ``strict`` any other key is refused,
    else ignored (an older version's extras).
    """

    def __init__(self, document: Any, where: str, strict: bool, known: Iterable[str]) -> None:
        if not isinstance(document, dict):
            raise PlanError(f"plan field {where} must be an object, not {_shown(document)}")
        self.document = document
        self.where = where
        self.strict = strict
        self.known = set(known)
        unknown = sorted(str(key) for key in document if key not in self.known)
        if strict and unknown:
            raise PlanError(f"plan field {where} has unknown key(s) {', '.join(unknown[:5])}")

    def _fail(self, key: str, wanted: str, value: Any) -> PlanError:
        return PlanError(f"plan field {self.where}.{key} must be {wanted}, not {_shown(value)}")

    def _get(self, key: str) -> Any:
        return self.document.get(key)

    def text(self, key: str) -> str | None:
        """A string field, or ``None``."""
        value = self._get(key)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def number(self, key: str, finite: bool = True) -> float | None:
        """A number field (an int is widened to float; with ``finite``, finite), or ``None``."""
        value = self._get(key)
        if value is None:
            return None
        if not _is_number(value) or (finite and not math.isfinite(value)):
            raise self._fail(key, "a finite number" if finite else "a number", value)
        return float(value)

    def seconds(self, key: str) -> float | None:
        """A time in seconds: a finite number, never negative; or ``None``."""
        value = self.number(key)
        if value is not None and value < 0:
            raise self._fail(key, "a time in seconds (>= 0)", value)
        return value

    def target(self, key: str) -> str:
        """A required target spec, ``device[/unit]@codegen`` (a device and a codegen)."""
        value = self.required_text(key)
        try:
            parsed = VirtualDevice.parse(value)
        except AutopartError:
            parsed = VirtualDevice()
        if not parsed.is_complete:
            raise self._fail(key, "a target such as cpu@numpy", value)
        return value

    def count(self, key: str) -> int | None:
        """A non-negative integer field, or ``None``."""
        value = self._get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self._fail(key, "a non-negative integer", value)
        return value

    def required_text(self, key: str) -> str:
        """A string field that must be present."""
        value = self.text(key)
        if value is None:
            raise self._fail(key, "a string", value)
        return value

    def required_number(self, key: str, finite: bool = True) -> float:
        """A number field that must be present (and, with ``finite``, be finite)."""
        value = self.number(key, finite)
        if value is None:
            raise self._fail(key, "a finite number" if finite else "a number", value)
        return value

    def required_flag(self, key: str) -> bool:
        """A boolean field that must be present."""
        value = self._get(key)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def items(self, key: str) -> list[Any]:
        """A list field (its items unchecked), or ``[]``."""
        value = self._get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(key, "a list", value)
        return value

    def numbers(self, key: str, minimum: float = -math.inf) -> list[float]:
        """A list of finite numbers of at least ``minimum``, or ``[]``."""
        values = self.items(key)
        for index, value in enumerate(values):
            if not _is_number(value) or not math.isfinite(value) or value < minimum:
                wanted = "a finite number" + ("" if minimum == -math.inf else f" >= {minimum}")
                raise self._fail(f"{key}[{index}]", wanted, value)
        return [float(value) for value in values]

    def nested_numbers(self, key: str) -> dict[str, dict[str, float]]:
        """An object of objects of numbers (e.g. node -> target -> seconds), or ``{}``."""
        outer = self._get(key)
        if outer is None:
            return {}
        if not isinstance(outer, dict):
            raise self._fail(key, "an object", outer)
        nested: dict[str, dict[str, float]] = {}
        for name, inner in outer.items():
            if not isinstance(inner, dict):
                raise self._fail(f"{key}.{name}", "an object", inner)
            for label, value in inner.items():
                if not _is_number(value):
                    raise self._fail(f"{key}.{name}.{label}", "a number", value)
            nested[str(name)] = {str(label): float(value) for label, value in inner.items()}
        return nested

    def section(self, key: str, known: Iterable[str]) -> Reader | None:
        """The nested object ``key`` (with keys ``known``) as a reader of its own, or ``None``."""
        value = self._get(key)
        return None if value is None else self.child(value, key, known)

    def child(self, value: Any, key: str, known: Iterable[str]) -> Reader:
        """A reader of ``value`` found under ``key`` (same strictness; ``known`` its keys)."""
        return Reader(value, f"{self.where}.{key}", self.strict, known)

    def strings(self, key: str) -> list[str]:
        """A list of strings, or ``[]``."""
        values = self.items(key)
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise self._fail(f"{key}[{index}]", "a string", value)
        return list(values)

    def required_count(self, key: str) -> int:
        """A non-negative integer field that must be present."""
        value = self.count(key)
        if value is None:
            raise self._fail(key, "a non-negative integer", value)
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        """An object field (its values unchecked), or ``{}``."""
        value = self._get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._fail(key, "an object", value)
        return value

    def text_mapping(self, key: str) -> dict[str, str]:
        """An object of strings (e.g. node -> target), or ``{}``."""
        value = self.mapping(key)
        for name, text in value.items():
            if not isinstance(text, str):
                raise self._fail(f"{key}.{name}", "a string", text)
        return dict(value)

    def objects(self, key: str, known: Iterable[str]) -> list[Reader]:
        """A list of objects with keys ``known``, each as a reader of its own."""
        return [self.child(item, f"{key}[{i}]", known) for i, item in enumerate(self.items(key))]
