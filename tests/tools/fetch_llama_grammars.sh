#!/usr/bin/env bash
# Puts llama.cpp's grammars (vendor/llama.cpp/grammars/*.gbnf of the llama-cpp-python source
# distribution on PyPI, checked against the sha256 PyPI lists for it) under DEST, default
# ~/.cache/lql-tools/llama-grammars. tests/tests/constrained.rs constrains generation with
# each of them. Nothing is written unless every step succeeds (a temp folder, renamed last).
set -euo pipefail
dest=${1:-$HOME/.cache/lql-tools/llama-grammars}
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
if [ -f "$dest/json.gbnf" ]; then
  exit 0
fi
link=$(curl -fsSL --max-time 60 https://pypi.org/simple/llama-cpp-python/ |
  grep -o "https://[^\"]*/llama_cpp_python-$version\.tar\.gz#sha256=[0-9a-f]*" | head -1)
if [ -z "$link" ]; then
  echo "llama-cpp-python $version has no source distribution on PyPI" >&2
  exit 1
fi
url=${link%%#*}
sha=${link##*sha256=}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL --max-time 600 -o "$tmp/src.tar.gz" "$url"
echo "$sha  $tmp/src.tar.gz" | sha256sum -c --quiet -
tar -xzf "$tmp/src.tar.gz" -C "$tmp" --wildcards '*/vendor/llama.cpp/grammars/*.gbnf'
mkdir -p "$tmp/out"
cp "$tmp"/*/vendor/llama.cpp/grammars/*.gbnf "$tmp/out/"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.partial"
mv "$tmp/out" "$dest.partial"
mv "$dest.partial" "$dest"
echo "llama.cpp's grammars ($(ls "$dest" | wc -l) files, llama-cpp-python $version) are in $dest"
