//! Tensor classification by name, as the reference slicer does it (reference §1–2).
//!
//! Layer index: `^blk\.([0-9]+)\.`, else `^cache_.*_l([0-9]+)$`. Role, first match wins:
//! a layer index → `Layer`; `token_embd.weight` / `per_layer_token_embd.weight` →
//! `Embedding`; `output.weight` / `output.bias` → `Output`; `output_norm.weight` /
//! `output_norm.bias` → `FinalNorm`; anything else → `Metadata` (repeated in every
//! fragment). Owned roles (`Embedding`, `Layer`, `FinalNorm`, `Output`) appear in exactly
//! one fragment.

/// A tensor's role in slicing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceRole {
    Metadata,
    Embedding,
    Layer(u64),
    FinalNorm,
    Output,
}

impl SliceRole {
    /// Whether the tensor belongs to exactly one fragment.
    pub fn is_owned(self) -> bool {
        !matches!(self, SliceRole::Metadata)
    }
}

/// The layer index a tensor name carries, if any.
pub fn layer_index(name: &str) -> Option<u64> {
    fn digits(s: &str) -> Option<u64> {
        if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    }
    if let Some(rest) = name.strip_prefix("blk.") {
        let (n, _) = rest.split_once('.')?;
        return digits(n);
    }
    if name.starts_with("cache_") {
        let (_, n) = name.rsplit_once("_l")?;
        return digits(n);
    }
    None
}

/// The role of the tensor called `name`.
pub fn role(name: &str) -> SliceRole {
    if let Some(i) = layer_index(name) {
        return SliceRole::Layer(i);
    }
    match name {
        "token_embd.weight" | "per_layer_token_embd.weight" => SliceRole::Embedding,
        "output.weight" | "output.bias" => SliceRole::Output,
        "output_norm.weight" | "output_norm.bias" => SliceRole::FinalNorm,
        _ => SliceRole::Metadata,
    }
}

/// One fragment's selection: layers `[layer_start, layer_end)` plus the two flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    pub stage_index: i32,
    pub layer_start: u64,
    pub layer_end: u64,
    pub include_embeddings: bool,
    pub include_output: bool,
}

impl Slice {
    /// Whether the tensor called `name` goes into this fragment.
    pub fn selects(&self, name: &str) -> bool {
        match role(name) {
            SliceRole::Layer(i) => self.layer_start <= i && i < self.layer_end,
            SliceRole::Embedding => self.include_embeddings,
            SliceRole::FinalNorm | SliceRole::Output => self.include_output,
            SliceRole::Metadata => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_classify_as_the_reference_does() {
        assert_eq!(role("blk.12.attn_q.weight"), SliceRole::Layer(12));
        assert_eq!(role("blk.3.nextn.eh_proj.weight"), SliceRole::Layer(3));
        assert_eq!(role("cache_k_l7"), SliceRole::Layer(7));
        assert_eq!(role("token_embd.weight"), SliceRole::Embedding);
        assert_eq!(role("output.weight"), SliceRole::Output);
        assert_eq!(role("output_norm.bias"), SliceRole::FinalNorm);
        assert_eq!(role("rope_freqs.weight"), SliceRole::Metadata);
        assert_eq!(role("blk.x.attn_q.weight"), SliceRole::Metadata);
        assert!(!SliceRole::Metadata.is_owned());
    }
}
