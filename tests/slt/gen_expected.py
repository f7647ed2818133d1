#!/usr/bin/env python3
"""Writes a .slt golden script from a .spec file by running its statements through
`lql --format json` (build it first: cargo build --release).

    python3 tests/slt/gen_expected.py tests/slt/engine/run.spec tests/slt/engine/run.slt

A .spec is blocks separated by blank lines: `# comment` blocks are copied; `setup` +
statement runs before every later statement and becomes `statement ok`; `query` +
statement records the rows the engine returns now (review them before committing);
`error REGEX` + statement checks that the statement fails with a message matching REGEX.
Cells are written as tests/src/lib.rs `slt_cell` writes them.
"""
import json, os, re, subprocess, sys

LQL = os.environ.get("LQL", os.path.join(os.path.dirname(__file__), "..", "..", "target", "release", "lql"))

def cell(v):
    if v is None: return "NULL"
    if isinstance(v, bool): return "true" if v else "false"
    if isinstance(v, int): return str(v)
    if isinstance(v, float): return "%.4f" % v
    if isinstance(v, str): return "(empty)" if v == "" else v.replace("\n", "\\n")
    if isinstance(v, list): return "[" + ", ".join(cell(x) for x in v) + "]"
    raise TypeError(v)

def main(spec_path, out_path):
    out = []
    setup = []
    for block in open(spec_path).read().split("\n\n"):
        block = block.strip()
        if not block: continue
        if block.startswith("#"):
            out.append(block); continue
        kind, stmt = block.split("\n", 1)
        if kind == "setup":
            setup.append(stmt)
            out.append("statement ok\n" + stmt); continue
        script = ";\n".join(setup + [stmt]) + ";"
        p = subprocess.run([LQL, "--format", "json", "-c", script], capture_output=True, text=True)
        if kind.startswith("error"):
            regex = kind.split(" ", 1)[1]
            assert p.returncode != 0, (stmt, p.stdout)
            err = json.loads(p.stderr.strip().splitlines()[-1])["error"]
            assert re.search(regex, err["code"] + " " + err["message"]), (regex, err)
            assert err["kind"] != "internal", (stmt, err)
            out.append(f"statement error {regex}\n{stmt}"); continue
        assert p.returncode == 0, (stmt, p.stderr)
        last = json.loads(p.stdout.strip().splitlines()[-1])
        ncol = len(last["columns"])
        lines = [" ".join(cell(v) for v in row) for row in last["rows"]]
        out.append(f"query {'T'*ncol}\n{stmt}\n----\n" + "\n".join(lines))
    open(out_path, "w").write("\n\n".join(out) + "\n")

main(sys.argv[1], sys.argv[2])
