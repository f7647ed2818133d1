"""Writes a text corpus for ANALYZE FEATURES benchmarks: the docstrings of the Python
standard library's modules (sorted by name, so the same Python gives the same file), one
paragraph per line, until the file reaches --bytes.

usage: python3 tests/tools/make_corpus.py --bytes 1000000 --out corpus.txt
"""

import argparse
import importlib
import pkgutil
import sys
import warnings

parser = argparse.ArgumentParser()
parser.add_argument("--bytes", type=int, default=1_000_000)
parser.add_argument("--out", required=True)
args = parser.parse_args()

warnings.simplefilter("ignore")
names = sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith("_"))
skip = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3", "ensurepip", "venv"}
seen, size, lines = set(), 0, []
for name in names:
    if name in skip or name not in sys.stdlib_module_names:
        continue
    try:
        module = importlib.import_module(name)
    except Exception:
        continue
    objects = [module] + [getattr(module, a, None) for a in sorted(dir(module))]
    # Classes' methods too.
    objects += [getattr(o, a, None) for o in objects if isinstance(o, type) for a in sorted(vars(o))]
    for obj in objects:
        doc = getattr(obj, "__doc__", None)
        if not isinstance(doc, str):
            continue
        for para in doc.split("\n\n"):
            text = " ".join(para.split())
            if len(text) < 40 or text in seen:
                continue
            seen.add(text)
            lines.append(text)
            size += len(text.encode()) + 1
            if size >= args.bytes:
                break
        if size >= args.bytes:
            break
    if size >= args.bytes:
        break
with open(args.out, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
print(f"{args.out}: {len(lines)} documents, {size} bytes")
