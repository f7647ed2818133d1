// Q4_1: blocks of 32 in 20 bytes: f16 scale d, f16 minimum m, 16 bytes of nibbles (low
// nibbles are elements 0-15, high nibbles 16-31); x = q · d + m.
fn decode32(base: u32, u: u32) {
    let o = base + u * 20u;
    let d = f16at(o);
    let m = f16at(o + 2u);
    for (var j = 0u; j < 4u; j++) {
        let q = rd32(o + 4u + 4u * j);
        for (var k = 0u; k < 4u; k++) {
            let b = (q >> (8u * k)) & 0xffu;
            blk[4u * j + k] = f32(b & 0xfu) * d + m;
            blk[4u * j + k + 16u] = f32(b >> 4u) * d + m;
        }
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = base + u * 20u;
    let d = f16at(o);
    let m = f16at(o + 2u);
    var s = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        let q = rd32(o + 4u + 4u * j);
        let xl = x[xo + j];
        let xh = x[xo + 4u + j];
        s += bytes4(q & 0x0f0f0f0fu) * xl + bytes4((q >> 4u) & 0x0f0f0f0fu) * xh;
        sx += xl + xh;
    }
    return d * hsum(s) + m * hsum(sx);
}
