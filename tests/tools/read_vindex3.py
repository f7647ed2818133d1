#!/usr/bin/env python3
"""An independent reader of a VINDEX3 graph container (seed 002 §5.1–5.3, §9, §12, §17.4).

Written from the seed's text, not from LQL's Rust code, with the standard library only.
It reads index.json (the sole root authority, §5.2), the SystemGraph it names, and every
segment a representation or variant points at, and checks:

- index.json: container schema 3 or 4; a graph container names system_graph and no
  moe_manifest; authority is canonical or derived; a recorded system_graph_sha256 matches.
- the graph: schema 6; object ids are {component}.{kind} and unique; every representation
  an object lists is in the index with the same object, encoding and fidelity; an object
  tied to another has none of its own.
- every segment: [u64 LE header length][header JSON][payload]; the header names its
  representation; the tensor table's payloads lie in the payload in table order without
  overlapping (a writer may align them); the source payload hash is the SHA-256 of the
  tensors' bytes concatenated in table order; tensor_count, payload_bytes (their sum),
  payload_sha256, segment_sha256 and per-tensor hashes match what the index records.
- variants (§9.1): each region set's variants point at a present representation whose
  segment is their storage, with the same fidelity; the baseline is one of them.
- profiles (§9.2): every selection names a present variant; the profile's authority is
  derived as the weakest fidelity across its selections (objects it does not name use
  their baseline).
- closure (§17.4): every operand binding of a component names a tensor present in its
  object's baseline representation; with schema-6 declarations, one attention entry and
  one program per layer with an explicit operator, and the roles the program's operations
  consume are exactly the roles the layer binds.

Usage: read_vindex3.py CONTAINER
Prints a JSON summary (container authority, objects → encoding → fidelity, profiles →
derived authority); exits 1 with the reasons when any check fails.
"""

import hashlib
import json
import os
import struct
import sys

FIDELITY_ORDER = [
    "source-exact",
    "source-equivalent",
    "numerically-approximate",
    "structurally-approximate",
    "analysis-only",
]


class Reader:
    def __init__(self, root):
        self.root = root
        self.errors = []

    def fail(self, msg):
        self.errors.append(msg)

    def path(self, rel):
        if os.path.isabs(rel) or ".." in rel.split("/"):
            self.fail(f"unsafe relative path {rel!r}")
            return None
        return os.path.join(self.root, rel)

    def load_json(self, rel):
        p = self.path(rel)
        if p is None:
            return None
        try:
            with open(p, "rb") as f:
                data = f.read()
            return data, json.loads(data)
        except (OSError, ValueError) as e:
            self.fail(f"{rel}: {e}")
            return None

    def segment(self, rel, rep_id, entry):
        """Check one segment against its index entry; the tensor names it holds."""
        p = self.path(rel)
        if p is None:
            return set()
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            self.fail(f"{rel}: {e}")
            return set()
        if len(data) < 8:
            self.fail(f"{rel}: shorter than the 8-byte header length")
            return set()
        (hlen,) = struct.unpack("<Q", data[:8])
        if 8 + hlen > len(data):
            self.fail(f"{rel}: header length {hlen} runs past the file")
            return set()
        try:
            header = json.loads(data[8:8 + hlen])
        except ValueError as e:
            self.fail(f"{rel}: header JSON: {e}")
            return set()
        payload = data[8 + hlen:]
        if header.get("representation") != rep_id:
            self.fail(f"{rel}: header names {header.get('representation')!r}, index {rep_id!r}")
        tensors = header.get("tensors") or []
        end = 0
        names = set()
        source = hashlib.sha256()
        total = 0
        for t in tensors:
            start, length = t.get("offset", -1), t.get("len", -1)
            if not isinstance(start, int) or not isinstance(length, int) or start < end \
                    or length < 0 or start + length > len(payload):
                self.fail(f"{rel}: tensor {t.get('name')} [{start}, +{length}) is out of table "
                          f"order, overlaps the previous one or leaves the {len(payload)}-byte "
                          "payload")
                continue
            end = start + length
            names.add(t.get("name"))
            data_t = payload[start:end]
            source.update(data_t)
            total += length
            want = (entry.get("tensor_sha256") or {}).get(t.get("name"))
            if want is not None:
                got = hashlib.sha256(data_t).hexdigest()
                if got != want:
                    self.fail(f"{rel}: tensor {t.get('name')} sha256 {got}, index {want}")
        checks = [
            ("tensor_count", len(tensors)),
            ("payload_bytes", total),
            ("payload_sha256", source.hexdigest()),
            ("segment_sha256", hashlib.sha256(data).hexdigest()),
        ]
        for field, got in checks:
            want = entry.get(field)
            if want is not None and want != got:
                self.fail(f"{rep_id}: {field} is {got}, index records {want}")
        return names

    def read(self):
        loaded = self.load_json("index.json")
        if loaded is None:
            return None
        _, index = loaded
        if index.get("version") not in (3, 4):
            self.fail(f"index.json version {index.get('version')} (VINDEX3 spans 3-4)")
        if not isinstance(index.get("system_graph"), str):
            self.fail("not a graph container: index.json names no system_graph")
            return None
        if index.get("moe_manifest") is not None:
            self.fail("a graph container written by a mainline producer sets moe_manifest null")
        authority = index.get("authority")
        if authority not in ("canonical", "derived"):
            self.fail(f"container authority {authority!r} is not canonical or derived")
        loaded = self.load_json(index["system_graph"])
        if loaded is None:
            return None
        graph_bytes, graph = loaded
        want = index.get("system_graph_sha256")
        if want is not None and hashlib.sha256(graph_bytes).hexdigest() != want:
            self.fail("system_graph.json does not match system_graph_sha256")
        if graph.get("schema") != 6:
            self.fail(f"SystemGraph schema {graph.get('schema')} (6 is current)")

        reps = index.get("representations") or {}
        tensors_of = {}
        objects = {}
        ids = set()
        for obj in graph.get("objects") or []:
            oid = obj.get("id")
            if oid in ids:
                self.fail(f"object {oid} appears twice")
            ids.add(oid)
            if oid != f"{obj.get('component')}.{obj.get('kind')}":
                self.fail(f"object id {oid} is not {{component}}.{{kind}}")
            own = obj.get("representations") or []
            if obj.get("tied_to") and own:
                self.fail(f"{oid} is tied to {obj['tied_to']} yet has representations")
            objects[oid] = {"kind": obj.get("kind"), "tied_to": obj.get("tied_to"),
                            "representations": {}}
            for r in own:
                rid = r.get("id")
                entry = reps.get(rid)
                if entry is None:
                    self.fail(f"{oid}: representation {rid} is not in index.json")
                    continue
                for field in ("encoding", "fidelity"):
                    if entry.get(field) != r.get(field):
                        self.fail(f"{rid}: graph says {field} {r.get(field)!r}, index "
                                  f"{entry.get(field)!r}")
                if entry.get("object") != oid:
                    self.fail(f"{rid}: index says object {entry.get('object')!r}")
                if entry.get("fidelity") not in FIDELITY_ORDER:
                    self.fail(f"{rid}: fidelity {entry.get('fidelity')!r} is not a level")
                tensors_of[rid] = self.segment(entry.get("segment", ""), rid, entry)
                objects[oid]["representations"][entry.get("encoding")] = entry.get("fidelity")

        # Representations the index holds beyond the graph's lists (REPRESENT adds both; a
        # reader must still account for every entry): each must belong to a graph object.
        for rid, entry in reps.items():
            oid = entry.get("object")
            if oid not in objects:
                self.fail(f"index representation {rid} belongs to no graph object ({oid!r})")
                continue
            if rid not in tensors_of:
                tensors_of[rid] = self.segment(entry.get("segment", ""), rid, entry)
                objects[oid]["representations"][entry.get("encoding")] = entry.get("fidelity")

        variants = index.get("variants") or {}
        baseline_rep = {}
        for region, cat in variants.items():
            vs = cat.get("variants") or {}
            if cat.get("baseline") not in vs:
                self.fail(f"variants[{region}]: baseline {cat.get('baseline')!r} is not a variant")
            for name, v in vs.items():
                rid = v.get("representation")
                entry = reps.get(rid)
                if entry is None:
                    self.fail(f"variants[{region}].{name}: representation {rid} is absent")
                    continue
                if v.get("storage") != entry.get("segment"):
                    self.fail(f"variants[{region}].{name}: storage {v.get('storage')} is not "
                              f"the representation's segment {entry.get('segment')}")
                if v.get("fidelity") != entry.get("fidelity"):
                    self.fail(f"variants[{region}].{name}: fidelity {v.get('fidelity')} differs "
                              f"from the representation's {entry.get('fidelity')}")
            if cat.get("baseline") in vs:
                baseline_rep[region] = vs[cat["baseline"]].get("representation")

        profiles = {}
        for p in index.get("profiles") or []:
            name = p.get("profile")
            select = dict(p.get("select") or {})
            worst = 0
            for region, cat in variants.items():
                chosen = select.pop(region, cat.get("baseline"))
                v = (cat.get("variants") or {}).get(chosen)
                if v is None:
                    self.fail(f"profile {name}: {region} selects absent variant {chosen!r}")
                    continue
                if v.get("fidelity") in FIDELITY_ORDER:
                    worst = max(worst, FIDELITY_ORDER.index(v["fidelity"]))
            for region in select:
                self.fail(f"profile {name}: selects {region}, which has no variants")
            profiles[name] = FIDELITY_ORDER[worst]

        for comp in graph.get("components") or []:
            self.closure(comp, objects, baseline_rep, tensors_of)
        return {"authority": authority, "objects": objects, "profiles": profiles}

    def closure(self, comp, objects, baseline_rep, tensors_of):
        cid = comp.get("id")
        bound = {}
        for b in comp.get("operands") or []:
            obj = b.get("object")
            target = objects.get(obj)
            if target is None:
                self.fail(f"{cid}: operand {b.get('role')} names absent object {obj}")
                continue
            while target and target.get("tied_to"):
                obj = target["tied_to"]
                target = objects.get(obj)
            rid = baseline_rep.get(obj)
            if rid is None or b.get("tensor") not in tensors_of.get(rid, set()):
                self.fail(f"{cid}: operand {b.get('role')} of layer {b.get('layer')}: tensor "
                          f"{b.get('tensor')!r} is not in {obj}'s baseline representation")
            if b.get("layer") is not None:
                bound.setdefault(b["layer"], set()).add(b.get("role"))
        n = comp.get("num_layers", 0)
        attention = comp.get("attention") or []
        if len(attention) != n or any(a.get("layer") != i or not a.get("operator")
                                      for i, a in enumerate(attention)):
            self.fail(f"{cid}: the attention census is not one explicit entry per layer")
        program = comp.get("program")
        if program is None:
            return
        if len(program) != n or len(comp.get("continuation") or []) != n:
            self.fail(f"{cid}: program/continuation do not cover the {n} layers")
            return
        for i, p in enumerate(program):
            consumed = set()
            for op in p.get("ops") or []:
                consumed.update(op.get("roles") or [])
            if consumed != bound.get(i, set()):
                self.fail(f"{cid}: layer {i}: the program consumes {sorted(consumed)}, the layer "
                          f"binds {sorted(bound.get(i, set()))}")
            has_attention = any(op.get("op") == "attention" for op in p.get("ops") or [])
            kv = [r for r in comp["continuation"][i].get("regions") or [] if r.get("role") == "kv"]
            if has_attention and not kv:
                self.fail(f"{cid}: layer {i} runs attention but declares no KV state")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-4], file=sys.stderr)
        sys.exit(2)
    r = Reader(sys.argv[1])
    summary = r.read()
    if r.errors:
        print(json.dumps({"errors": r.errors}, indent=1))
        sys.exit(1)
    print(json.dumps(summary, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
