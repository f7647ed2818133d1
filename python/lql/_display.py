"""Text, HTML and SVG renderings of results and activations, for terminals and notebooks.

Tables: :func:`text_table` (``repr(rel)``, ``rel.show()``) and :func:`html_table`
(``rel._repr_html_()``) show a relation's first rows; NULL cells read ``NULL``, lists show
their first items, control characters are escaped as ``\\n``, ``\\t``, ``\\u{1}`` and long
cells are cut with ``…``.

Pictures (SVG text, standard library only, drawn as the engine draws ``TRACE … SAVE
'x.svg'``: cells shaded white → blue by a value in [0, 1], captioned with short token
labels, each with a tooltip giving the exact value):

- :func:`logit_lens_svg`: a TRACE result (``layer``, ``top_token``, ``top_prob``, and
  ``position`` with ``POSITIONS ALL``), one row per stage, the last layer at the top;
- :func:`attention_rows_svg`: rows of the ``attention`` table for one layer and head;
- :func:`attention_svg`: one head's pattern from an :class:`~lql.ActivationCache`;
- :func:`activation_norms_svg`: ‖resid_post‖ per layer and position of a cache.

:func:`relation_svg` picks the picture a relation has (or None), and
:func:`relation_html` puts it above the table: that is what notebooks show.
"""

from __future__ import annotations

import html
import unicodedata
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:
    from ._activations import ActivationCache
    from ._connection import Relation

#: A relation with more rows than this is not drawn by its notebook repr (the table is).
MAX_CELLS = 4096

_LENS_COLUMNS = ("layer", "top_token", "top_prob")
_ATTENTION_COLUMNS = ("layer", "head", "query", "key", "weight")

# -- cells -----------------------------------------------------------------------------------


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\t``, ``\\r``, ``\\u{1f}``)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif unicodedata.category(ch) == "Cc":
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return "".join(out)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def cell_label(text: str, width: int = 10) -> str:
    """A token's text as the engine's SVG labels it: printable, spaces shown as ``·``, cut
    to ``width`` characters with ``…``."""
    return _cut(printable(text).replace(" ", "·"), width)


def format_cell(v: Any, width: int = 80) -> str:
    """One cell as text: ``NULL``, ``6``-significant-digit floats, lists as ``[a, b, …]``
    (first 8 items, text items quoted), text made printable; cut to ``width``."""
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        items = [repr(x) if isinstance(x, str) else format_cell(x, width) for x in v[:8]]
        return _cut("[" + ", ".join(items) + (", …" if len(v) > 8 else "") + "]", width)
    return _cut(printable(str(v)), width)


def _head(rel: "Relation", max_rows: int) -> Tuple[List[Tuple[Any, ...]], int]:
    """The first ``max_rows`` rows (whatever the cursor has fetched) and how many are left."""
    rows = rel._result.rows(0, max(0, max_rows))
    return rows, len(rel) - len(rows)


def _footer(n: int, more: int) -> str:
    foot = f"{n} row{'s' if n != 1 else ''}"
    return foot + (f" ({more} not shown)" if more > 0 else "")


# -- tables ----------------------------------------------------------------------------------


def text_table(rel: "Relation", max_rows: int = 20, max_width: int = 40) -> str:
    """The first ``max_rows`` rows as a plain-text table, cells cut to ``max_width``."""
    rows, more = _head(rel, max_rows)
    cols = list(rel.columns)
    cells = [[format_cell(v, max_width) for v in r] for r in rows]
    widths = [len(c) for c in cols]
    for r in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]

    def line(vals: Sequence[str]) -> str:
        return "│ " + " │ ".join(v.ljust(w) for v, w in zip(vals, widths)) + " │"

    out = [line(cols), "├─" + "─┼─".join("─" * w for w in widths) + "─┤"]
    out += [line(r) for r in cells]
    out.append(_footer(len(rel), more))
    return "\n".join(out)


def _td(v: Any, max_width: int) -> str:
    if v is None:
        return "<td style='color:#999;font-style:italic;text-align:center'>NULL</td>"
    numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
    align = "right" if numeric else "left"
    return (
        f"<td style='text-align:{align};white-space:pre-wrap'>"
        f"{html.escape(format_cell(v, max_width))}</td>"
    )


def html_table(rel: "Relation", max_rows: int = 50, max_width: int = 200) -> str:
    """The first ``max_rows`` rows as an HTML table (each header's tooltip is its declared
    type), with a row count below it; cells cut to ``max_width`` characters."""
    rows, more = _head(rel, max_rows)
    head = "".join(
        f"<th title='{html.escape(t)}'>{html.escape(c)}</th>"
        for c, t in zip(rel.columns, rel.types)
    )
    body = "".join("<tr>" + "".join(_td(v, max_width) for v in r) + "</tr>" for r in rows)
    return (
        f"<table class='lql-result'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"<p style='font-size:smaller'>{html.escape(_footer(len(rel), more))}</p>"
    )


# -- the SVG grid ----------------------------------------------------------------------------


class Svg(str):
    """SVG text: a ``str`` (write it to a file as it is) that notebooks draw inline."""

    def _repr_svg_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"<lql.Svg {len(self)} characters>"


# The engine's lens cells and margins (exec/src/trace/svg.rs).
_LENS_CELL = (84, 18)
_TOP, _RIGHT, _MIN_LEFT = 30, 12, 44
# Rough advance of one character of 11 px (labels) and 13 px (title) sans-serif.
_CHAR, _TITLE_CHAR = 6.5, 7.5


def _shade(v: float) -> str:
    """White → the engine's deep blue (8, 48, 160) as ``v`` goes 0 → 1 (clamped)."""
    p = min(max(v, 0.0), 1.0)
    r, g, b = (round(255 + (c - 255) * p) for c in (8, 48, 160))
    return f"rgb({r},{g},{b})"


def _text(x: float, y: float, text: str, anchor: str = "middle", extra: str = "") -> str:
    return (
        f"<text x='{x:g}' y='{y:g}' text-anchor='{anchor}' dominant-baseline='central'{extra}>"
        f"{html.escape(text)}</text>"
    )


def heatmap_svg(
    values: Any,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    title: str = "",
    captions: Optional[Sequence[Sequence[str]]] = None,
    cell: Tuple[int, int] = _LENS_CELL,
    vmax: float = 1.0,
) -> Svg:
    """A grid of cells as SVG, rows drawn top to bottom in the order given.

    ``values`` (2-D) is shaded white → blue over ``[0, vmax]``; NaN cells are drawn grey
    (no value). ``captions`` (same shape) are written in the cells as :func:`cell_label`
    does; row and column labels are cut the same way (column labels are slanted when they
    do not fit under a cell). Each cell's tooltip gives its row, column, caption and value.
    """
    v = np.asarray(values, dtype=np.float64).reshape(len(row_labels), len(col_labels))
    rows = [cell_label(s) for s in row_labels]
    cols = [cell_label(s) for s in col_labels]
    cw, ch = cell
    col_px = max((len(s) for s in cols), default=0) * _CHAR
    slanted = col_px > cw - 4
    left = max(_MIN_LEFT, max((len(s) for s in rows), default=0) * _CHAR + 8)
    if slanted:
        left = max(left, col_px * 0.71 - cw / 2 + 4)
    bottom = col_px * 0.71 + 16 if slanted else 26
    title = _cut("".join(" " if unicodedata.category(c) == "Cc" else c for c in title), 80)
    grid_w, grid_h = cw * v.shape[1], ch * v.shape[0]
    width = round(max(left + grid_w, left + len(title) * _TITLE_CHAR) + _RIGHT)
    height = round(_TOP + grid_h + bottom)
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' font-family='sans-serif' font-size='11'>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
        _text(left, _TOP / 2, title, "start", " font-size='13'"),
    ]
    for i, label in enumerate(rows):
        y = _TOP + i * ch
        parts.append(_text(left - 4, y + ch / 2, label, "end"))
        for j in range(v.shape[1]):
            parts.append(_cell_svg(left + j * cw, y, cw, ch, v[i, j], vmax,
                                   captions[i][j] if captions is not None else None,
                                   f"{printable(row_labels[i])} · {printable(col_labels[j])}"))
    base = _TOP + grid_h
    for j, label in enumerate(cols):
        x = left + j * cw + cw / 2
        if slanted:
            turn = f" transform='rotate(-45 {x:g} {base + 8:g})'"
            parts.append(_text(x, base + 8, label, "end", turn))
        else:
            parts.append(_text(x, base + bottom / 2, label))
    parts.append("</svg>")
    return Svg("".join(parts))


def _cell_svg(x: float, y: float, w: int, h: int, value: float, vmax: float,
              caption: Optional[str], where: str) -> str:
    box = f"x='{x:g}' y='{y:g}' width='{w - 1}' height='{h - 1}'"  # 1 px apart, as the engine's
    if not np.isfinite(value):
        return f"<rect {box} fill='#eeeeee'/>"
    t = value / vmax if vmax > 0 else 0.0
    shown = f"{value:.4g}" if caption is None else f"{printable(caption)} ({value:.4g})"
    tip = f"{where}: {shown}"
    out = (
        f"<rect {box} fill='{_shade(t)}'>"
        f"<title>{html.escape(_cut(tip, 300))}</title></rect>"
    )
    if caption is not None:
        ink = "white" if t > 0.55 else "black"
        ink_attrs = f" fill='{ink}' pointer-events='none'"
        out += _text(x + w / 2, y + h / 2, cell_label(caption), extra=ink_attrs)
    return out


# -- pictures of relations -------------------------------------------------------------------


def _columns(rel: "Relation", names: Sequence[str]) -> Dict[str, List[Any]]:
    """The named columns' cells (ValueError naming the first one missing)."""
    missing = [n for n in names if n not in rel.columns]
    if missing:
        raise ValueError(f"the result has no column {missing[0]!r} (it has {rel.columns})")
    return {n: rel._result.column(rel.columns.index(n)) for n in names}


def _stage_label(layer: Optional[int]) -> str:
    return "emb" if layer is None else f"L{layer}"


def logit_lens_svg(rel: "Relation", tokens: Optional[Sequence[str]] = None) -> Svg:
    """The logit lens of a TRACE result as ``TRACE … SAVE 'x.svg'`` draws it: one row per
    stage (the last layer at the top, ``emb`` at the bottom), one column per position,
    each cell the top-1 token shaded by its probability.

    The result needs ``layer``, ``top_token`` and ``top_prob`` (TRACE's default view), and
    ``position`` when it holds several (``POSITIONS ALL``); columns are headed by the
    position, or ``position:token`` with ``tokens`` (every prompt token's text, as TOKENIZE
    gives them). ValueError when the result is not a logit lens.
    """
    names = _LENS_COLUMNS + (("position",) if "position" in rel.columns else ())
    c = _columns(rel, names)
    pos_col = c.get("position", [None] * len(rel))
    stages = sorted(set(c["layer"]), key=lambda layer: -1 if layer is None else layer)
    positions = sorted(set(pos_col), key=lambda p: -1 if p is None else p)
    values = np.full((len(stages), len(positions)), np.nan)
    captions = [[""] * len(positions) for _ in stages]
    row_of = {s: len(stages) - 1 - i for i, s in enumerate(stages)}  # last layer on top
    col_of = {p: j for j, p in enumerate(positions)}
    labels = dict(enumerate(tokens or ()))
    seen = set()
    for layer, token, prob, pos in zip(c["layer"], c["top_token"], c["top_prob"], pos_col):
        if (layer, pos) in seen:
            raise ValueError(f"the result has two rows for {_stage_label(layer)} at position {pos}")
        seen.add((layer, pos))
        i, j = row_of[layer], col_of[pos]
        values[i, j] = np.nan if prob is None else prob
        captions[i][j] = "" if token is None else token
    return heatmap_svg(
        values,
        [_stage_label(s) for s in reversed(stages)],
        [_position_label(p, labels) for p in positions],
        title=f"logit lens: {rel.statement}",
        captions=captions,
    )


def _position_label(pos: Optional[int], labels: Mapping[int, str]) -> str:
    """``position:token`` when ``labels`` names the position, else the position."""
    if pos is None:
        return "last"
    return f"{pos}:{labels[pos]}" if pos in labels else str(pos)


def _attention_heatmap(weights: np.ndarray, queries: Sequence[int], keys: Sequence[int],
                       labels: Mapping[int, str], title: str) -> Svg:
    """``weights[query, key]`` with keys past each query's position masked (grey)."""
    w = np.array(weights, dtype=np.float64)
    w[np.asarray(keys)[None, :] > np.asarray(queries)[:, None]] = np.nan
    return heatmap_svg(w, [_position_label(q, labels) for q in queries],
                       [_position_label(k, labels) for k in keys], title=title, cell=(22, 18))


def attention_rows_svg(rel: "Relation") -> Svg:
    """Rows of the ``attention`` table for one layer and head as a heat map (queries down,
    keys across), labelled with ``query_token`` / ``key_token`` when the rows hold them.
    ValueError when the rows are not one head's pattern."""
    c = _columns(rel, _ATTENTION_COLUMNS)
    heads = set(zip(c["layer"], c["head"]))
    if len(heads) != 1:
        raise ValueError(f"the rows hold {len(heads)} (layer, head) pairs; one is drawn")
    (layer, head), = heads
    labels: Dict[int, str] = {}
    for pos_name, token_name in (("query", "query_token"), ("key", "key_token")):
        if token_name in rel.columns:
            named = _columns(rel, (pos_name, token_name))
            labels.update(zip(named[pos_name], named[token_name]))
    queries, keys = sorted(set(c["query"])), sorted(set(c["key"]))
    qi, ki = {q: i for i, q in enumerate(queries)}, {k: j for j, k in enumerate(keys)}
    w = np.full((len(queries), len(keys)), np.nan)
    for q, k, weight in zip(c["query"], c["key"], c["weight"]):
        w[qi[q], ki[k]] = np.nan if weight is None else weight
    title = f"attention: layer {layer}, head {head}"
    prompts = set(_columns(rel, ("prompt",))["prompt"]) if "prompt" in rel.columns else set()
    if len(prompts) == 1:
        title += f": {prompts.pop()!r}"
    return _attention_heatmap(w, queries, keys, labels, title)


def relation_svg(rel: "Relation", max_cells: int = MAX_CELLS) -> Optional[Svg]:
    """The picture of a relation, if it has one: the logit lens of a TRACE result, or one
    head's rows of the ``attention`` table. None for any other relation, an empty one or
    one of more than ``max_cells`` rows."""
    if not 0 < len(rel) <= max_cells:
        return None
    columns = set(rel.columns)
    try:
        if columns.issuperset(_LENS_COLUMNS):
            return logit_lens_svg(rel)
        if columns.issuperset(_ATTENTION_COLUMNS):
            return attention_rows_svg(rel)
    except (ValueError, TypeError):  # not one lens / one head (or cells of other kinds)
        return None
    return None


def relation_html(rel: "Relation", max_rows: int = 50) -> str:
    """A relation in a notebook: its table, below its picture when it has one (the table
    then folded in a ``<details>``)."""
    table = html_table(rel, max_rows)
    svg = relation_svg(rel)
    if svg is None:
        return table
    summary = html.escape(_footer(len(rel), 0))
    return f"<div>{svg}</div><details><summary>{summary}</summary>{table}</details>"


# -- pictures of activations -----------------------------------------------------------------


def attention_svg(cache: "ActivationCache", layer: int, head: int,
                  tokens: Optional[Sequence[str]] = None) -> Svg:
    """One head's attention pattern, ``cache[f"blocks.{layer}.attn.hook_pattern"][head]``,
    as a heat map: queries down, keys across, keys past each query grey. ``tokens`` (every
    prompt token's text, as TOKENIZE gives them) label the positions ``position:token``."""
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
    if not 0 <= head < pattern.shape[0]:
        raise IndexError(f"head {head}: the model has {pattern.shape[0]} heads")
    if tokens is not None and len(tokens) != cache.context:
        raise ValueError(f"{len(tokens)} token texts for a prompt of {cache.context} tokens")
    labels = dict(enumerate(tokens)) if tokens is not None else {}
    title = f"attention: layer {layer}, head {head}: {cache.prompt!r}"
    return _attention_heatmap(pattern[head], cache.positions, range(cache.context), labels, title)


def activation_norms_svg(cache: "ActivationCache") -> Svg:
    """‖resid_post‖ per layer (the last at the top) and position, shaded by its share of
    the largest norm."""
    norms = np.linalg.norm(cache.stack("resid_post"), axis=-1)[::-1]
    vmax = float(norms.max()) if norms.size else 1.0
    return heatmap_svg(
        norms,
        [f"L{layer}" for layer in reversed(range(norms.shape[0]))],
        [str(p) for p in cache.positions],
        title=f"‖resid_post‖ by layer and position: {cache.prompt!r}",
        cell=(22, 14),
        vmax=vmax,
    )
