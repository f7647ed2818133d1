// Reading an encoded tensor stored as raw bytes in `w` (a u32 array padded by one word, so
// an unaligned 32-bit read at the last byte stays inside the buffer).

fn rd8(o: u32) -> u32 {
    return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu;
}

fn rd32(o: u32) -> u32 {
    let s = (o & 3u) * 8u;
    let i = o >> 2u;
    if (s == 0u) {
        return w[i];
    }
    return (w[i] >> s) | (w[i + 1u] << (32u - s));
}

// An IEEE half float (the low 16 bits of `h`) as f32, exactly; written out rather than
// `unpack2x16float`, which some targets only offer with the f16 capability.
fn half(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604645e-8;
    } else if (e == 31u) {
        v = bitcast<f32>(0x7f800000u | (m << 13u));
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    return select(v, -v, ((h >> 15u) & 1u) == 1u);
}

fn f16at(o: u32) -> f32 {
    return half(rd8(o) | (rd8(o + 1u) << 8u));
}

// The 32 decoded elements of one unit of a row.
var<private> blk: array<f32, 32>;
