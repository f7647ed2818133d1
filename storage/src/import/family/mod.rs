//! The model families the GGUF importer accepts, one file each.
//!
//! A family is a [`Family`] entry: its name as `general.architecture` spells it, the facts
//! fixed for the family (RoPE pairing, activation, required biases, fused tensors, expert
//! routing) and a function reading the rest of its [`BlockSpec`] from the file's metadata.
//! Everything after the importer runs on the [`crate::surface::ExecutionSurface`] alone, so a
//! family that fits the block description is this one entry and nothing else
//! (docs/families.md).

mod gemma2;
mod gemma3;
mod gpt2;
mod gptneox;
mod llama;
mod olmo2;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;

use super::metadata::Metadata;
use crate::error::{Result, StorageError};
use crate::surface::{Activation, BlockSpec, ExpertSelection, RopePairing};

/// Tensors a family stores fused that the importer splits into the block's operands (row
/// ranges of the stored tensor, read in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fused {
    /// `attn_qkv` holds the Q, K and V rows (and `attn_qkv.bias` their biases), in order.
    pub qkv: bool,
    /// `ffn_up` holds the gate rows, then the up rows (phi3).
    pub gate_up: bool,
}

/// What the importer knows about one GGUF architecture.
pub struct Family {
    /// `general.architecture`.
    pub name: &'static str,
    pub pairing: RopePairing,
    pub activation: Activation,
    /// Q/K/V biases are required (otherwise taken when present).
    pub bias_required: bool,
    /// How the family routes tokens when its FFNs are banks; `None`: dense only.
    pub selection: Option<ExpertSelection>,
    /// Every FFN is a bank (the expert metadata is required).
    pub experts_required: bool,
    pub fused: Fused,
    /// The metadata key of the norm epsilon (under `{arch}.`).
    pub eps_key: &'static str,
    /// Multiplier of embedding rows, from the hidden size (gemma: `sqrt(hidden)`).
    pub embedding_scale: fn(usize) -> f32,
    /// The block as the family defines it before a file's metadata is read (what
    /// `SHOW ARCHITECTURES` lists); `block` starts from it.
    pub nominal: BlockSpec,
    /// The block of one file: `nominal` with what the file's metadata says.
    pub block: fn(&Meta<'_>) -> Result<BlockSpec>,
}

impl Family {
    /// What most families share: half-split RoPE, SwiGLU, no required biases, dense, no
    /// fused tensors, the RMS epsilon key, no embedding scale, the plain block. Entries
    /// spell out only where they differ (`..Family::BASE`).
    pub const BASE: Family = Family {
        name: "",
        pairing: RopePairing::HalfSplit,
        activation: Activation::Silu,
        bias_required: false,
        selection: None,
        experts_required: false,
        fused: Fused {
            qkv: false,
            gate_up: false,
        },
        eps_key: "attention.layer_norm_rms_epsilon",
        embedding_scale: unscaled,
        nominal: BlockSpec::PLAIN,
        block: plain,
    };
}

/// Every family, in the order `SHOW ARCHITECTURES` lists them.
pub const FAMILIES: [&Family; 11] = [
    &llama::FAMILY,
    &qwen2::FAMILY,
    &qwen2moe::FAMILY,
    &qwen3::FAMILY,
    &qwen3moe::FAMILY,
    &gemma2::FAMILY,
    &gemma3::FAMILY,
    &phi3::FAMILY,
    &gpt2::FAMILY,
    &gptneox::FAMILY,
    &olmo2::FAMILY,
];

/// The family of `general.architecture` = `arch`.
pub fn find(arch: &str) -> Option<&'static Family> {
    FAMILIES.iter().copied().find(|f| f.name == arch)
}

/// The names of every family, comma-separated (for refusals).
pub fn names() -> String {
    FAMILIES.map(|f| f.name).join(", ")
}

/// No embedding scale.
pub fn unscaled(_: usize) -> f32 {
    1.0
}

/// The plain llama block with the file's linear RoPE scaling.
pub fn plain(m: &Meta<'_>) -> Result<BlockSpec> {
    Ok(BlockSpec {
        rope_freq_scale: m.rope_freq_scale()?,
        ..BlockSpec::PLAIN
    })
}

/// A source's metadata under its architecture's prefix, with the sizes already judged.
pub struct Meta<'a> {
    pub file: &'a dyn Metadata,
    pub arch: &'a str,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub head_dim: usize,
}

impl Meta<'_> {
    /// `family`'s block for this source: its `block` function, with the rotary dimensions
    /// the metadata asks for.
    pub fn block_of(&self, family: &Family) -> Result<BlockSpec> {
        let mut block = (family.block)(self)?;
        if block.rope {
            block.rotary_dims = self.rotary_dims()?;
        }
        Ok(block)
    }

    /// The full key of `{arch}.{key}`.
    pub fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    pub fn usize(&self, key: &str) -> Result<Option<usize>> {
        Ok(self
            .file
            .u64(&self.key(key))?
            .and_then(|v| usize::try_from(v).ok()))
    }

    pub fn f32(&self, key: &str) -> Result<Option<f32>> {
        self.file.f32(&self.key(key))
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.file.bool(&self.key(key))
    }

    pub fn str(&self, key: &str) -> Result<Option<&str>> {
        self.file.str(&self.key(key))
    }

    /// A refusal of `{arch}.{key}` naming the file, the key and where it lies.
    pub fn bad(&self, key: &str, message: String) -> StorageError {
        let (field, offset) = self.file.locate(&self.key(key));
        StorageError::Format {
            path: self.file.path().to_path_buf(),
            offset,
            field,
            message,
        }
    }

    /// How a refusal names `{arch}.{key}` (the source's own spelling).
    pub fn field(&self, key: &str) -> String {
        self.file.locate(&self.key(key)).0
    }

    /// A positive, finite `{arch}.{key}`, if present.
    pub fn positive(&self, key: &str) -> Result<Option<f32>> {
        match self.f32(key)? {
            Some(v) if !(v.is_finite() && v > 0.0) => {
                Err(self.bad(key, format!("{v} is not a positive number")))
            }
            v => Ok(v),
        }
    }

    /// A sliding window from `{arch}.attention.sliding_window` (or `default_window` when
    /// the key is absent; 0: none) over the layers of llama.cpp's `period` (or
    /// `{arch}.attention.sliding_window_pattern` when the file gives one); windowed layers
    /// rotate on `{arch}.rope.freq_base_swa`, else `default_base` (`None`: the model's).
    pub fn sliding(
        &self,
        default_window: Option<usize>,
        period: usize,
        default_base: Option<f32>,
    ) -> Result<Option<crate::surface::SlidingWindow>> {
        let window = match self.usize("attention.sliding_window")? {
            Some(w) => w,
            None => default_window.unwrap_or(0),
        };
        if window == 0 {
            return Ok(None);
        }
        let pattern_key = self.key("attention.sliding_window_pattern");
        let period = match self.file.has(&pattern_key) {
            false => period,
            true => match self.file.u64(&pattern_key) {
                Ok(Some(p)) => usize::try_from(p).map_err(|_| {
                    self.bad(
                        "attention.sliding_window_pattern",
                        format!("{p} is too large"),
                    )
                })?,
                _ => {
                    return Err(StorageError::Unsupported(format!(
                        "not supported yet: a per-layer sliding-window list ({}: {})",
                        self.file.path().display(),
                        self.field("attention.sliding_window_pattern")
                    )))
                }
            },
        };
        let rope_theta = match self.positive("rope.freq_base_swa")? {
            Some(b) => Some(b),
            None => default_base,
        };
        Ok(Some(crate::surface::SlidingWindow {
            window,
            period,
            rope_theta,
        }))
    }

    /// The attention softcap `{arch}.{key}`, or `default` when absent.
    pub fn softcap(&self, key: &str, default: f32) -> Result<f32> {
        Ok(self.positive(key)?.unwrap_or(default))
    }

    /// RoPE scaling as `{arch}.rope.scaling.type` / `.factor` say: none, or linear (a
    /// position scale of `1 / factor`); other kinds are refused by name.
    pub fn rope_freq_scale(&self) -> Result<f32> {
        if let Some(a) = self.positive("rope.scaling.attn_factor")? {
            if a != 1.0 {
                return Err(StorageError::Unsupported(format!(
                    "not supported yet: a RoPE attention factor of {a} ({}: {})",
                    self.file.path().display(),
                    self.field("rope.scaling.attn_factor")
                )));
            }
        }
        let kind = self.str("rope.scaling.type")?.map(str::to_string);
        let linear = || -> Result<f32> {
            let factor = match self.positive("rope.scaling.factor")? {
                Some(f) => Some(f),
                None => self.positive("rope.scale_linear")?,
            };
            Ok(1.0 / factor.unwrap_or(1.0))
        };
        match kind.as_deref() {
            Some("none") => Ok(1.0),
            None | Some("linear") => linear(),
            Some(other) => Err(StorageError::Unsupported(format!(
                "not supported yet: RoPE scaling `{other}` ({}: {})",
                self.file.path().display(),
                self.field("rope.scaling.type")
            ))),
        }
    }

    /// The rotary dimensions `{arch}.rope.dimension_count` asks for (0 = the whole head),
    /// refused when odd or larger than a head.
    pub fn rotary_dims(&self) -> Result<usize> {
        match self.usize("rope.dimension_count")? {
            None => Ok(0),
            Some(r) if r == self.head_dim => Ok(0),
            Some(r) if r == 0 || r > self.head_dim || r % 2 == 1 => Err(self.bad(
                "rope.dimension_count",
                format!(
                    "{r} rotary dimensions do not fit a head of {}",
                    self.head_dim
                ),
            )),
            Some(r) => Ok(r),
        }
    }
}
