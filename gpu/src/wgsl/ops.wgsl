// Element-wise and row operations of the forward pass on f32 activations: RMSNorm and
// LayerNorm, bias and residual adds, per-column and per-row scales, rotary embedding, the
// gated and plain activations, causal attention over the key/value cache (scale, sliding
// window, softcap), and the softmax and arg-max of a logits row for sampling. Every entry
// point reads its sizes from the uniform `p`; `a`, `b` and `c` are its buffers.

struct OpParams {
    n: u32,
    len: u32,
    grid_x: u32,
    mode: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    p0: u32,
    eps: f32,
    scale: f32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> c: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<uniform> p: OpParams;

const WG: u32 = 64u;
var<workgroup> red: array<f32, 64>;

fn flat(wg: vec3<u32>, lid: vec3<u32>) -> u32 {
    return (wg.x + wg.y * p.grid_x) * WG + lid.x;
}

// Sum of `v` over the workgroup (every thread gets it).
fn wg_sum(v: f32, lid: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn wg_max(v: f32, lid: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// o[row] = b[row] / rms(b[row]) · c (weights), rows of p.len; one workgroup per row.
@compute @workgroup_size(64)
fn rmsnorm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let base = wg.x * p.len;
    var ss = 0.0;
    for (var i = lid.x; i < p.len; i += WG) {
        let v = b[base + i];
        ss += v * v;
    }
    let total = wg_sum(ss, lid.x);
    let inv = 1.0 / sqrt(total / f32(p.len) + p.eps);
    for (var i = lid.x; i < p.len; i += WG) {
        o[base + i] = b[base + i] * inv * c[i];
    }
}

// o[row] = (b[row] − mean) / sqrt(var + eps) · c (weights) + a (bias), rows of p.len; one
// workgroup per row.
@compute @workgroup_size(64)
fn layernorm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let base = wg.x * p.len;
    var s = 0.0;
    for (var i = lid.x; i < p.len; i += WG) {
        s += b[base + i];
    }
    let mean = wg_sum(s, lid.x) / f32(p.len);
    var ss = 0.0;
    for (var i = lid.x; i < p.len; i += WG) {
        let v = b[base + i] - mean;
        ss += v * v;
    }
    let inv = 1.0 / sqrt(wg_sum(ss, lid.x) / f32(p.len) + p.eps);
    for (var i = lid.x; i < p.len; i += WG) {
        o[base + i] = (b[base + i] - mean) * inv * c[i] + a[i];
    }
}

// a[i] *= b[i % p.len] for i < p.n (each row's columns scaled).
@compute @workgroup_size(64)
fn mul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat(wg, lid);
    if (i < p.n) {
        a[i] *= b[i % p.len];
    }
}

// a[i] += b[i] · c[i / p.len] for i < p.n (rows of p.len, each added with its row's weight).
@compute @workgroup_size(64)
fn axpy_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat(wg, lid);
    if (i < p.n) {
        a[i] += b[i] * c[i / p.len];
    }
}

// a[i] += b[i % p.len] for i < p.n (a bias row over every position; p.len = p.n for a
// plain element-wise add).
@compute @workgroup_size(64)
fn add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat(wg, lid);
    if (i < p.n) {
        a[i] += b[i % p.len];
    }
}

// Rotary embedding of a = [n × n_heads × head_dim] in place over the first 2·p.len
// dimensions of each head; b = cos, c = sin, each [n × p.len]; mode 0: adjacent pairs,
// 1: half-split pairs (of the rotated dimensions). One thread per pair.
@compute @workgroup_size(64)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat(wg, lid);
    let half = p.len;
    if (i >= p.n * p.n_heads * half) {
        return;
    }
    let k = i % half;
    let head = i / half;
    let t = head / p.n_heads;
    let base = head * p.head_dim;
    var ia: u32;
    var ib: u32;
    if (p.mode == 0u) {
        ia = base + 2u * k;
        ib = ia + 1u;
    } else {
        ia = base + k;
        ib = ia + half;
    }
    let cs = b[t * half + k];
    let sn = c[t * half + k];
    let x0 = a[ia];
    let x1 = a[ib];
    a[ia] = x0 * cs - x1 * sn;
    a[ib] = x0 * sn + x1 * cs;
}

// SiLU (mode 0) or GELU, tanh form (mode 1).
fn activation(g: f32) -> f32 {
    if (p.mode == 0u) {
        return g / (1.0 + exp(-g));
    }
    return 0.5 * g * (1.0 + tanh(0.7978846 * (g + 0.044715 * g * g * g)));
}

// a[i] = act(a[i]) · b[i] for i < p.n.
@compute @workgroup_size(64)
fn glu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat(wg, lid);
    if (i < p.n) {
        a[i] = activation(a[i]) * b[i];
    }
}

// a[i] = act(a[i]) for i < p.n (an MLP's hidden layer).
@compute @workgroup_size(64)
fn act(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat(wg, lid);
    if (i < p.n) {
        a[i] = activation(a[i]);
    }
}

// Causal attention for query i (workgroup y) and head h (workgroup x): b = q
// [n × n_heads × head_dim], c = the key cache, o = out [n × n_heads × head_dim]; the value
// cache is read from `a` (read-only here), and the softmax weights are written to the
// `weights` binding: [n × n_heads × (p0 + n)], zero outside the keys the query sees
// (p0 + i − p.len < j ≤ p0 + i with a window p.len, every j ≤ p0 + i without). Scores are
// q·k · p.scale, then p.eps · tanh(score / p.eps) when p.eps (the softcap) is not 0.
@group(0) @binding(5) var<storage, read_write> weights: array<f32>;

@compute @workgroup_size(64)
fn attention(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let i = wg.y;
    let hd = p.head_dim;
    let total = p.p0 + p.n;
    let pos = p.p0 + i;
    let kvh = h / (p.n_heads / p.n_kv_heads);
    let kvd = p.n_kv_heads * hd;
    let qo = (i * p.n_heads + h) * hd;
    let srow = (i * p.n_heads + h) * total;
    var first = 0u;
    if (p.len > 0u && pos + 1u > p.len) {
        first = pos + 1u - p.len;
    }
    var mx = -3.0e38;
    for (var j = lid.x; j < total; j += WG) {
        if (j <= pos && j >= first) {
            let ko = j * kvd + kvh * hd;
            var s = 0.0;
            for (var d = 0u; d < hd; d++) {
                s += b[qo + d] * c[ko + d];
            }
            s *= p.scale;
            if (p.eps != 0.0) {
                s = p.eps * tanh(clamp(s / p.eps, -15.0, 15.0));
            }
            weights[srow + j] = s;
            mx = max(mx, s);
        } else {
            weights[srow + j] = 0.0;
        }
    }
    let m = wg_max(mx, lid.x);
    var sum = 0.0;
    for (var j = first + lid.x; j <= pos; j += WG) {
        let e = exp(weights[srow + j] - m);
        weights[srow + j] = e;
        sum += e;
    }
    let inv = 1.0 / wg_sum(sum, lid.x);
    for (var j = first + lid.x; j <= pos; j += WG) {
        weights[srow + j] *= inv;
    }
    storageBarrier();
    workgroupBarrier();
    for (var d = lid.x; d < hd; d += WG) {
        var acc = 0.0;
        for (var j = first; j <= pos; j++) {
            acc += weights[srow + j] * a[j * kvd + kvh * hd + d];
        }
        o[qo + d] = acc;
    }
}

// The arg-max of each logits row b [n × len] (lowest id among ties) into o[row] (as a
// float-encoded u32), and its softmax probability into o[n + row]: greedy sampling reads
// back two numbers per row instead of the vocabulary.
var<workgroup> best: array<u32, 64>;

@compute @workgroup_size(64)
fn argmax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let base = wg.x * p.len;
    var bi = 0xffffffffu;
    var bv = -3.0e38;
    for (var i = lid.x; i < p.len; i += WG) {
        let v = b[base + i];
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    red[lid.x] = bv;
    best[lid.x] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid.x < s) {
            let ov = red[lid.x + s];
            let oi = best[lid.x + s];
            if (ov > red[lid.x] || (ov == red[lid.x] && oi < best[lid.x])) {
                red[lid.x] = ov;
                best[lid.x] = oi;
            }
        }
        workgroupBarrier();
    }
    let m = red[0];
    let id = best[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var i = lid.x; i < p.len; i += WG) {
        sum += exp(b[base + i] - m);
    }
    let total = wg_sum(sum, lid.x);
    if (lid.x == 0u) {
        o[wg.x] = bitcast<f32>(id);
        o[p.n + wg.x] = 1.0 / total;
    }
}
