// Dequantising matrix product on encoded rows, y[t, r] = W.row(r) · x[t]: one invocation
// per (row, input), reading the row's 32-element units straight into dot products
// (`dot32` of the encoding; a float row's partial last unit through `decode32`); and the embedding lookup, y[t, :] = W.row(ids[t]) · scale,
// one workgroup per token (`decode32` of the encoding).

struct MatParams {
    rows: u32,
    row_len: u32,
    row_bytes: u32,
    n: u32,
    grid_x: u32,
    scale: f32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: MatParams;
@group(0) @binding(4) var<storage, read> ids: array<u32>;

const WG: u32 = 64u;

// Four bytes of a word as floats.
fn bytes4(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<u32>(q & 0xffu, (q >> 8u) & 0xffu, (q >> 16u) & 0xffu, q >> 24u));
}

// Four signed bytes of a word as floats.
fn sbytes4(q: u32) -> vec4<f32> {
    return vec4<f32>(
        f32(bitcast<i32>(q << 24u) >> 24u),
        f32(bitcast<i32>(q << 16u) >> 24u),
        f32(bitcast<i32>(q << 8u) >> 24u),
        f32(bitcast<i32>(q) >> 24u),
    );
}

fn hsum(v: vec4<f32>) -> f32 {
    return v.x + v.y + v.z + v.w;
}

@compute @workgroup_size(64)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = (wg.x + wg.y * p.grid_x) * WG + lid.x;
    let t = wg.z;
    if (r >= p.rows || t >= p.n) {
        return;
    }
    let units = p.row_len / 32u;
    let base = r * p.row_bytes;
    let x0 = t * (p.row_len / 4u);
    var acc = 0.0;
    for (var u = 0u; u < units; u++) {
        acc += dot32(base, u, x0 + u * 8u);
    }
    // A float row's last, partial unit (quantised rows are whole units).
    let tail = p.row_len % 32u;
    if (tail > 0u) {
        decode32(base, units);
        for (var j = 0u; j < tail; j++) {
            let k = units * 32u + j;
            acc += blk[j] * x[x0 + k / 4u][k % 4u];
        }
    }
    y[t * p.rows + r] = acc;
}

@compute @workgroup_size(64)
fn embed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = wg.x;
    let base = ids[t] * p.row_bytes;
    let units = (p.row_len + 31u) / 32u;
    for (var u = lid.x; u < units; u += WG) {
        decode32(base, u);
        for (var j = 0u; j < min(32u, p.row_len - u * 32u); j++) {
            y[t * p.row_len + u * 32u + j] = blk[j] * p.scale;
        }
    }
}
