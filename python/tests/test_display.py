"""Notebook renderings: HTML and text tables, and the SVG heat maps (lens, attention, norms).

Hostile cells (``<``, ``&``, control characters) come from a stand-in result wrapped in a
real :class:`lql.Relation`; the pictures of real statements come from the test model.
"""

import xml.etree.ElementTree as ET

import pytest

import lql
from lql import _display

PROMPT = "The capital of France is"
SVG = "{http://www.w3.org/2000/svg}"


class FakeResult:
    """What a Relation reads from ``lql._lql.QueryResult``, over rows given in Python."""

    def __init__(self, columns, types, rows, statement="TRACE 'x' POSITIONS ALL"):
        self.columns, self.types, self._rows, self.statement = columns, types, rows, statement

    def __len__(self):
        return len(self._rows)

    def rows(self, start=0, stop=None):
        return [tuple(r) for r in self._rows[start:stop]]

    def column(self, index):
        return [r[index] for r in self._rows]


def relation(columns, types, rows, **kw) -> lql.Relation:
    return lql.Relation(FakeResult(columns, types, rows, **kw))


def parse_svg(text: str) -> ET.Element:
    root = ET.fromstring(text)  # raises on malformed XML
    assert root.tag == SVG + "svg"
    return root


def texts(root: ET.Element) -> list:
    return [t.text for t in root.iter(SVG + "text")]


LENS_COLUMNS = ["position", "layer", "top_token", "top_token_id", "top_prob"]
LENS_TYPES = ["int", "int", "text", "int", "float"]


def fake_lens(tokens=("<b>", "a & b", " Paris", "\x01\n")):
    """A 3-stage (emb, L0, L1) × 2-position lens whose top tokens are hostile."""
    rows, it = [], iter(tokens * 2)
    for pos in range(2):
        for layer, prob in ((None, 0.1), (0, 0.6), (1, 1.0)):
            rows.append((pos, layer, next(it), 7, prob))
    return relation(LENS_COLUMNS, LENS_TYPES, rows, statement="TRACE 'a<b' POSITIONS ALL")


# -- tables ----------------------------------------------------------------------------------


def test_html_escapes_cells_and_headers():
    rel = relation(["<col>", "t"], ["text", "text"], [("<b>x</b>", "a & b"), ("'\"", "ok")])
    html = rel._repr_html_()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "a &amp; b" in html and "&lt;col&gt;" in html
    assert "&#x27;&quot;" in html
    assert html.count("<table") == 1 and "<svg" not in html


def test_html_truncates_with_footer():
    rel = relation(["n"], ["int"], [(i,) for i in range(120)])
    html = _display.html_table(rel, max_rows=50)
    assert html.count("<tr>") == 51  # header + 50 rows
    assert "120 rows (70 not shown)" in html
    assert "1 row<" in _display.html_table(relation(["n"], ["int"], [(1,)]))
    # Fetching does not change what a notebook shows: the table starts at the first row.
    rel.fetchmany(100)
    assert ">0</td>" in rel._repr_html_()


def test_null_list_and_control_cells():
    rel = relation(
        ["a", "b", "c", "d"],
        ["any", "list", "text", "float"],
        [
            (None, list(range(10)), "line\nnext\x01", 0.123456789),
            (1, [" Paris", None], "x" * 500, None),
        ],
    )
    html = rel._repr_html_()
    assert html.count(">NULL</td>") == 2 and "font-style:italic" in html
    assert "[0, 1, 2, 3, 4, 5, 6, 7, …]" in html
    assert "[&#x27; Paris&#x27;, NULL]" in html
    assert "line\\nnext\\u{1}" in html
    assert "0.123457" in html
    assert "x" * 199 + "…" in html and "x" * 201 not in html
    text = repr(rel)
    assert len(text.splitlines()) == 5  # header, rule, 2 rows (no raw newline), footer
    assert "NULL" in text and "line\\nnext" in text and "x" * 39 + "…" in text
    assert text.splitlines()[-1] == "2 rows"


def test_text_table_footer():
    rel = relation(["n"], ["int"], [(i,) for i in range(30)])
    assert _display.text_table(rel).splitlines()[-1] == "30 rows (10 not shown)"


def test_cell_label_matches_the_engine():
    # exec/src/trace/svg.rs: labels_are_printable_and_short
    assert _display.cell_label(" Paris") == "·Paris"
    assert _display.cell_label("a\nb") == "a\\nb"
    assert len(_display.cell_label("abcdefghijklmnop")) == 10
    assert _display.cell_label("\x00") == "\\u{0}"


# -- the logit lens --------------------------------------------------------------------------


def test_lens_svg_is_well_formed_and_escaped():
    rel = fake_lens()
    svg = rel._repr_svg_()
    assert isinstance(svg, str)
    root = parse_svg(svg)
    labels = texts(root)
    assert "<b>" in labels and "a·&·b" in labels and "·Paris" in labels and "\\u{1}\\n" in labels
    assert "&lt;b&gt;" in svg and "a·&amp;·b" in svg and "\x01" not in svg
    # background + 3 stages × 2 positions
    assert len(list(root.iter(SVG + "rect"))) == 1 + 6
    # the last layer on top, emb at the bottom, as the engine draws it
    row_labels = [t for t in labels if t in ("L1", "L0", "emb")]
    assert row_labels == ["L1", "L0", "emb"]
    assert "logit lens: TRACE 'a<b' POSITIONS ALL" in labels
    # the picture comes above the folded table in HTML
    html = rel._repr_html_()
    assert html.index("<svg") < html.index("<details>") < html.index("<table")


def test_lens_shading_and_ink():
    root = parse_svg(fake_lens()._repr_svg_())
    fills = [r.get("fill") for r in root.iter(SVG + "rect")][1:]
    assert "rgb(8,48,160)" in fills  # probability 1: the engine's deep blue
    inks = {t.text: t.get("fill") for t in root.iter(SVG + "text") if t.get("fill")}
    assert inks["·Paris"] == "white" and inks["\\u{1}\\n"] == "black"  # p = 1.0, p = 0.1


def test_lens_column_labels_with_tokens():
    svg = _display.logit_lens_svg(fake_lens(), tokens=["The", " cap"])
    labels = texts(parse_svg(svg))
    assert "0:The" in labels and "1:·cap" in labels


def test_lens_positions_last_has_one_column():
    rows = [(None, "a", 1, 0.5), (0, "b", 2, 0.25)]
    rel = relation(LENS_COLUMNS[1:], LENS_TYPES[1:], rows)
    labels = texts(parse_svg(rel._repr_svg_()))
    assert "last" in labels and labels.index("L0") < labels.index("emb")


def test_no_picture_for_other_relations():
    assert relation(["n"], ["int"], [(1,)])._repr_svg_() is None
    assert relation(LENS_COLUMNS, LENS_TYPES, [])._repr_svg_() is None
    twice = [(0, 1, "a", 1, 0.5), (0, 1, "b", 2, 0.5)]
    assert relation(LENS_COLUMNS, LENS_TYPES, twice)._repr_svg_() is None
    with pytest.raises(ValueError, match="two rows"):
        _display.logit_lens_svg(relation(LENS_COLUMNS, LENS_TYPES, twice))
    big = [(p, 0, "a", 1, 0.5) for p in range(_display.MAX_CELLS + 1)]
    assert relation(LENS_COLUMNS, LENS_TYPES, big)._repr_svg_() is None
    assert "<svg" not in relation(LENS_COLUMNS, LENS_TYPES, big)._repr_html_()


def test_svg_str_displays_inline():
    svg = _display.heatmap_svg([[0.5]], ["r"], ["c"])
    assert isinstance(svg, str) and svg._repr_svg_() == str(svg)
    assert repr(svg).startswith("<lql.Svg")


def test_heatmap_slants_long_column_labels_and_greys_nan():
    svg = _display.heatmap_svg([[0.2, float("nan")]], ["row"], ["a long label", "b"], cell=(22, 18))
    root = parse_svg(svg)
    assert any("rotate(-45" in (t.get("transform") or "") for t in root.iter(SVG + "text"))
    assert "#eeeeee" in [r.get("fill") for r in root.iter(SVG + "rect")]


# -- real statements -------------------------------------------------------------------------


def test_trace_relations(con):
    lens = con.sql("TRACE ? POSITIONS ALL", [PROMPT])
    root = parse_svg(lens._repr_svg_())
    assert len(list(root.iter(SVG + "rect"))) == 1 + 31 * 5
    assert "·Paris" in texts(root)
    assert lens.fetchone() is not None  # drawing did not move the cursor
    assert parse_svg(con.sql("TRACE ?", [PROMPT])._repr_svg_()) is not None
    assert con.sql("TRACE ? FOR ' Paris'", [PROMPT])._repr_svg_() is None
    assert con.sql("INFER ? TOP 3", [PROMPT])._repr_svg_() is None


def test_attention_table_rows(con):
    rows = con.sql("SELECT * FROM attention WHERE prompt = ? AND layer = 3 AND head = 0", [PROMPT])
    labels = texts(parse_svg(rows._repr_svg_()))
    assert "attention: layer 3, head 0: 'The capital of France is'" in labels
    assert "3:·France" in labels
    both = con.sql("SELECT * FROM attention WHERE prompt = ? AND layer = 3 AND head < 2", [PROMPT])
    assert both._repr_svg_() is None


def test_cache_attention_and_norms(con):
    cache = con.run_with_cache(PROMPT)
    tokens = [t for _, _, t in con.sql("TOKENIZE ?", [PROMPT]).fetchall()]
    root = parse_svg(cache.attention_svg(3, 0, tokens))
    rects = list(root.iter(SVG + "rect"))
    assert len(rects) == 1 + 5 * 5
    assert sum(r.get("fill") == "#eeeeee" for r in rects) == 10  # keys after the query
    assert "4:·is" in texts(root)
    assert "0" in texts(parse_svg(cache.attention_svg(0, 8)))  # no tokens: positions
    with pytest.raises(IndexError):
        cache.attention_svg(3, 9)
    with pytest.raises(KeyError):
        cache.attention_svg(30, 0)
    with pytest.raises(ValueError):
        cache.attention_svg(3, 0, tokens[:2])
    norms = parse_svg(cache._repr_svg_())
    assert len(list(norms.iter(SVG + "rect"))) == 1 + 30 * 5
