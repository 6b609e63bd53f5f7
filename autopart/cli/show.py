"""``autopart show PLAN.json [--html OUT.html]``: explain a plan as a tree and a web page."""

from __future__ import annotations

import click
from rich.text import Text
from rich.tree import Tree

from autopart import api
from autopart.cli.common import console, styled, user_errors
from autopart.ir.target import HOST_DEVICE
from autopart.limits import format_size
from autopart.report.html import write_html
from autopart.report.tree import (
    WHOLE_DEVICE,
    Explanation,
    describe_saving,
    explain,
    format_seconds,
    totals,
)


@click.command("show")
@click.argument("plan_path", metavar="PLAN.json")
@click.option(
    "--html",
    "html_path",
    metavar="OUT.html",
    help="also write a self-contained page: the graph, the schedules, the partitions",
)
@user_errors
def show_command(plan_path: str, html_path: str | None) -> None:
    """Explain a plan: device -> unit -> codegen -> partition -> nodes, costs and copies.

    The plan must match its model (checked by hash). Costs and schedules come from the
    plan's predicted and measured fields; what the plan does not record is said so.
    """
    plan, graph = api.load_plan(plan_path)
    if html_path:
        write_html(plan, graph, html_path)
    console.print(render_tree(explain(plan, graph)))
    if html_path:
        console.print(f"page written to {html_path}", soft_wrap=True)


def render_tree(explanation: Explanation) -> Tree:
    """Device -> unit -> codegen -> partition -> nodes, then copies, then what is missing."""
    root = Tree(
        styled(
            (explanation.model, "bold"),
            f": {explanation.node_count} nodes in {len(explanation.partitions)} partition(s), "
            f"{len(explanation.copies)} copies",
        )
    )
    branches: dict[tuple[str, ...], Tree] = {}

    def branch(key: tuple[str, ...], parent: Tree, label: Text) -> Tree:
        if key not in branches:
            branches[key] = parent.add(label)
        return branches[key]

    for row in sorted(explanation.partitions, key=lambda r: (r.device != HOST_DEVICE, r.device)):
        device = branch((row.device,), root, styled((row.device, "bold cyan")))
        unit_label = "* (whole device)" if row.unit == WHOLE_DEVICE else f"unit {row.unit}"
        unit = branch((row.device, row.unit), device, styled(unit_label))
        codegen = branch(
            (row.device, row.unit, row.codegen), unit, styled((f"@{row.codegen}", "magenta"))
        )
        times = [f"{len(row.nodes)} node(s)"]
        if row.predicted_s is not None:
            times.append(f"predicted {format_seconds(row.predicted_s)}")
        elif row.nodes_s is not None:
            times.append(f"nodes {format_seconds(row.nodes_s)}")
        if row.measured_s is not None:
            times.append(f"measured {format_seconds(row.measured_s)}")
        part = codegen.add(styled((row.id, "bold"), " · " + " · ".join(times)))
        for node in row.nodes:
            cost = "" if node.cost_s is None else f" {format_seconds(node.cost_s)}"
            part.add(
                styled(node.name, " ", (node.op_type, "dim"), f"{cost} · {describe_saving(node)}")
            )
    if explanation.copies:
        total = sum(c.nbytes for c in explanation.copies)
        copies = root.add(
            styled(("copies", "bold yellow"), f" ({len(explanation.copies)}, {format_size(total)})")
        )
        for copy in explanation.copies:
            times = f" · predicted {format_seconds(copy.predicted_s)}"
            if copy.measured_s is not None:
                times += f", measured {format_seconds(copy.measured_s)}"
            copies.add(
                styled(
                    (copy.id, "bold"),
                    f" {copy.value} {copy.src}->{copy.dst} · {format_size(copy.nbytes)}{times}",
                )
            )
    for line in totals(explanation):
        root.add(styled((line, "bold green")))
    if explanation.missing:
        missing = root.add(styled(("missing", "yellow")))
        for sentence in explanation.missing:
            missing.add(styled(sentence))
    return root
