"""The inline stylesheet and script of the HTML report (no external resources)."""

from __future__ import annotations

STYLE = """
:root { --ink: #1f2933; --muted: #616e7c; --line: #e4e7eb; --bg: #f5f7fa; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: var(--bg);
  font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
header { display: flex; flex-wrap: wrap; gap: 10px 28px; align-items: center;
  justify-content: space-between; padding: 12px 22px; background: #fff;
  border-bottom: 1px solid var(--line); }
h1 { margin: 0; font-size: 21px; }
h1 small { font-size: 13px; font-weight: 400; color: var(--muted); margin-left: 6px; }
.sub { color: var(--muted); font-size: 12px; margin-top: 2px; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; }
.card { min-width: 100px; padding: 5px 12px; border: 1px solid var(--line); border-radius: 8px;
  background: var(--bg); }
.card .k { font-size: 10.5px; color: var(--muted); text-transform: uppercase;
  letter-spacing: .04em; }
.card .v { font-size: 17px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .s { font-size: 11px; color: var(--muted); }
.card.absent .v { color: #9aa5b1; font-weight: 400; }
main { display: flex; align-items: flex-start; gap: 16px; padding: 14px 22px; }
.graphcol { flex: 0 1 auto; min-width: 420px; max-width: 58%; background: #fff;
  border: 1px solid var(--line); border-radius: 10px; }
.graphcol .toolbar { width: 0; min-width: 100%; }
.toolbar { position: sticky; top: 0; z-index: 2; display: flex; flex-wrap: wrap;
  gap: 6px 14px; align-items: center; padding: 8px 14px; background: #fffffff0;
  border-bottom: 1px solid var(--line); border-radius: 10px 10px 0 0; }
.toolbar h2 { margin: 0; }
.scroll { overflow-x: auto; }
aside { flex: 1 1 560px; min-width: 480px; position: sticky; top: 14px;
  max-height: calc(100vh - 28px); overflow: auto; display: flex; flex-direction: column;
  gap: 14px; }
aside section { background: #fff; border: 1px solid var(--line); border-radius: 10px;
  padding: 10px 14px; }
h2 { font-size: 14px; margin: 0 0 6px; }
h3 { font-size: 12px; color: var(--muted); margin: 8px 0 3px; font-weight: 600; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 12px; font-size: 12px; }
.legend span { white-space: nowrap; }
.sw { display: inline-block; width: 12px; height: 12px; margin-right: 4px; border-radius: 3px;
  border: 1.3px solid; vertical-align: -2px; }
.sw.diamond { width: 9px; height: 9px; border: 0; border-radius: 1px; transform: rotate(45deg);
  margin: 0 6px 0 2px; }
.sw.io { border: 1.3px dashed #7b8794; border-radius: 6px; width: 18px; }
.zoom { margin-left: auto; display: flex; gap: 4px; align-items: center; font-size: 12px; }
button { font: inherit; border: 1px solid var(--line); background: #fff; border-radius: 5px;
  padding: 0 8px; cursor: pointer; }
button:hover { background: var(--bg); }
svg text { font-family: inherit; }
.graph { display: block; margin: 0 auto; }
.node text.op { font-size: 11px; font-weight: 650; text-anchor: middle; fill: #1f2933; }
.node text.nm { font-size: 9.5px; text-anchor: middle; fill: #3e4c59; }
.node rect { stroke-width: 1.3; }
.io rect { fill: #fff; stroke: #7b8794; stroke-dasharray: 3 2; }
.io text { font-size: 10px; text-anchor: middle; fill: #52606d; }
.edge { fill: none; stroke: #9aa5b1; stroke-width: 1.2; }
.partition { opacity: .15; }
.partition.hl { opacity: .4; }
.plabels text { font-size: 10px; font-weight: 700; }
.copy path { stroke: #fff; stroke-width: 1.2; }
.copy text { font-size: 9px; font-weight: 650; fill: #37474f; }
body.focus .node:not(.hl), body.focus .copy:not(.hl), body.focus .bar:not(.hl) { opacity: .25; }
.node.hl rect { stroke-width: 2.6; }
.gantt { display: block; width: 100%; height: auto; }
.gantt .lane { fill: #f3f4f6; }
.gantt .grid { stroke: #e4e7eb; }
.gantt .tick, .gantt .unit { font-size: 11.5px; fill: var(--muted); text-anchor: middle; }
.gantt .unit { text-anchor: end; }
.gantt .lanelabel { font-size: 12.5px; text-anchor: end; fill: #3e4c59; }
.gantt .bar text { font-size: 11.5px; font-weight: 650; fill: #fff; text-anchor: middle;
  pointer-events: none; }
.gantt .bar { cursor: pointer; }
.empty { color: var(--muted); font-style: italic; margin: 4px 0 8px; }
.missing { margin: 0; padding-left: 18px; color: #8a5a00; }
.tablewrap { max-height: 330px; overflow: auto; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); }
th { position: sticky; top: 0; background: #fff; color: var(--muted); font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr[data-step] { cursor: pointer; }
tr.hl td { background: #fff4d6; }
#tip { position: fixed; z-index: 10; max-width: 480px; padding: 7px 10px; border-radius: 6px;
  pointer-events: none; background: #1f2933; color: #f5f7fa; font-size: 12px;
  box-shadow: 0 4px 14px #0004; white-space: pre-wrap; }
#tip .head { font-weight: 700; margin-bottom: 2px; }
"""

SCRIPT = """
"use strict";
(() => {
  const tip = document.getElementById("tip");
  // SVG <title>s are the no-script fallback; with script they feed one styled tooltip.
  for (const title of Array.from(document.querySelectorAll("svg title"))) {
    const owner = title.parentElement;
    if (owner && !owner.hasAttribute("data-tip")) {
      owner.setAttribute("data-tip", title.textContent);
    }
    title.remove();
  }
  const place = (at) => {
    const pad = 14, box = tip.getBoundingClientRect();
    let x = at.clientX + pad, y = at.clientY + pad;
    if (x + box.width > innerWidth - 6) x = Math.max(6, at.clientX - box.width - pad);
    if (y + box.height > innerHeight - 6) y = Math.max(6, at.clientY - box.height - pad);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  };
  const show = (el, at) => {
    tip.replaceChildren();
    el.getAttribute("data-tip").split("\\n").forEach((line, i) => {
      const div = document.createElement("div");
      div.textContent = line;
      if (i === 0) div.className = "head";
      tip.appendChild(div);
    });
    tip.hidden = false;
    place(at);
  };
  const selectStep = (step) => {
    const q = CSS.escape(step);
    return document.querySelectorAll(`[data-step="${q}"], [data-partition="${q}"]`);
  };
  let current = null;
  const highlight = (step) => {
    document.querySelectorAll(".hl").forEach((el) => el.classList.remove("hl"));
    document.body.classList.toggle("focus", step !== null);
    if (step !== null) selectStep(step).forEach((el) => el.classList.add("hl"));
  };
  document.addEventListener("mouseover", (ev) => {
    const target = ev.target instanceof Element ? ev.target : null;
    const tipped = target && target.closest("[data-tip]");
    if (tipped) show(tipped, ev); else tip.hidden = true;
    const linked = target && target.closest(".node, .copy, .bar, tr[data-step]");
    const step = linked ? linked.dataset.partition || linked.dataset.step : null;
    if (step !== current) { current = step; highlight(step); }
  });
  document.addEventListener("mousemove", (ev) => { if (!tip.hidden) place(ev); });
  document.addEventListener("click", (ev) => {
    const el = ev.target instanceof Element && ev.target.closest(".bar, tr[data-step]");
    if (!el) return;
    const q = CSS.escape(el.dataset.step);
    const first = document.querySelector(
      `.node[data-partition="${q}"], .copy[data-step="${q}"]`);
    if (first) first.scrollIntoView({block: "center", inline: "center", behavior: "smooth"});
  });
  const svg = document.getElementById("graph");
  const scroller = document.querySelector(".graphcol .scroll");
  const level = document.getElementById("zoomlevel");
  const w = Number(svg.getAttribute("width")), h = Number(svg.getAttribute("height"));
  let zoom = 1;
  const apply = () => {
    svg.setAttribute("width", String(w * zoom));
    svg.setAttribute("height", String(h * zoom));
    level.textContent = Math.round(zoom * 100) + "%";
  };
  document.querySelectorAll("[data-zoom]").forEach((button) => {
    button.addEventListener("click", () => {
      const how = button.dataset.zoom;
      zoom = how === "fit" ? Math.min(1, (scroller.clientWidth - 2) / w)
        : how === "1" ? 1 : Math.max(0.1, Math.min(3, zoom * Number(how)));
      apply();
    });
  });
  // A link ending in #NODE shows that node: its partition highlighted, its details open.
  const reveal = () => {
    const name = decodeURIComponent(location.hash.slice(1));
    const node = name && document.querySelector(`.node[data-node="${CSS.escape(name)}"]`);
    if (!node) return;
    node.scrollIntoView({block: "center", inline: "center"});
    current = node.dataset.partition;
    highlight(current);
    const box = node.getBoundingClientRect();
    show(node, {clientX: box.right, clientY: box.top});
  };
  addEventListener("hashchange", reveal);
  reveal();
  document.body.dataset.nodes = String(document.querySelectorAll(".node[data-node]").length);
  document.body.dataset.ready = "yes";
})();
"""
