"""The walkthrough notebook, run end to end in a Jupyter kernel of this interpreter.

Each code cell of ``notebooks/walkthrough.ipynb`` carries a tag naming what it shows; the
test runs the notebook with nbclient and checks what each tagged cell displayed: HTML tables
for results, SVG heat maps for TRACE and attention. The kernel is ``python3`` resolved, through
a kernelspec written to a private ``JUPYTER_PATH``, to ``sys.executable``: the interpreter
running the tests (with lql installed), whatever other kernels the machine has. Without
nbformat, nbclient or ipykernel the test skips, and fails under CI (``CI=true``).
"""

import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import MODEL, require

import pytest

NOTEBOOK = Path(__file__).parent / "notebooks" / "walkthrough.ipynb"
SVG_ROOT = "{http://www.w3.org/2000/svg}svg"


@pytest.fixture
def python3_kernel(tmp_path, monkeypatch):
    """A ``python3`` kernelspec that runs this interpreter, first on ``JUPYTER_PATH``."""
    require("ipykernel")
    from ipykernel.kernelspec import write_kernel_spec

    # argv: sys.executable -m ipykernel_launcher -f {connection_file}
    write_kernel_spec(tmp_path / "kernels" / "python3")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    return "python3"


def outputs_by_tag(nb) -> dict:
    """``{tag: [output, …]}`` for the tagged code cells."""
    out = {}
    for cell in nb.cells:
        for tag in cell.metadata.get("tags", []):
            out[tag] = cell.get("outputs", [])
    return out


def data_of(outputs, mime: str) -> list:
    """The ``mime`` payloads the outputs displayed."""
    found = []
    for o in outputs:
        value = o.get("data", {}).get(mime)
        if value is not None:
            found.append(value if isinstance(value, str) else "".join(value))
    return found


def svg_of(outputs) -> ET.Element:
    """The one SVG the outputs displayed, parsed (so well-formed)."""
    svgs = data_of(outputs, "image/svg+xml")
    assert len(svgs) == 1, f"expected one SVG, got {len(svgs)}"
    root = ET.fromstring(svgs[0])
    assert root.tag == SVG_ROOT
    return root


@pytest.mark.skipif(
    MODEL != "smollm2-135m-instruct", reason="the notebook opens smollm2-135m-instruct"
)
def test_walkthrough_notebook_runs(python3_kernel):
    nbformat = require("nbformat")
    nbclient = require("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name=python3_kernel,
        timeout=180,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError (with the traceback) if a cell fails

    by_tag = outputs_by_tag(nb)
    assert set(by_tag) == {"connect", "infer", "walk", "trace", "attention"}
    for tag in ("infer", "walk", "trace"):
        html = data_of(by_tag[tag], "text/html")
        assert html and "<table" in html[0], f"cell {tag!r} shows no HTML table"
    assert "Paris" in data_of(by_tag["infer"], "text/html")[0]

    lens = svg_of(by_tag["trace"])
    texts = [t.text for t in lens.iter("{http://www.w3.org/2000/svg}text")]
    assert "L29" in texts and "emb" in texts and "·Paris" in texts
    assert "<svg" in data_of(by_tag["trace"], "text/html")[0]  # drawn above the table

    attention = svg_of(by_tag["attention"])
    texts = [t.text for t in attention.iter("{http://www.w3.org/2000/svg}text")]
    assert "3:·France" in texts
    assert any("(9, 5, 5)" in o.get("text", "") for o in by_tag["attention"])
    assert not any(o.get("output_type") == "error" for outs in by_tag.values() for o in outs)
