//! Writing GGUF fixtures' tensors as a Hugging Face safetensors folder.

use std::path::Path;

use lql_storage::codec;
use lql_storage::format::gguf::{GgufFile, GgufTensorInfo};

/// A tensor's values, decoded to F32.
pub fn decode_all(file: &GgufFile, t: &GgufTensorInfo) -> Vec<f32> {
    let mut out = vec![0.0f32; t.elems()];
    codec::decode_rows(t.dtype, file.view(t).bytes, t.shape[0], &mut out).unwrap();
    out
}

/// A GGUF tensor's shape as HF stores it (`[out, in]`: ggml's reversed).
pub fn hf_shape(t: &GgufTensorInfo) -> Vec<usize> {
    t.shape.iter().rev().copied().collect()
}

/// `dir/model.safetensors` holding these F32 tensors (name, shape, values).
pub fn write_f32_safetensors(dir: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) {
    use safetensors::tensor::{Dtype, TensorView};
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

/// GGUF row `h·D + 2i + s` came from HF row `h·D + s·half + i` (llama.cpp's permutation).
pub fn unpermute_rows(vals: &[f32], row_len: usize, heads: usize) -> Vec<f32> {
    let rows = vals.len() / row_len;
    let d = rows / heads;
    let half = d / 2;
    let mut out = vec![0.0f32; vals.len()];
    for h in 0..heads {
        for i in 0..half {
            for s in 0..2 {
                let g = h * d + 2 * i + s;
                let hf = h * d + s * half + i;
                out[hf * row_len..(hf + 1) * row_len]
                    .copy_from_slice(&vals[g * row_len..(g + 1) * row_len]);
            }
        }
    }
    out
}
