"""``autopart show PLAN.json [--html OUT.html]``: explain a plan as a tree and a web page."""

from __future__ import annotations

import click

from autopart import api
from autopart.cli.common import console, user_errors
from autopart.report.html import write_html
from autopart.report.tree import explain, render_tree


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
