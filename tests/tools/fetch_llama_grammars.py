#!/usr/bin/env python3
"""Puts llama.cpp's grammars (vendor/llama.cpp/grammars/*.gbnf of the llama-cpp-python
source distribution on PyPI, checked against the sha256 PyPI lists for it) under DEST,
default ~/.cache/lql-tools/llama-grammars. tests/tests/constrained.rs constrains generation
with each of them. Nothing is left behind unless every step succeeds (a temporary folder,
renamed last).

Usage: fetch_llama_grammars.py [DEST]   (LLAMA_CPP_PYTHON_VERSION picks the release)
"""

import hashlib
import io
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.request

VERSION = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")
INDEX = "https://pypi.org/simple/llama-cpp-python/"


def main():
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
        "~/.cache/lql-tools/llama-grammars")
    if os.path.isfile(os.path.join(dest, "json.gbnf")):
        return 0
    page = urllib.request.urlopen(INDEX, timeout=60).read().decode()
    m = re.search(r'href="(https://[^"#]*/llama_cpp_python-' + re.escape(VERSION)
                  + r'\.tar\.gz)#sha256=([0-9a-f]{64})"', page)
    if not m:
        print(f"llama-cpp-python {VERSION} has no source distribution on PyPI", file=sys.stderr)
        return 1
    url, sha = m.groups()
    data = urllib.request.urlopen(url, timeout=600).read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        print(f"{url}: sha256 {got}, PyPI lists {sha}", file=sys.stderr)
        return 1
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".llama-grammars-")
    try:
        n = 0
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if (member.isfile() and len(parts) == 5 and parts[1:4] == ["vendor", "llama.cpp", "grammars"]
                        and parts[4].endswith(".gbnf") and "/" not in parts[4]):
                    with open(os.path.join(tmp, parts[4]), "wb") as f:
                        f.write(tar.extractfile(member).read())
                    n += 1
        if n == 0:
            print(f"{url} holds no grammars", file=sys.stderr)
            return 1
        os.replace(tmp, dest)
        tmp = None
        print(f"llama.cpp's grammars ({n} files, llama-cpp-python {VERSION}) are in {dest}")
        return 0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
