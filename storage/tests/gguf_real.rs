//! The reader, writer and importer against the real SmolLM2-135M-Instruct Q4_1 file.

mod common;

use lql_storage::format::gguf::{GgufFile, GgufWriter};
use lql_storage::model::{OperandKey, Role, SourceKind};
use lql_storage::surface::RopePairing;
use lql_storage::tokenizer_spec::TokenizerSpec;
use lql_storage::{DType, OperandSource};
use sha2::{Digest, Sha256};

#[test]
fn reads_smollm2_header_metadata_and_tensors() {
    let f = GgufFile::open(&common::smollm2()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(f.get_u32("llama.block_count").unwrap(), Some(30));
    assert_eq!(f.get_f32("llama.rope.freq_base").unwrap(), Some(100000.0));
    let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens[1], "<|im_start|>");
    let merges = f.get_array("tokenizer.ggml.merges").unwrap().unwrap();
    assert_eq!(merges.len(), 48900);
    let e = f.tensor("token_embd.weight").unwrap();
    assert_eq!(e.dtype, DType::Q8_0);
    assert_eq!(e.shape, &[576, 49152]);
    assert_eq!(e.bytes.len(), 576 / 32 * 34 * 49152);
    let total: u64 = f.tensors().iter().map(|t| t.nbytes).sum();
    assert_eq!(total, 96_576_768);
    // Wrong type is an error naming the key.
    let err = f.get_u32("general.architecture").unwrap_err().to_string();
    assert!(err.contains("general.architecture"), "{err}");
}

#[test]
fn rewriting_smollm2_reproduces_it_byte_for_byte() {
    let src = common::smollm2();
    let f = GgufFile::open(&src).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.gguf");
    GgufWriter::from_file(&f).unwrap().write(&out).unwrap();
    let h = |p: &std::path::Path| {
        let mut s = Sha256::new();
        s.update(std::fs::read(p).unwrap());
        format!("{:x}", s.finalize())
    };
    assert_eq!(h(&out), h(&src));
    assert_eq!(
        h(&out),
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
    // No temporary file left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn imports_smollm2_as_a_llama_model() {
    let m = lql_storage::import::open(&common::smollm2()).unwrap();
    assert_eq!(m.kind, SourceKind::Gguf);
    let s = &m.surface;
    assert_eq!(s.source_architecture, "llama");
    assert_eq!(
        (
            s.n_layers,
            s.hidden,
            s.ffn,
            s.n_heads,
            s.n_kv_heads,
            s.head_dim,
            s.vocab
        ),
        (30, 576, 1536, 9, 3, 64, 49152)
    );
    assert_eq!(s.context_length, 8192);
    assert_eq!(s.rope_theta, 100000.0);
    assert_eq!(s.rope_pairing, RopePairing::Adjacent);
    assert!((s.norm_eps - 1e-5).abs() < 1e-9);
    assert!(s.tied_head);
    assert!(!s.attn_bias);
    assert_eq!(s.embedding_scale, 1.0);
    assert_eq!(s.special.bos, Some(1));
    assert_eq!(s.special.eos, Some(2));
    assert_eq!(s.special.unk, Some(0));
    assert_eq!(s.special.pad, Some(2));
    assert!(!s.special.add_bos);
    // <|endoftext|> (0) also ends a turn; <|im_end|> is the eos itself.
    assert_eq!(s.special.eot, vec![0]);
    // 272 tensors: embedding, final norm, 30 × 9 per layer.
    assert_eq!(m.operands.len(), 272);
    let q = m.require(OperandKey::layer(29, Role::AttnQ)).unwrap();
    assert_eq!((q.dtype, q.shape), (DType::Q4_1, &[576usize, 576][..]));
    assert_eq!(q.rows(), 576);
    assert_eq!(q.row(575).len(), 18 * 20);
    let k = m.require(OperandKey::layer(0, Role::AttnK)).unwrap();
    assert_eq!(k.shape, &[576, 192]);
    assert!(m.view(OperandKey::global(Role::Output)).is_none());
    let n = m.require(OperandKey::global(Role::OutputNorm)).unwrap();
    assert_eq!(n.dtype, DType::F32);

    assert!(!m.tokenizer.is_built());
    let spec = m.tokenizer_spec().unwrap();
    match &*spec {
        TokenizerSpec::Gguf {
            vocab,
            chat_template,
        } => {
            assert_eq!(vocab.model, "gpt2");
            assert_eq!(vocab.pre.as_deref(), Some("smollm"));
            assert_eq!(vocab.tokens.len(), 49152);
            assert_eq!(vocab.tokens[2], "<|im_end|>");
            assert_eq!(vocab.merges.len(), 48900);
            assert_eq!(vocab.token_types.len(), 49152);
            assert_eq!(chat_template.as_ref().map(|t| t.len()), Some(368));
        }
        other => panic!("unexpected spec {other:?}"),
    }
    assert!(m.tokenizer.is_built());
}
