"""The ILP's copy terms and memory rows, and the memory estimate those rows cap.

See :mod:`autopart.search.ilp_formulation` for the variables (``need``, ``z``, ``r``) and
for how the memory estimate is counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

import numpy as np

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Graph
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.search.milp_model import Columns, Expr, MilpModel, negate


class NodePlacements(Protocol):
    """What the copy terms read of the ILP they join: its node order, devices and caps.

    :class:`autopart.search.ilp_formulation.Formulation` is the one implementation; the
    protocol keeps this module from importing it back.
    """

    costs: Costs
    memory: dict[str, int]  # device -> byte cap, for the capped devices only
    index: dict[str, int]  # node name -> topological position
    scale: float  # seconds -> objective units

    def devices_of(self, n: int) -> set[str]:
        """The devices node ``n`` can run on."""
        ...

    def device_expr(self, x: Columns, n: int, device: str) -> Expr:
        """``X[n,device]``: the sum of ``x[n,t]`` over ``n``'s targets on ``device``."""
        ...

    def live_span(self, name: str) -> tuple[int, int]:
        """First and last topological positions at which value ``name`` is held."""
        ...


class CopyTerms:
    """The copy terms of the model and, for capped devices, the memory rows."""

    def __init__(self, form: NodePlacements, model: MilpModel, x: Columns) -> None:
        self.form, self.model, self.x = form, model, x
        self.resident: dict[str, list[tuple[str, Expr, float]]] = {d: [] for d in form.memory}

    def add(self) -> None:
        """Add every value's copy terms, then the memory rows."""
        for name, producer in activations(self.form.costs.graph, self.form.index):
            needs = self._needs(name, producer)
            self._price(name, producer, needs)
            for device, entries in self.resident.items():
                self._residence(device, name, producer, needs, entries)
        for device, entries in self.resident.items():
            self._memory_rows(device, entries)

    def _needs(self, name: str, producer: int | None) -> dict[str, Expr]:
        """``need[v,d]`` for each device ``d`` a copy of ``v`` may go to (``[]``: always)."""
        form, graph = self.form, self.form.costs.graph
        sources = {HOST_DEVICE} if producer is None else form.devices_of(producer)
        wanted: dict[str, list[int]] = {}
        for c in sorted({form.index[c.name] for c in graph.value(name).consumers}):
            for d in form.devices_of(c):
                wanted.setdefault(d, []).append(c)
        if name in graph.outputs:
            wanted[HOST_DEVICE] = []
        needs: dict[str, Expr] = {}
        for d, users in wanted.items():
            if sources == {d}:
                continue
            if not users:
                needs[d] = []
            elif len(users) == 1:
                needs[d] = form.device_expr(self.x, users[0], d)
            else:
                need = self.model.var()
                for c in users:
                    self.model.row([(need, 1.0), *negate(form.device_expr(self.x, c, d))], 0.0)
                needs[d] = [(need, 1.0)]
        return needs

    def _price(self, name: str, producer: int | None, needs: dict[str, Expr]) -> None:
        form, model = self.form, self.model
        nbytes = form.costs.graph.value(name).nbytes
        sources = {HOST_DEVICE} if producer is None else form.devices_of(producer)
        for d, need in needs.items():
            for s in sorted(sources - {d}):
                price = form.scale * form.costs.transfer(s, d, nbytes)
                if price <= 0:
                    continue
                if len(sources) == 1 and not need:
                    model.var(price, lower=1.0)
                elif len(sources) == 1:
                    for col, coef in need:
                        model.cost[col] += price * coef
                else:
                    assert producer is not None
                    home = negate(form.device_expr(self.x, producer, s))
                    lower = -1.0 if need else 0.0  # an empty ``need`` is the constant 1
                    model.row([(model.var(price), 1.0), *home, *negate(need)], lower)

    def _residence(
        self,
        device: str,
        name: str,
        producer: int | None,
        needs: dict[str, Expr],
        entries: list[tuple[str, Expr, float]],
    ) -> None:
        """Record ``r[v,device]``: 1 when ``v`` is made on or copied to ``device``."""
        nbytes = float(self.form.costs.graph.value(name).nbytes)
        if producer is None:
            home: Expr | None = [] if device == HOST_DEVICE else None
        else:
            home = self.form.device_expr(self.x, producer, device) or None
        need = needs.get(device)
        if home == [] or need == []:
            entries.append((name, [], nbytes))
        elif home is not None and need is not None:
            r = self.model.var()
            self.model.row([(r, 1.0), *negate(home)], lower=0.0)
            self.model.row([(r, 1.0), *negate(need)], lower=0.0)
            entries.append((name, [(r, 1.0)], nbytes))
        elif home is not None or need is not None:
            entries.append((name, home or need or [], nbytes))

    def _memory_rows(self, device: str, entries: list[tuple[str, Expr, float]]) -> None:
        form, model = self.form, self.model
        graph = form.costs.graph
        weights = model.var(upper=math.inf)
        terms: Expr = [(weights, 1.0)]
        for const, readers in constant_readers(graph).items():
            on_device = [n for n in readers if device in form.devices_of(n)]
            nbytes = float(graph.value(const).nbytes)
            if len(on_device) == 1:
                terms += [
                    (col, -nbytes) for col, _ in form.device_expr(self.x, on_device[0], device)
                ]
            elif on_device:
                w = model.var()
                for n in on_device:
                    model.row([(w, 1.0), *negate(form.device_expr(self.x, n, device))], 0.0)
                terms.append((w, -nbytes))
        model.row(terms, 0.0, 0.0)
        spans = [form.live_span(name) for name, _, _ in entries]
        starting: dict[int, list[int]] = {}
        for i, (first, _) in enumerate(spans):
            starting.setdefault(first, []).append(i)
        checkpoints = sorted({last for _, last in spans})
        live: set[int] = set()
        position = 0
        for checkpoint in checkpoints:
            while position <= checkpoint:
                live.update(starting.get(position, ()))
                position += 1
            live = {i for i in live if spans[i][1] >= checkpoint}
            expr: Expr = [(weights, 1.0)]
            fixed = 0.0
            for i in live:
                _, resid, nbytes = entries[i]
                expr += [(col, nbytes * coef) for col, coef in resid]
                fixed += 0.0 if resid else nbytes
            model.row(expr, upper=form.memory[device] - fixed)


def memory_estimate(costs: Costs, assignment: Mapping[str, VirtualDevice]) -> dict[str, int]:
    """Per device, the bytes the ILP's memory caps limit under ``assignment``.

    Weights read by the device's nodes (each constant once) plus the peak, over the
    topological node order, of the non-constant values resident there (see
    :mod:`autopart.search.ilp_formulation`). Devices holding nothing are left out.
    """
    graph = costs.graph
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    device_of = [str(assignment[node.name].device) for node in graph.nodes]
    estimate: dict[str, int] = {}
    for const, readers in constant_readers(graph).items():
        for device in {device_of[n] for n in readers}:
            estimate[device] = estimate.get(device, 0) + graph.value(const).nbytes
    load: dict[str, np.ndarray] = {}
    for name, producer in activations(graph, index):
        value = graph.value(name)
        places = {HOST_DEVICE if producer is None else device_of[producer]}
        places |= {device_of[index[c.name]] for c in value.consumers}
        if name in graph.outputs:
            places.add(HOST_DEVICE)
        first, last = live_span(graph, index, name)
        for device in places:
            delta = load.setdefault(device, np.zeros(len(graph.nodes) + 1, dtype=np.int64))
            delta[first] += value.nbytes
            delta[last + 1] -= value.nbytes
    for device, delta in load.items():
        estimate[device] = estimate.get(device, 0) + int(np.cumsum(delta).max(initial=0))
    return estimate


def live_span(graph: Graph, index: dict[str, int], name: str) -> tuple[int, int]:
    """First and last topological positions at which value ``name`` is held."""
    value = graph.value(name)
    first = 0 if value.producer is None else index[value.producer.name]
    if name in graph.outputs:
        return first, len(graph.nodes) - 1
    return first, max((index[c.name] for c in value.consumers), default=first)


def activations(graph: Graph, index: dict[str, int]) -> list[tuple[str, int | None]]:
    """Non-constant values that are read or output, with their producer's position."""
    found: list[tuple[str, int | None]] = []
    for name, value in graph.values.items():
        if value.is_const or not (value.consumers or name in graph.outputs):
            continue
        if value.producer is not None:
            found.append((name, index[value.producer.name]))
        elif name in graph.inputs:
            found.append((name, None))
    return found


def constant_readers(graph: Graph) -> dict[str, list[int]]:
    """Each constant read by some node, with the positions of its readers."""
    readers: dict[str, list[int]] = {}
    for n, node in enumerate(graph.nodes):
        for name in dict.fromkeys(node.present_inputs):
            if graph.value(name).is_const:
                readers.setdefault(name, []).append(n)
    return readers
