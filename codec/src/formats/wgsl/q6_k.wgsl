// Q6_K: super-blocks of 256 in 210 bytes: 128 bytes of low nibbles, 64 bytes of high
// 2-bit pairs, 16 signed 8-bit scales (one per 16 elements), f16 d; x = d · sc · (q − 32).
// Unit u of a super-block is half n = u/4, quarter k = u%4 of ggml's 128-element loop.
fn decode32(base: u32, u: u32) {
    let o = base + (u / 8u) * 210u;
    let uu = u % 8u;
    let n = uu / 4u;
    let k = uu % 4u;
    let d = f16at(o + 208u);
    let ql = o + 64u * n + (k & 1u) * 32u;
    let qh = o + 128u + 32u * n;
    let nib = (k >> 1u) * 4u;
    let hs = 2u * k;
    let sc = o + 192u + 8u * n + 2u * k;
    let s0 = d * f32(bitcast<i32>(rd8(sc) << 24u) >> 24u);
    let s1 = d * f32(bitcast<i32>(rd8(sc + 1u) << 24u) >> 24u);
    for (var l = 0u; l < 32u; l++) {
        let q = ((rd8(ql + l) >> nib) & 0xfu) | (((rd8(qh + l) >> hs) & 3u) << 4u);
        let s = select(s1, s0, l < 16u);
        blk[l] = s * (f32(q) - 32.0);
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = base + (u / 8u) * 210u;
    let uu = u % 8u;
    let n = uu / 4u;
    let k = uu % 4u;
    let d = f16at(o + 208u);
    let ql = o + 64u * n + (k & 1u) * 32u;
    let qh = o + 128u + 32u * n;
    let nib = (k >> 1u) * 4u;
    let hs = 2u * k;
    let sc = o + 192u + 8u * n + 2u * k;
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    for (var l = 0u; l < 8u; l++) {
        let lo = (rd32(ql + 4u * l) >> nib) & 0x0f0f0f0fu;
        let hi = ((rd32(qh + 4u * l) >> hs) & 0x03030303u) << 4u;
        let v = (bytes4(lo | hi) - 32.0) * x[xo + l];
        if (l < 4u) {
            s0 += v;
        } else {
            s1 += v;
        }
    }
    let c0 = f32(bitcast<i32>(rd8(sc) << 24u) >> 24u);
    let c1 = f32(bitcast<i32>(rd8(sc + 1u) << 24u) >> 24u);
    return d * (c0 * hsum(s0) + c1 * hsum(s1));
}
