"""The report's one CSS block: system fonts only, so the page needs nothing from outside."""

CSS = """
:root { --ink:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#f6f7f9; --card:#fff;
  --pass:#047857; --pass-bg:#d1fae5; --warn:#b45309; --warn-bg:#fef3c7; --fail:#b91c1c; --fail-bg:#fee2e2;
  --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink); line-height:1.45;
  font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header.top { background:#111827; color:#f9fafb; padding:22px 32px 18px; }
header.top h1 { margin:0 0 4px; font-size:22px; font-weight:650; letter-spacing:-0.01em; }
header.top .meta { color:#9ca3af; font-size:13px; overflow-wrap:anywhere; }
header.top .meta b { color:#e5e7eb; font-weight:500; }
nav { display:flex; flex-wrap:wrap; gap:4px 16px; margin-top:12px; font-size:13px; }
nav a { color:#93c5fd; text-decoration:none; }
main { max-width:1180px; margin:0 auto; padding:20px 32px 48px; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:18px 22px;
  margin:18px 0; box-shadow:0 1px 2px rgba(0,0,0,.03); }
h2 { margin:0 0 10px; font-size:17px; }
h3 { margin:18px 0 8px; font-size:14px; }
h3 code { font-size:14px; }
.lead { color:var(--muted); margin:-4px 0 12px; }
.verdicts { display:grid; grid-template-columns:repeat(auto-fill, minmax(260px, 1fr)); gap:10px; }
.verdict { border:1px solid var(--line); border-left-width:4px; border-radius:8px; padding:10px 12px; }
.verdict.pass { border-left-color:var(--pass); } .verdict.warn { border-left-color:var(--warn); }
.verdict.fail { border-left-color:var(--fail); }
.verdict.skip { border-left-color:#d1d5db; } .verdict.skip .check { color:var(--muted); }
.verdict .check { font-weight:600; margin-left:6px; }
.verdict .detail { color:var(--muted); font-size:13px; margin-top:4px; }
.badge { display:inline-block; font-size:11px; font-weight:700; letter-spacing:.04em; padding:2px 8px;
  border-radius:999px; background:#e5e7eb; color:#374151; }
.badge.pass { background:var(--pass-bg); color:var(--pass); }
.badge.warn { background:var(--warn-bg); color:var(--warn); }
.badge.fail { background:var(--fail-bg); color:var(--fail); }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(170px, 1fr)); gap:10px; margin:8px 0 14px; }
.card { border:1px solid var(--line); border-radius:8px; padding:10px 12px; background:#fbfbfc; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card .value { font-size:22px; font-weight:650; font-variant-numeric:tabular-nums; }
.card .sub { color:var(--muted); font-size:12px; overflow-wrap:anywhere; }
dl.facts { display:grid; grid-template-columns:repeat(auto-fill, minmax(220px, 1fr)); gap:6px 18px; margin:0 0 12px; }
dl.facts dt { color:var(--muted); font-size:12px; } dl.facts dd { margin:0; font-weight:500; overflow-wrap:anywhere; }
.scroll { overflow-x:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; font-variant-numeric:tabular-nums; }
th, td { padding:5px 10px; border-bottom:1px solid var(--line); text-align:left; white-space:nowrap; }
th { color:var(--muted); font-weight:600; font-size:12px; background:#fafafa; }
td.num, th.num { text-align:right; }
tbody tr:hover { background:#f9fafb; }
table.matrix { width:auto; } table.matrix td { text-align:center; min-width:52px; font-weight:600; }
td.nv { background:#d1fae5; color:#065f46; } td.pcie { background:#dbeafe; color:#1e40af; }
td.host { background:#fef3c7; color:#92400e; } td.sys { background:#fee2e2; color:#991b1b; } td.self { color:#9ca3af; }
.op { display:grid; grid-template-columns:minmax(0, 1.1fr) minmax(0, 1fr); gap:18px; align-items:start;
  border-top:1px solid var(--line); padding-top:6px; }
@media (max-width:900px) { .op { grid-template-columns:minmax(0, 1fr); } }
svg.plot { width:100%; height:auto; display:block; }
/* Busbw beside time per call, one above the other where two would not fit. */
.pair { display:grid; grid-template-columns:repeat(auto-fit, minmax(min(380px, 100%), 1fr)); gap:14px; }
/* Small multiples: as many columns of panels as fit, one on a phone. */
.multiples { display:grid; grid-template-columns:repeat(auto-fill, minmax(min(290px, 100%), 1fr)); gap:12px;
  margin:8px 0 10px; }
.panel { margin:0; min-width:0; border:1px solid var(--line); border-radius:8px; padding:8px 10px; }
.panel figcaption { font-weight:600; margin-bottom:4px; }
.panel p { margin:6px 0 0; font-size:12px; color:var(--muted); }
details summary { cursor:pointer; color:var(--accent); margin:6px 0; }
.note { border-radius:6px; padding:8px 12px; margin:8px 0; font-size:13px; background:#eff6ff; color:#1e3a8a; }
.note.warn { background:var(--warn-bg); color:#78350f; } .note.fail { background:var(--fail-bg); color:#7f1d1d; }
.bad { color:var(--fail); font-weight:700; }
footer { color:var(--muted); font-size:12px; text-align:center; margin-top:24px; }
@media (max-width:600px) { header.top { padding:16px 14px 14px; } main { padding:12px 8px 32px; }
  section { padding:14px 12px; } }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12px; }
"""
