// BF16: a unit is 64 bytes; each element is the high half of an f32.
fn decode32(base: u32, u: u32) {
    let o = base + u * 64u;
    for (var j = 0u; j < 16u; j++) {
        let q = rd32(o + 4u * j);
        blk[2u * j] = bitcast<f32>(q << 16u);
        blk[2u * j + 1u] = bitcast<f32>(q & 0xffff0000u);
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = base + u * 64u;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 8u; j++) {
        let a = rd32(o + 8u * j);
        let b = rd32(o + 8u * j + 4u);
        let v = vec4<f32>(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xffff0000u), bitcast<f32>(b << 16u), bitcast<f32>(b & 0xffff0000u));
        s += v * x[xo + j];
    }
    return hsum(s);
}
