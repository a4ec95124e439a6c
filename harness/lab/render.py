"""Turning database answers into what the pages show. Pure functions, no database.

* ``markdown`` renders a passage: CommonMark with tables and strikethrough, raw HTML escaped (a
  document's text never becomes markup), fenced code highlighted by Pygments on the server, and
  ``mermaid`` fences left as their escaped source for the page's script to draw (the source stays
  shown when Mermaid cannot parse it).
* ``snippet`` renders kb_retrieve's snippet (matches marked « and », pgkb_plpy.snippets) as inline HTML
  with ``<mark>``: no raw Markdown syntax.
* ``answer_summary`` is the answerability decision with the database's reason for it in words;
  ``no_evidence_reason`` the older wording for explain objects without an answerability key.
* ``rank_changes`` compares two result lists passage by passage.
* ``trend_svg`` draws a metric across evaluation runs as an SVG line chart (no script needed).
* ``explain_extra`` is what the explain page has no dedicated view for: every key the database
  adds later is still shown, generically.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from markdown_it import MarkdownIt
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

_FORMATTER = HtmlFormatter(nowrap=True)
PYGMENTS_CSS = HtmlFormatter(style="default").get_style_defs(".highlight")


def _highlight(code: str, lang: str, _attrs: str) -> str:
    name = (lang or "").strip().split()[0].lower() if (lang or "").strip() else ""
    if name == "mermaid":
        return f'<pre class="mermaid-source">{html.escape(code)}</pre>'
    try:
        lexer = get_lexer_by_name(name) if name else None
    except ClassNotFound:
        lexer = None
    if lexer is None:
        return ""  # markdown-it escapes it into a plain <pre><code>
    body = highlight(code, lexer, _FORMATTER)
    return f'<pre class="highlight"><code class="language-{html.escape(name)}">{body}</code></pre>'


_MD = MarkdownIt("commonmark", {"html": False, "linkify": False, "highlight": _highlight}).enable(
    ["table", "strikethrough"]
)


def markdown(text: str) -> Markup:
    """A passage's Markdown as safe HTML (raw HTML in the text is shown as text)."""
    return Markup(_MD.render(text or ""))


_INLINE = (
    MarkdownIt("commonmark", {"html": False, "linkify": False})
    .enable(["strikethrough"])
    .disable(["link", "image", "autolink"])
)
_OPEN, _CLOSE = "\ue000", "\ue001"  # the snippet's « and » while Markdown is rendered (private-use characters)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"(?:`{3,}|~{3,})[\w+-]*")
_TABLE_RULE = re.compile(r"\|(?:\s*:?-{3,}:?\s*\|)+")
_CELL_BREAK = re.compile(r"\s*\|(?:\s*\|)*\s*")
_HEADING = re.compile(r"(^|\s)#{1,6}\s+")
_LINE_MARK = re.compile(r"^\s{0,3}(?:>\s?|[-*+]\s+(?=\S))")


def snippet(text: str | None) -> Markup:
    """A snippet (kb_retrieve's, matches marked « and », pgkb_plpy.snippets, lines already joined) as the reader
    sees the passage: Markdown's block syntax removed (heading marks, quote and list markers, code fences,
    table rules; table cells joined by " · "), its inline syntax rendered (emphasis, code, strikethrough),
    links shown as their text, raw HTML escaped, the matches as <mark>."""
    lines = []
    for line in (text or "").replace("«", _OPEN).replace("»", _CLOSE).splitlines():
        line = _LINE_MARK.sub("", _FENCE.sub(" ", line))
        line = _HEADING.sub(r"\1", _LINK.sub(r"\1", line))
        if "|" in line:
            line = _CELL_BREAK.sub(" · ", _TABLE_RULE.sub("|", line)).strip(" ·")
        if line.strip():
            lines.append(line.strip())
    rendered = _INLINE.renderInline(" ".join(lines))
    return Markup(rendered.replace(_OPEN, "<mark>").replace(_CLOSE, "</mark>"))


def _fmt(value: Any) -> str:
    return "none" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


DECISIONS = ("answer", "low confidence", "no evidence")


def answer_summary(rows: list[dict[str, Any]] | None, explain: dict[str, Any] | None) -> dict[str, Any]:
    """The answerability decision, first thing on the page: what kb_retrieve's rows say (every row carries
    the call's decision and evidence, its probability; no row is "no evidence"), else the explain
    object's; and the explain object's reason: the probability against the thresholds and the signals
    it rests on."""
    detail = (explain or {}).get("answerability") if isinstance((explain or {}).get("answerability"), dict) else {}
    if rows:
        decision, evidence = rows[0].get("answerability"), rows[0].get("evidence")
    elif rows is not None:
        decision, evidence = "no evidence", detail.get("probability", 0)
    else:
        decision, evidence = detail.get("decision"), detail.get("probability", (explain or {}).get("evidence"))
    if decision is None and explain is not None:
        decision = (
            "no evidence"
            if explain.get("no_evidence")
            else "low confidence"
            if explain.get("low_confidence")
            else "answer"
        )
    return {
        "decision": decision or "answer",
        "evidence": evidence,
        "why": _why(decision, detail, explain) if explain is not None else "",
    }


def _why(decision: str | None, detail: dict[str, Any], explain: dict[str, Any]) -> str:
    # the database's own sentence: the probability against the thresholds, and the signals it rests on
    if detail.get("reason"):
        return str(detail["reason"])
    if explain.get("returned") == 0 and not explain.get("no_evidence"):
        return "No passage matched the filters, namespace and as_of date."
    return no_evidence_reason(explain)


def dense_score_label(explain: dict[str, Any] | None) -> str:
    """What the dense leg's score is in this call: a z-score within the passage's language group when the
    database corrected for language (its explain object's language_correction has groups), else the cosine
    similarity."""
    correction = (explain or {}).get("language_correction")
    if isinstance(correction, dict) and correction.get("groups"):
        return "z-score"
    return "cosine"


def no_evidence_reason(explain: dict[str, Any]) -> str:
    """Why kb_retrieve returned no rows, from its explain object: the database's own decision first
    (an ``answerability`` reason when it gives one), else the best stage's top scores against the
    thresholds, else the notes."""
    answerability = explain.get("answerability")
    if isinstance(answerability, dict) and answerability.get("reason"):
        return str(answerability["reason"])
    if not explain.get("no_evidence"):
        if explain.get("returned") == 0:
            return "no passage matched the filters, namespace and as_of date"
        return ""
    thresholds = explain.get("thresholds") or {}
    stages = explain.get("stages") or []
    parts = []
    if not stages:
        parts.append("no stage was run")
    else:
        lexical = [s.get("lexical_top_coverage") for s in stages if s.get("lexical_top_coverage") is not None]
        dense = [s.get("dense_top_similarity") for s in stages if s.get("dense_top_similarity") is not None]
        if explain.get("mode") != "dense":
            if lexical:
                parts.append(
                    f"the best lexical match covers {_fmt(max(lexical))} of the query's weight "
                    f"(evidence needs more than min_lexical_coverage {_fmt(thresholds.get('min_lexical_coverage'))})"
                )
            else:
                parts.append("no passage shares a term with the query")
        if explain.get("mode") != "lexical":
            if dense:
                parts.append(
                    f"the most similar passage scores {_fmt(max(dense))} "
                    f"(evidence needs more than min_similarity {_fmt(thresholds.get('min_similarity'))})"
                )
            else:
                parts.append("the dense leg found no candidate")
    notes = explain.get("notes") or []
    text = "No evidence: " + "; ".join(parts) + "."
    if notes:
        text += " Notes: " + "; ".join(str(n) for n in notes) + "."
    return text


def passage_key(row: dict[str, Any]) -> Any:
    return row.get("chunk_id") or (row.get("source"), row.get("section_path"))


def rank_changes(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> dict[str, Any]:
    """For each right row: its rank on the left (None: new) and the move (positive = moved up); the left
    rows missing on the right; and how many passages changed place."""
    left_rank = {passage_key(r): r["rank"] for r in left}
    right_rank = {passage_key(r): r["rank"] for r in right}
    marks = []
    for row in right:
        before = left_rank.get(passage_key(row))
        marks.append({"before": before, "move": None if before is None else before - row["rank"]})
    dropped = [r for r in left if passage_key(r) not in right_rank]
    changed = sum(1 for m in marks if m["move"] != 0) + len(dropped)
    left_marks = [{"after": right_rank.get(passage_key(r))} for r in left]
    return {"right": marks, "left": left_marks, "dropped": dropped, "changed": changed}


def group_by_document(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows grouped by document, documents in the order of their best passage."""
    groups: dict[Any, dict[str, Any]] = {}
    for row in rows:
        group = groups.setdefault(row["document_id"], {"first": row, "rows": []})
        group["rows"].append(row)
    return list(groups.values())


TIMING_ORDER = ("embed", "lexical", "dense", "fuse", "snippets")


def timing_segments(timings: dict[str, Any]) -> tuple[list[dict[str, Any]], float]:
    """The stage timings as bar segments (name, ms, percent of the sum of stages) and the total."""
    numbers = {k: float(v) for k, v in (timings or {}).items() if isinstance(v, int | float)}
    total = numbers.pop("total", None)
    names = [n for n in TIMING_ORDER if n in numbers] + sorted(n for n in numbers if n not in TIMING_ORDER)
    stage_sum = sum(max(numbers[n], 0) for n in names) or 1.0
    segments = [{"name": n, "ms": numbers[n], "percent": 100 * max(numbers[n], 0) / stage_sum} for n in names]
    return segments, total if total is not None else sum(numbers.values())


# Keys of the explain object that the explain page shows in a view of their own.
EXPLAIN_VIEWS = frozenset(
    {
        "query",
        "analysis",
        "mode_requested",
        "mode",
        "model",
        "fusion",
        "stages",
        "stage_used",
        "candidates",
        "evidence",
        "low_confidence",
        "no_evidence",
        "thresholds",
        "returned",
        "notes",
        "timings_ms",
        "results",
    }
)


def explain_extra(explain: dict[str, Any]) -> dict[str, Any]:
    """The explain object's keys without a dedicated view, in their order (rendered generically)."""
    return {k: v for k, v in explain.items() if k not in EXPLAIN_VIEWS}


SERIES_COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")


def trend_svg(
    runs: list[dict[str, Any]],
    metric: str,
    highlight_run: int | None = None,
    series: list[dict[str, Any]] | None = None,
) -> Markup:
    """A line chart of metric across runs (oldest to newest), one line per configuration (series: the
    groups of harness.lab.runs.configurations, each with key and label; None: one line per mode), each
    point a link to its run; the highlighted run is drawn larger. Runs without the metric are skipped."""
    points = [r for r in sorted(runs, key=lambda r: (r["started_at"], r["id"])) if _number(r["metrics"].get(metric))]
    if not points:
        return Markup(f'<p class="empty">No run has the metric {html.escape(metric)}.</p>')
    if series is None:
        groups = [{"key": m, "label": m} for m in sorted({r["mode"] for r in points})]

        def key_of(r: dict[str, Any]) -> str:
            return r["mode"]
    else:
        groups = [g for g in series if any(r.get("series_key") == g["key"] for r in points)]

        def key_of(r: dict[str, Any]) -> str:
            return r.get("series_key") or f"run-{r['id']}"

    width, left, right, top, plot_bottom = 720, 48, 16, 16, 224
    height = plot_bottom + 28 + 18 * len(groups)
    values = [float(r["metrics"][metric]) for r in points]
    high = max(values)
    top_value = 1.0 if 0 <= min(values) and high <= 1 else _nice_ceiling(high)
    xs = {r["id"]: left + (i + 0.5) * (width - left - right) / len(points) for i, r in enumerate(points)}

    def y(v: float) -> float:
        return top + (1 - v / top_value) * (plot_bottom - top) if top_value else plot_bottom

    out = [
        f'<svg class="trend" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'aria-label="{html.escape(metric)} across {len(points)} runs, one line per configuration">'
    ]
    for i in range(5):
        v = top_value * i / 4
        out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>')
        out.append(f'<text class="axis" x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for r in points:
        out.append(
            f'<text class="axis" x="{xs[r["id"]]:.1f}" y="{plot_bottom + 16}" text-anchor="middle">#{r["id"]}</text>'
        )
    for index, group in enumerate(groups):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        members = [r for r in points if key_of(r) == group["key"]]
        label = html.escape(str(group["label"]))
        path = " ".join(f"{xs[r['id']]:.1f},{y(float(r['metrics'][metric])):.1f}" for r in members)
        out.append(
            f'<polyline class="series" data-series="{html.escape(str(group["key"]))}" data-mode="'
            f'{html.escape(members[0]["mode"])}" points="{path}" stroke="{colour}"/>'
        )
        for r in members:
            value = float(r["metrics"][metric])
            radius = 6 if r["id"] == highlight_run else 3.5
            out.append(
                f'<a href="/eval/{r["id"]}"><circle class="point" cx="{xs[r["id"]]:.1f}" cy="{y(value):.1f}" '
                f'r="{radius}" fill="{colour}"><title>run {r["id"]} ({label}, '
                f"{r['started_at']:%Y-%m-%d %H:%M}): {metric} {value:.4g}</title></circle></a>"
            )
        ly = plot_bottom + 36 + 18 * index
        out.append(f'<rect x="{left}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text class="legend" x="{left + 16}" y="{ly}">{label}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _nice_ceiling(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


def numeric_metrics(runs: list[dict[str, Any]]) -> list[str]:
    """The numeric metric names of the runs, the headline ones first."""
    names = {k for r in runs for k, v in (r["metrics"] or {}).items() if _number(v)}
    first = [
        m
        for m in (
            "ndcg@10",
            "mrr@10",
            "recall@10",
            "pass_top1",
            "pass_top3",
            "answered_when_found",
            "no_answer_accuracy",
        )
        if m in names
    ]
    return first + sorted(names - set(first))
