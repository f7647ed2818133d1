// Q4_0: blocks of 32 in 18 bytes: f16 scale d, 16 bytes of nibbles (low nibbles are
// elements 0-15, high nibbles 16-31); x = (q - 8) · d.
fn decode32(base: u32, u: u32) {
    let o = base + u * 18u;
    let d = f16at(o);
    for (var j = 0u; j < 4u; j++) {
        let q = rd32(o + 2u + 4u * j);
        for (var k = 0u; k < 4u; k++) {
            let b = (q >> (8u * k)) & 0xffu;
            blk[4u * j + k] = (f32(b & 0xfu) - 8.0) * d;
            blk[4u * j + k + 16u] = (f32(b >> 4u) - 8.0) * d;
        }
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = base + u * 18u;
    let d = f16at(o);
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        let q = rd32(o + 2u + 4u * j);
        s += (bytes4(q & 0x0f0f0f0fu) - 8.0) * x[xo + j];
        s += (bytes4((q >> 4u) & 0x0f0f0f0fu) - 8.0) * x[xo + 4u + j];
    }
    return d * hsum(s);
}
