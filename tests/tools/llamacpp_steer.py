#!/usr/bin/env python3
"""llama.cpp as an independent peer for steering (tests/tests/steering.rs).

Usage:
  llamacpp_steer.py decode MODEL.gguf CVEC.gguf SCALE N OUT.json IDS_JSON
      Loads MODEL.gguf with llama-cpp-python (2 threads, f32 KV cache), reads the control
      vector with the gguf package as llama.cpp's common loader does (tensors direction.N,
      N >= 1, scaled by SCALE, into a buffer starting at layer 1), applies it with
      llama_set_adapter_cvec over layers 1..n_layer-1, and greedily decodes N tokens after
      each prompt of IDS_JSON (a JSON list of token-id lists). CVEC "-" applies none.
      Writes OUT.json: {"tokens": [[...], ...]}.
  llamacpp_steer.py make OUT.gguf N_EMBD N_LAYERS SEED HINT
      Writes a control vector with the gguf package (as repeng and llama.cpp's
      cvector-generator do): general.architecture = controlvector, model_hint HINT,
      direction.1 .. direction.N_LAYERS-1 of N_EMBD seeded Gaussian values.
Exits 3 when llama_cpp, gguf or numpy cannot be imported, 4 when the model does not load.
"""
import ctypes, json, sys

try:
    import numpy as np
    import gguf
except Exception as e:  # noqa: BLE001
    print(f"gguf/numpy unavailable: {e}", file=sys.stderr)
    sys.exit(3)


def make(out, n_embd, n_layers, seed, hint):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(out, "controlvector")
    w.add_string("controlvector.model_hint", hint)
    w.add_int32("controlvector.layer_count", n_layers - 1)
    for layer in range(1, n_layers):
        w.add_tensor(f"direction.{layer}", rng.standard_normal(n_embd).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load_cvec(path, scale, n_embd, n_layer):
    """llama.cpp common's llama_control_vector_load_one, for one file."""
    r = gguf.GGUFReader(path)
    buf = np.zeros(n_embd * (n_layer - 1), dtype=np.float32)
    for t in r.tensors:
        layer = int(t.name.split(".")[1])
        assert layer > 0, "direction.0 is invalid in llama.cpp"
        v = np.asarray(t.data, dtype=np.float32).reshape(-1)
        assert v.shape[0] == n_embd
        off = (layer - 1) * n_embd
        if off + n_embd <= buf.shape[0]:
            buf[off:off + n_embd] += scale * v
    return buf


def decode(model, cvec, scale, n, out, ids_json):
    try:
        import llama_cpp
        from llama_cpp import Llama
    except Exception as e:  # noqa: BLE001
        print(f"llama_cpp unavailable: {e}", file=sys.stderr)
        sys.exit(3)
    try:
        llm = Llama(model_path=model, n_ctx=512, n_threads=2, logits_all=True, verbose=False,
                    seed=0, type_k=0, type_v=0)
    except Exception as e:  # noqa: BLE001
        print(f"llama.cpp could not load {model}: {e}", file=sys.stderr)
        sys.exit(4)
    n_embd = llama_cpp.llama_model_n_embd(llm.model)
    n_layer = llama_cpp.llama_model_n_layer(llm.model)
    if cvec != "-":
        buf = load_cvec(cvec, scale, n_embd, n_layer)
        ptr = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        rc = llama_cpp.llama_set_adapter_cvec(llm.ctx, ptr, buf.shape[0], n_embd, 1, n_layer - 1)
        assert rc == 0, f"llama_set_adapter_cvec returned {rc}"
    res = {"tokens": []}
    for ids in json.loads(ids_json):
        llm.reset()
        llm.eval(ids)
        got = []
        for _ in range(n):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            got.append(tok)
            llm.eval([tok])
        res["tokens"].append(got)
    json.dump(res, open(out, "w"))


if sys.argv[1] == "make":
    make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
elif sys.argv[1] == "decode":
    decode(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
           sys.argv[7])
else:
    sys.exit(f"unknown command {sys.argv[1]}")
