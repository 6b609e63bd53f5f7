"""The search's precisions on one library: a candidate the op-sum prices cannot see.

The ILP prices each node on each target from op costs, where a node on another library
costs only its copies and a launch. A library that compiles a whole model fuses and lays
out across its nodes in ways no op sum shows, and one that mixes precisions in one
subgraph (:attr:`~autopart.targets.codegen.Codegen.mixes_precisions`: OpenVINO keeps its
f32 nodes in bf16 Convert islands) runs the ILP's choice of precision per node as one
compiled model. So beside the ILP's plan, its precisions are tried on each such library
alone: every node on the library's whole device at the precision the ILP chose for it.

On magika with real files (``--max-drop 0.01``, 2026-12-06, a 2-core Xeon with AMX), the
ILP's plan put 84 nodes on onnxruntime and OpenVINO at f32 and bf16 in 15 partitions:
predicted 1.53 ms, measured 6.04. Its precisions on OpenVINO alone, one partition,
measured 1.32 ms with no answer changed, against onnxruntime alone's 3.40 ms (kept until
then) and OpenVINO as installed's 1.24 ms, which changes 28.3% of the answers.
"""

from __future__ import annotations

from collections.abc import Mapping

from autopart.costmodel.costs import Costs
from autopart.ir.target import REFERENCE_PRECISION, VirtualDevice
from autopart.search.baselines import more_exact
from autopart.targets.registry import codegen_names, get_codegen

Assignment = dict[str, VirtualDevice]


def mixing_libraries(costs: Costs) -> list[VirtualDevice]:
    """The whole-device f32 targets of ``costs`` whose codegen mixes precisions in a subgraph."""
    known = set(codegen_names())
    return [
        target
        for target in costs.targets
        if target.unit is None
        and target.precision is None
        and target.codegen in known
        and get_codegen(target.codegen).mixes_precisions
    ]


def on_one_library(
    costs: Costs, assignment: Mapping[str, VirtualDevice], library: VirtualDevice
) -> Assignment:
    """``assignment``'s precision per node, each node moved to ``library``'s whole device.

    A node goes to ``library`` at the precision ``assignment`` gives it, else at the nearest
    more exact precision among ``costs.targets`` that runs it; a node ``library`` runs at
    none of them stays where ``assignment`` put it.
    """
    moved: Assignment = {}
    for name, where in assignment.items():
        precision = where.computes_in
        wanted = library.at_precision(None if precision == REFERENCE_PRECISION else precision)
        runs_on = costs.node_cost.get(name, {})
        options = [wanted, *more_exact(wanted, costs.targets)]
        moved[name] = next((t for t in options if t in runs_on), where)
    return moved


def one_library_assignments(
    costs: Costs, assignment: Mapping[str, VirtualDevice]
) -> list[tuple[VirtualDevice, Assignment]]:
    """``assignment`` on each library that mixes precisions (:func:`on_one_library`).

    Only those that differ from ``assignment`` and mix two precisions or more on the
    library: one precision there is that target's single-target plan, already a candidate.
    """
    found = []
    for library in mixing_libraries(costs):
        moved = on_one_library(costs, assignment, library)
        mine = {t.precision for t in moved.values() if t.at_precision(None) == library}
        if moved != dict(assignment) and len(mine) > 1:
            found.append((library, moved))
    return found
