// Q4_K: super-blocks of 256 in 144 bytes: f16 d, f16 dmin, 12 bytes of packed 6-bit
// scales and minimums for 8 sub-blocks of 32, 128 bytes of nibbles (sub-block j reads
// chunk j/2, low nibbles for even j); x = d · sc_j · q − dmin · m_j.
fn decode32(base: u32, u: u32) {
    let o = base + (u / 8u) * 144u;
    let j = u % 8u;
    let d = f16at(o);
    let dmin = f16at(o + 2u);
    let s = o + 4u;
    var sc: u32;
    var m: u32;
    if (j < 4u) {
        sc = rd8(s + j) & 63u;
        m = rd8(s + j + 4u) & 63u;
    } else {
        sc = (rd8(s + j + 4u) & 0xfu) | ((rd8(s + j - 4u) >> 6u) << 4u);
        m = (rd8(s + j + 4u) >> 4u) | ((rd8(s + j) >> 6u) << 4u);
    }
    let d1 = d * f32(sc);
    let m1 = dmin * f32(m);
    let qo = o + 16u + (j / 2u) * 32u;
    let shift = (j % 2u) * 4u;
    for (var l = 0u; l < 8u; l++) {
        let q = rd32(qo + 4u * l);
        for (var k = 0u; k < 4u; k++) {
            blk[4u * l + k] = d1 * f32((q >> (8u * k + shift)) & 0xfu) - m1;
        }
    }
}

fn dot32(base: u32, u: u32, xo: u32) -> f32 {
    let o = base + (u / 8u) * 144u;
    let j = u % 8u;
    let d = f16at(o);
    let dmin = f16at(o + 2u);
    let sb = o + 4u;
    var sc: u32;
    var m: u32;
    if (j < 4u) {
        sc = rd8(sb + j) & 63u;
        m = rd8(sb + j + 4u) & 63u;
    } else {
        sc = (rd8(sb + j + 4u) & 0xfu) | ((rd8(sb + j - 4u) >> 6u) << 4u);
        m = (rd8(sb + j + 4u) >> 4u) | ((rd8(sb + j) >> 6u) << 4u);
    }
    let qo = o + 16u + (j / 2u) * 32u;
    let shift = (j % 2u) * 4u;
    var s = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    for (var l = 0u; l < 8u; l++) {
        let xv = x[xo + l];
        s += bytes4((rd32(qo + 4u * l) >> shift) & 0x0f0f0f0fu) * xv;
        sx += xv;
    }
    return d * f32(sc) * hsum(s) - dmin * f32(m) * hsum(sx);
}
