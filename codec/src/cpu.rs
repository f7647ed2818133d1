//! Runtime CPU feature detection for the SIMD kernels, detected once and cached.

use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const SCALAR: u8 = 1;
const AVX2: u8 = 2;
const AVX512: u8 = 3;
const NEON: u8 = 4;

static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);

/// A family of kernels, ordered from the most portable to the widest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kernels {
    /// Portable Rust, every CPU.
    Scalar,
    /// NEON (aarch64): fused dot kernels for the 32-element formats, Q4_K, Q5_K, Q6_K, F32,
    /// F16 and BF16 (`codec/neon.rs`). On x86-64 it runs the
    /// scalar kernels (ordered below the x86 families so it never selects them).
    Neon,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512F/BW on top of [`Kernels::Avx2`] (the Q8_0 row kernel and the four-row Q4_0
    /// and Q4_1 kernels; the rest run as AVX2, see `codec/avx512.rs`).
    Avx512,
}

impl Kernels {
    /// Every family, most portable first.
    pub const ALL: [Kernels; 4] = [
        Kernels::Scalar,
        Kernels::Neon,
        Kernels::Avx2,
        Kernels::Avx512,
    ];
}

/// The widest kernel family this CPU runs (detected once).
///
/// `LQL_CODEC_SCALAR=1` forces the portable scalar kernels and `LQL_CODEC_NO_AVX512=1` stops
/// at AVX2 (used by tests and benchmarks to compare the paths).
#[inline]
pub fn best() -> Kernels {
    let mut l = LEVEL.load(Ordering::Relaxed);
    if l == UNKNOWN {
        l = detect();
        LEVEL.store(l, Ordering::Relaxed);
    }
    match l {
        AVX512 => Kernels::Avx512,
        AVX2 => Kernels::Avx2,
        NEON => Kernels::Neon,
        _ => Kernels::Scalar,
    }
}

/// True when the NEON kernels run (aarch64, not forced to scalar).
#[inline]
pub fn has_neon() -> bool {
    best() == Kernels::Neon
}

/// True when the AVX2 + FMA + F16C kernels may run on this CPU.
#[inline]
pub fn has_avx2() -> bool {
    best() >= Kernels::Avx2
}

/// True when the AVX-512F/BW kernels may run on this CPU.
#[inline]
pub fn has_avx512() -> bool {
    best() >= Kernels::Avx512
}

fn env_is_1(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

fn detect() -> u8 {
    if env_is_1("LQL_CODEC_SCALAR") {
        return SCALAR;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && !env_is_1("LQL_CODEC_NO_AVX512")
            {
                return AVX512;
            }
            return AVX2;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        return NEON;
    }
    #[allow(unreachable_code)]
    SCALAR
}

/// Name of the kernel family in use, for EXPLAIN and benchmarks.
pub fn kernel_name() -> &'static str {
    match best() {
        Kernels::Avx512 => "avx512+avx2+fma+f16c",
        Kernels::Avx2 => "avx2+fma+f16c",
        Kernels::Neon => "neon",
        Kernels::Scalar => "scalar",
    }
}
