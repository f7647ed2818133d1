//! Hugging Face safetensors folders: config.json plus one or several *.safetensors files
//! (listed by `model.safetensors.index.json` when sharded), each mmapped and parsed with
//! the `safetensors` crate. Tensors are exposed zero-copy with their shape converted to
//! ggml order (`shape[0]` = row length: an HF `[out, in]` matrix is ggml `[in, out]`).
//!
//! `config.json` is read in both spellings transformers has used: classic (`rope_theta`,
//! `torch_dtype`) and 5.x (`rope_parameters: {rope_theta}`, `dtype`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::fsutil;
use crate::model::{Backing, TensorView};

/// The fields of `config.json` the importers use.
#[derive(Debug, Clone, PartialEq)]
pub struct HfConfig {
    pub architectures: Vec<String>,
    pub model_type: Option<String>,
    pub hidden_size: Option<u64>,
    pub intermediate_size: Option<u64>,
    pub num_hidden_layers: Option<u64>,
    pub num_attention_heads: Option<u64>,
    pub num_key_value_heads: Option<u64>,
    pub head_dim: Option<u64>,
    /// `rms_norm_eps`, `layer_norm_epsilon` (GPT-2) or `layer_norm_eps` (GPT-NeoX).
    pub norm_eps: Option<f64>,
    /// `rope_theta`, `rope_parameters.rope_theta` or `rotary_emb_base` (GPT-NeoX).
    pub rope_theta: Option<f64>,
    /// The RoPE scaling object: `rope_scaling`, or (transformers 5) `rope_parameters`,
    /// whose `rope_type` may be `default`.
    pub rope_scaling: Option<Value>,
    pub max_position_embeddings: Option<u64>,
    pub vocab_size: Option<u64>,
    pub tie_word_embeddings: Option<bool>,
    pub hidden_act: Option<String>,
    pub attention_bias: Option<bool>,
    /// `torch_dtype`, or `dtype`.
    pub dtype: Option<String>,
    pub bos_token_id: Option<u32>,
    /// One or several ids.
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    /// The whole document, for anything else.
    pub raw: Value,
}

impl HfConfig {
    /// Parse `config.json` text; `path` names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<HfConfig> {
        let raw: Value = serde_json::from_str(text).map_err(|e| StorageError::Format {
            path: path.to_path_buf(),
            offset: 0,
            field: "config.json".into(),
            message: format!(
                "invalid JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ),
        })?;
        if !raw.is_object() {
            return Err(StorageError::Format {
                path: path.to_path_buf(),
                offset: 0,
                field: "config.json".into(),
                message: "expected a JSON object".into(),
            });
        }
        // A multimodal checkpoint (Gemma 3's) keeps its language model's fields under
        // `text_config`: they are read as if at the top, where the top lacks them.
        let raw = with_text_config(raw);
        // GPT-2 spells the sizes its own way; the first field present is read.
        let u = |k: &str| {
            let alias = match k {
                "hidden_size" => "n_embd",
                "num_hidden_layers" => "n_layer",
                "num_attention_heads" => "n_head",
                "intermediate_size" => "n_inner",
                "max_position_embeddings" => "n_positions",
                other => other,
            };
            raw.get(k)
                .and_then(Value::as_u64)
                .or_else(|| raw.get(alias).and_then(Value::as_u64))
        };
        let f = |k: &str| raw.get(k).and_then(Value::as_f64);
        let s = |k: &str| raw.get(k).and_then(Value::as_str).map(str::to_string);
        let b = |k: &str| raw.get(k).and_then(Value::as_bool);
        let rope_params = raw.get("rope_parameters");
        let rope_theta = f("rope_theta")
            .or_else(|| {
                rope_params
                    .and_then(|p| p.get("rope_theta"))
                    .and_then(Value::as_f64)
            })
            .or_else(|| f("rotary_emb_base"));
        let rope_scaling = match raw.get("rope_scaling") {
            Some(Value::Null) | None => rope_params.cloned(),
            Some(v) => Some(v.clone()),
        };
        let ids = |v: Option<&Value>| -> Vec<u32> {
            match v {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .into_iter()
                    .collect(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                    .collect(),
                _ => Vec::new(),
            }
        };
        Ok(HfConfig {
            architectures: raw
                .get("architectures")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            model_type: s("model_type"),
            hidden_size: u("hidden_size"),
            intermediate_size: u("intermediate_size"),
            num_hidden_layers: u("num_hidden_layers"),
            num_attention_heads: u("num_attention_heads"),
            num_key_value_heads: u("num_key_value_heads"),
            head_dim: u("head_dim"),
            norm_eps: f("rms_norm_eps")
                .or_else(|| f("layer_norm_epsilon"))
                .or_else(|| f("layer_norm_eps")),
            rope_theta,
            rope_scaling,
            max_position_embeddings: u("max_position_embeddings"),
            vocab_size: u("vocab_size"),
            tie_word_embeddings: b("tie_word_embeddings"),
            hidden_act: s("hidden_activation")
                .or_else(|| s("hidden_act"))
                .or_else(|| s("activation_function")),
            attention_bias: b("attention_bias"),
            dtype: s("torch_dtype").or_else(|| s("dtype")),
            bos_token_id: ids(raw.get("bos_token_id")).first().copied(),
            eos_token_ids: ids(raw.get("eos_token_id")),
            pad_token_id: ids(raw.get("pad_token_id")).first().copied(),
            raw,
        })
    }
}

/// `raw` with the fields of its `text_config` object added where the top level lacks them.
fn with_text_config(mut raw: Value) -> Value {
    let Some(Value::Object(text)) = raw.get("text_config").cloned() else {
        return raw;
    };
    if let Value::Object(top) = &mut raw {
        for (k, v) in text {
            top.entry(k).or_insert(v);
        }
    }
    raw
}

/// One tensor of a safetensors folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StTensor {
    pub name: String,
    pub dtype: DType,
    /// ggml order (the safetensors shape reversed).
    pub shape: Vec<usize>,
    /// Index into [`HfFolder::backings`].
    pub file: usize,
    /// Absolute byte offset in that file.
    pub offset: usize,
    pub len: usize,
}

/// An opened Hugging Face folder.
#[derive(Debug, Clone)]
pub struct HfFolder {
    pub dir: PathBuf,
    pub config: HfConfig,
    /// The safetensors files, in the order of [`HfFolder::backings`].
    pub files: Vec<PathBuf>,
    pub backings: Vec<Backing>,
    /// Tensors, sorted by name.
    pub tensors: Vec<StTensor>,
}

impl HfFolder {
    /// Open a folder holding `config.json` and safetensors weights.
    pub fn open(dir: &Path) -> Result<HfFolder> {
        let cfg_path = fsutil::resolve_inside(dir, "config.json", dir, "config.json")?;
        let text = fsutil::read_capped_text(&cfg_path, "config.json", fsutil::limits::CONFIG_JSON)?;
        let config = HfConfig::parse(&cfg_path, &text)?;
        let files = weight_files(dir)?;
        let mut backings = Vec::with_capacity(files.len());
        let mut tensors = Vec::new();
        // Names seen in earlier files: one hash lookup per tensor (a header may list 100k).
        let mut seen: HashSet<String> = HashSet::new();
        for (fi, path) in files.iter().enumerate() {
            let map = crate::mapped::map_file(path, "safetensors file")?;
            let backing = Backing::Mmap(map);
            {
                let bytes = backing.bytes();
                let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| {
                    StorageError::Format {
                        path: path.clone(),
                        offset: 0,
                        field: "safetensors header".into(),
                        message: e.to_string(),
                    }
                })?;
                for (i, (name, view)) in st.iter().enumerate() {
                    crate::interrupt::every(i as u64, || {
                        format!("{}: safetensors header", path.display())
                    })?;
                    let dtype = match view.dtype() {
                        safetensors::Dtype::F32 => DType::F32,
                        safetensors::Dtype::F16 => DType::F16,
                        safetensors::Dtype::BF16 => DType::BF16,
                        other => {
                            return Err(StorageError::Unsupported(format!(
                                "not supported yet: tensor {name} in {} has safetensors dtype {other:?}",
                                path.display()
                            )))
                        }
                    };
                    let mut shape: Vec<usize> = view.shape().iter().rev().copied().collect();
                    if shape.is_empty() {
                        shape.push(1);
                    }
                    let data = view.data();
                    let offset = data.as_ptr() as usize - bytes.as_ptr() as usize;
                    if !seen.insert(name.to_string()) {
                        return Err(StorageError::Format {
                            path: path.clone(),
                            offset: 0,
                            field: format!("tensor {name}"),
                            message: "tensor appears in more than one safetensors file".into(),
                        });
                    }
                    tensors.push(StTensor {
                        name: name.to_string(),
                        dtype,
                        shape,
                        file: fi,
                        offset,
                        len: data.len(),
                    });
                }
            }
            backings.push(backing);
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(HfFolder {
            dir: dir.to_path_buf(),
            config,
            files,
            backings,
            tensors,
        })
    }

    /// The tensor called `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&StTensor> {
        self.tensors
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.tensors[i])
    }

    /// Zero-copy view of a tensor.
    pub fn view<'a>(&'a self, t: &'a StTensor) -> TensorView<'a> {
        TensorView {
            dtype: t.dtype,
            shape: &t.shape,
            bytes: &self.backings[t.file].bytes()[t.offset..t.offset + t.len],
        }
    }
}

/// The weight files of a folder: those named by `model.safetensors.index.json`, else every
/// `*.safetensors` in it (sorted).
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    let mut out: Vec<PathBuf> = Vec::new();
    if std::fs::symlink_metadata(&index).is_ok() {
        let index = fsutil::resolve_inside(dir, "model.safetensors.index.json", dir, "index")?;
        let text = fsutil::read_capped_text(
            &index,
            "model.safetensors.index.json",
            fsutil::limits::SAFETENSORS_INDEX,
        )?;
        let mut distinct: HashSet<PathBuf> = HashSet::new();
        let v: Value = serde_json::from_str(&text).map_err(|e| StorageError::Format {
            path: index.clone(),
            offset: 0,
            field: "model.safetensors.index.json".into(),
            message: e.to_string(),
        })?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| StorageError::Format {
                path: index.clone(),
                offset: 0,
                field: "weight_map".into(),
                message: "missing or not an object".into(),
            })?;
        for (tensor, file) in map {
            let name = file.as_str().unwrap_or("");
            let plain = !name.is_empty()
                && Path::new(name)
                    .file_name()
                    .map(|f| f == name)
                    .unwrap_or(false)
                && name != ".."
                && name != ".";
            if !plain {
                return Err(StorageError::Format {
                    path: index.clone(),
                    offset: 0,
                    field: format!("weight_map.{tensor}"),
                    message: format!("{file} is not a plain file name in the folder"),
                });
            }
            let p = fsutil::resolve_inside(dir, name, &index, &format!("weight_map.{tensor}"))?;
            if distinct.insert(p.clone()) {
                out.push(p);
            }
        }
    } else {
        let rd = std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| StorageError::io(dir, e))?;
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "safetensors") {
                // Symlinks are followed only to files inside the folder.
                let name = entry.file_name();
                let real =
                    fsutil::resolve_inside(dir, &name.to_string_lossy(), dir, "weight file")?;
                fsutil::require_regular(&real, "safetensors file")?;
                out.push(real);
            }
        }
        out.sort();
    }
    if out.is_empty() {
        return Err(StorageError::Invalid(format!(
            "{}: no *.safetensors weight files in the folder",
            dir.display()
        )));
    }
    Ok(out)
}
