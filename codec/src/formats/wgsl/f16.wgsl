// F16: a unit is 64 bytes of IEEE half floats.
fn decode32(base: u32, u: u32) {
    let o = base + u * 64u;
    for (var j = 0u; j < 16u; j++) {
        let q = rd32(o + 4u * j);
        blk[2u * j] = half(q & 0xffffu);
        blk[2u * j + 1u] = half(q >> 16u);
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = base + u * 64u;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 8u; j++) {
        let a = rd32(o + 8u * j);
        let b = rd32(o + 8u * j + 4u);
        let v = vec4<f32>(half(a & 0xffffu), half(a >> 16u), half(b & 0xffffu), half(b >> 16u));
        s += v * x[xo + j];
    }
    return hsum(s);
}
