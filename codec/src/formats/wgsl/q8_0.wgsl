// Q8_0: blocks of 32 in 34 bytes: f16 scale d, 32 signed bytes; x = q · d.
fn decode32(base: u32, u: u32) {
    let o = base + u * 34u;
    let d = f16at(o);
    for (var j = 0u; j < 8u; j++) {
        let q = rd32(o + 2u + 4u * j);
        for (var k = 0u; k < 4u; k++) {
            let s = bitcast<i32>(q << (24u - 8u * k)) >> 24u;
            blk[4u * j + k] = f32(s) * d;
        }
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = base + u * 34u;
    let d = f16at(o);
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 8u; j++) {
        s += sbytes4(rd32(o + 2u + 4u * j)) * x[xo + j];
    }
    return d * hsum(s);
}
