// F32: a unit is 128 bytes.
fn decode32(base: u32, u: u32) {
    let o = base + u * 128u;
    for (var j = 0u; j < 32u; j++) {
        blk[j] = bitcast<f32>(rd32(o + 4u * j));
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = (base + u * 128u) >> 2u;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 8u; j++) {
        let i = o + 4u * j;
        let v = vec4<f32>(bitcast<f32>(w[i]), bitcast<f32>(w[i + 1u]), bitcast<f32>(w[i + 2u]), bitcast<f32>(w[i + 3u]));
        s += v * x[xo + j];
    }
    return hsum(s);
}
