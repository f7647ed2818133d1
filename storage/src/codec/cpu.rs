//! Runtime CPU feature detection for the SIMD kernels, detected once and cached.

use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const SCALAR: u8 = 1;
const AVX2: u8 = 2;

static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);

/// True when the AVX2 + FMA + F16C kernels may run on this CPU.
///
/// The environment variable `LQL_CODEC_SCALAR=1` forces the portable scalar kernels (used by
/// tests and benchmarks to compare both paths).
#[inline]
pub fn has_avx2() -> bool {
    let l = LEVEL.load(Ordering::Relaxed);
    if l != UNKNOWN {
        return l == AVX2;
    }
    let l = detect();
    LEVEL.store(l, Ordering::Relaxed);
    l == AVX2
}

fn detect() -> u8 {
    if std::env::var_os("LQL_CODEC_SCALAR").is_some_and(|v| v == "1") {
        return SCALAR;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            return AVX2;
        }
    }
    SCALAR
}

/// Name of the kernel family in use (`"avx2"` or `"scalar"`), for EXPLAIN and benchmarks.
pub fn kernel_name() -> &'static str {
    if has_avx2() {
        "avx2+fma+f16c"
    } else {
        "scalar"
    }
}
