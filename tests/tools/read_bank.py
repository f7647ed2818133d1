#!/usr/bin/env python3
"""An independent reader of a VINDEX3 bank container (seed 002 §5.4, §6, §7, §8).

Written from the seed's text, not from LQL's Rust code: it parses index.json, the MoE
programme manifest and every LYRW v2 file the index declares (header, bank descriptors,
segment descriptors, region schemas, entry tables) with numpy alone, checks the
structural rules of §6 (magic, version, 64-byte-aligned regions inside the file, no two
regions sharing bytes, recorded SHA-256) and that every file agrees with the manifest
(§8: bank ids, kinds, entry counts, expert dims, group widths dividing the bank, the roles
programme gated-mlp-v1 requires). With --gguf it also compares every expert region and
every spine tensor byte for byte with the source GGUF, read by gguf-py (PyPI `gguf`).

Usage: read_bank.py CONTAINER [--gguf SOURCE.gguf]
Prints a JSON summary; exits 1 (with the reasons) when any check fails.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

HEADER = np.dtype([("magic", "<u4"), ("format_version", "<u4"), ("logical_layer", "<u4"),
                   ("num_banks", "<u2"), ("num_segments", "<u2"), ("flags", "<u4"),
                   ("reserved", "<u4")])
BANK = np.dtype([("bank_id", "<u2"), ("bank_kind", "<u2"), ("region_schema_count", "<u2"),
                 ("flags", "<u2"), ("num_entries", "<u4"), ("input_dim", "<u4"),
                 ("intermediate_dim", "<u4"), ("output_dim", "<u4")])
SEGMENT = np.dtype([("bank_id", "<u2"), ("segment_index", "<u2"), ("first_entry", "<u4"),
                    ("entry_count", "<u4")])
SCHEMA = np.dtype([("schema_index", "<u2"), ("role", "<u2"), ("format", "<u2"),
                   ("packing", "<u2"), ("pair_id", "<u2"), ("layout", "<u2"),
                   ("rows", "<u4"), ("cols", "<u4")])
ENTRY = np.dtype([("offset", "<u8"), ("length", "<u8")])
assert (HEADER.itemsize, BANK.itemsize, SEGMENT.itemsize, SCHEMA.itemsize, ENTRY.itemsize) == \
    (24, 24, 12, 20, 16)

MAGIC = 0x4C595257  # "LYRW"
ROLES = {0: "gate", 1: "up", 2: "gate_up_fused", 3: "down", 4: "bias", 5: "scales",
         6: "latent_in", 7: "latent_out"}
KINDS = {0: "dense", 1: "routed", 2: "shared"}
# §8.4: the roles each programme needs (gated-mlp-v1: gate + up + down).
REQUIRED = {"gated-mlp-v1": {0, 1, 3}}
# GGUF tensor-name stems of each role, routed and shared (the source side of the check).
GGUF_ROLE = {("routed", 0): "ffn_gate_exps", ("routed", 1): "ffn_up_exps",
             ("routed", 3): "ffn_down_exps", ("shared", 0): "ffn_gate_shexp",
             ("shared", 1): "ffn_up_shexp", ("shared", 3): "ffn_down_shexp"}


class Failed(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Failed(msg)


def table(buf, at, dtype, count, what, path):
    end = at + dtype.itemsize * count
    need(end <= len(buf), f"{path}: {what}: {count} records past the end of the file")
    return np.frombuffer(buf, dtype=dtype, count=count, offset=at), end


def parse_lyrw(path, buf):
    """§6.1–§6.4: header, banks, segment descriptors, schemas, entry tables."""
    need(len(buf) >= HEADER.itemsize, f"{path}: shorter than the LYRW header")
    h = np.frombuffer(buf, dtype=HEADER, count=1)[0]
    need(int(h["magic"]) == MAGIC, f"{path}: magic {int(h['magic']):#x} is not LYRW")
    need(int(h["format_version"]) == 2, f"{path}: format_version {int(h['format_version'])}")
    need(int(h["num_segments"]) >= 1, f"{path}: no segment descriptor")
    at = HEADER.itemsize
    banks, at = table(buf, at, BANK, int(h["num_banks"]), "bank descriptors", path)
    segs, at = table(buf, at, SEGMENT, int(h["num_segments"]), "segment descriptors", path)
    schemas = {}
    for b in banks:
        s, at = table(buf, at, SCHEMA, int(b["region_schema_count"]), "region schemas", path)
        schemas[int(b["bank_id"])] = s
        for r in s:
            # §6.4: block-quantized formats (q4_0, q4_k, q6_k, q8_0, mxfp4, nvfp4, mxfp8)
            # declare blocks_with_scales_inline (or a values/scales pair); scalar ones
            # (f32, f16, bf16) row_major.
            fmt, packing = int(r["format"]), int(r["packing"])
            blocked = fmt in (3, 4, 5, 6, 7, 8, 9, 10)
            need(packing in ((1, 2, 3) if blocked else (0,)),
                 f"{path}: bank {int(b['bank_id'])} region role {int(r['role'])} format {fmt} "
                 f"declares packing {packing}")
    need(len(schemas) == len(banks), f"{path}: a bank id repeats")
    bank_by_id = {int(b["bank_id"]): b for b in banks}
    entries = []
    for s in segs:
        bid = int(s["bank_id"])
        need(bid in bank_by_id, f"{path}: a segment names bank {bid}, absent")
        first, count = int(s["first_entry"]), int(s["entry_count"])
        need(first + count <= int(bank_by_id[bid]["num_entries"]),
             f"{path}: segment of bank {bid} runs past its entries")
        per = len(schemas[bid])
        e, at = table(buf, at, ENTRY, count * per, "entry table", path)
        entries.append((bid, first, count, e.reshape(count, per) if per else e))
    tables_end = at
    spans = []
    for bid, first, count, e in entries:
        for i in range(count):
            for j in range(len(schemas[bid])):
                off, ln = int(e[i][j]["offset"]), int(e[i][j]["length"])
                need(off % 64 == 0 and off + ln <= len(buf),
                     f"{path}: bank {bid} entry {first + i}: region [{off}, +{ln}) is not "
                     "64-aligned inside the file")
                if ln:
                    spans.append((off, ln, bid, first + i))
    spans.sort()
    need(not spans or spans[0][0] >= tables_end, f"{path}: a region overlaps the tables")
    for a, b in zip(spans, spans[1:]):
        need(a[0] + a[1] <= b[0], f"{path}: regions of bank {a[2]} entry {a[3]} and bank "
             f"{b[2]} entry {b[3]} overlap")
    return h, bank_by_id, schemas, entries


def read_spine(path, buf):
    """The spine segment: [u64 LE header length][header JSON][payload] (§5.3 framing)."""
    need(len(buf) >= 8, f"{path}: shorter than its length word")
    hlen = int(np.frombuffer(buf, dtype="<u8", count=1)[0])
    need(8 + hlen <= len(buf), f"{path}: header runs past the file")
    header = json.loads(bytes(buf[8:8 + hlen]))
    start = 8 + hlen
    out = {}
    for t in header["tensors"]:
        a = start + t["offset"]
        need(a + t["len"] <= len(buf), f"{path}: tensor {t['name']} runs past the file")
        out[t["name"]] = buf[a:a + t["len"]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("container")
    ap.add_argument("--gguf")
    args = ap.parse_args()
    root = args.container
    summary = {"files": 0, "banks": 0, "entries": 0, "regions": 0, "layers": 0,
               "expert_regions_equal_gguf": 0, "spine_tensors_equal_gguf": 0}
    try:
        index = json.load(open(os.path.join(root, "index.json")))
        need(index.get("version") in (3, 4), f"index.json version {index.get('version')}")
        need(index.get("moe_manifest"), "index.json names no moe_manifest (not a bank container)")
        manifest = json.load(open(os.path.join(root, index["moe_manifest"])))
        need(manifest.get("schema") == 1, f"manifest schema {manifest.get('schema')}")
        files = {}
        for rel, decl in index["segments"].items():
            data = open(os.path.join(root, rel), "rb").read()
            if decl.get("sha256") is not None:
                need(hashlib.sha256(data).hexdigest() == decl["sha256"],
                     f"{rel}: sha256 differs from index.json")
            if "bytes" in decl:
                need(len(data) == decl["bytes"], f"{rel}: size differs from index.json")
            buf = np.frombuffer(data, dtype=np.uint8)
            if decl.get("format_version") == 2 and decl.get("codec", "lyrw") == "lyrw":
                files[rel] = (buf, parse_lyrw(rel, buf))
                summary["files"] += 1
        reader = None
        if args.gguf:
            import gguf  # gguf-py, the source side only
            reader = gguf.GGUFReader(args.gguf)
            src = {t.name: np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
                   for t in reader.tensors}
        layers = manifest["layers"]
        need(len(layers) == index["num_layers"], "manifest layers differ from num_layers")
        for i, entry in enumerate(layers):
            m = entry["moe_layer"]
            need(m["layer"] == i, f"manifest entry {i} describes layer {m['layer']}")
            need(m["router"]["selection"]["k"] <= m["routed_bank"]["experts"],
                 f"layer {i}: k above the expert count")
            for kind, ref in (("routed", m["routed_bank"]), ("shared", m.get("shared_bank"))):
                if ref is None:
                    continue
                need(ref["storage"] in files, f"layer {i}: {ref['storage']} is not a LYRW v2 "
                     "file of the index")
                buf, (h, banks, schemas, entries) = files[ref["storage"]]
                need(int(h["logical_layer"]) == i, f"{ref['storage']}: holds layer "
                     f"{int(h['logical_layer'])}, manifest says {i}")
                bid = ref["bank_id"]
                need(bid in banks, f"{ref['storage']}: no bank {bid}")
                b = banks[bid]
                need(KINDS.get(int(b["bank_kind"])) == kind, f"layer {i} bank {bid}: kind "
                     f"{int(b['bank_kind'])} is not {kind}")
                n = ref["experts"]
                need(int(b["num_entries"]) == n, f"layer {i} bank {bid}: entries differ")
                dims = ref["expert_dims"]
                need((int(b["input_dim"]), int(b["intermediate_dim"]), int(b["output_dim"]))
                     == (dims["input"], dims["intermediate"], dims["output"]),
                     f"layer {i} bank {bid}: dims differ from the manifest")
                g = ref.get("group_width")
                if g is not None:
                    need(g >= 1 and n % g == 0, f"layer {i} bank {bid}: group width {g} does "
                         f"not divide {n}")
                roles = {int(s["role"]): j for j, s in enumerate(schemas[bid])}
                need(REQUIRED[ref["programme"]] <= set(roles),
                     f"layer {i} bank {bid}: roles {sorted(roles)} lack what "
                     f"{ref['programme']} requires")
                summary["banks"] += 1
                summary["entries"] += n
                for sbid, first, count, e in entries:
                    if sbid != bid:
                        continue
                    summary["regions"] += count * len(roles)
                    if reader is None:
                        continue
                    for role, j in roles.items():
                        name = f"blk.{i}.{GGUF_ROLE[(kind, role)]}.weight"
                        need(name in src, f"the GGUF has no {name}")
                        whole = src[name]
                        per = len(whole) // n
                        for k in range(count):
                            off, ln = int(e[k][j]["offset"]), int(e[k][j]["length"])
                            need(ln == per, f"{name}: region of entry {first + k} is {ln} "
                                 f"bytes, the GGUF's expert is {per}")
                            ex = first + k
                            need(np.array_equal(buf[off:off + ln], whole[ex * per:(ex + 1) * per]),
                                 f"{name}: entry {ex} differs from the GGUF")
                            summary["expert_regions_equal_gguf"] += 1
            summary["layers"] += 1
        if reader is not None:
            rel = manifest["model"]["spine"]
            data = np.frombuffer(open(os.path.join(root, rel), "rb").read(), dtype=np.uint8)
            for name, b in read_spine(rel, data).items():
                need(name in src, f"spine tensor {name} is not in the GGUF")
                need(np.array_equal(b, src[name]), f"spine tensor {name} differs from the GGUF")
                summary["spine_tensors_equal_gguf"] += 1
    except Failed as e:
        print(json.dumps({"ok": False, "error": str(e), **summary}))
        sys.exit(1)
    print(json.dumps({"ok": True, **summary}))


if __name__ == "__main__":
    main()
