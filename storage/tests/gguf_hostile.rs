//! Hostile GGUF inputs, built as byte buffers here: each must give a typed error naming the
//! field (and never panic or allocate by a claimed count).

use std::sync::Arc;

use lql_storage::format::gguf::{GgufFile, GgufWriter, MetaType, MetaValue};
use lql_storage::model::Backing;
use lql_storage::{DType, StorageError};

/// A little-endian GGUF byte builder that writes whatever it is told, valid or not.
#[derive(Default, Clone)]
struct B(Vec<u8>);

impl B {
    fn header(version: u32, tensors: u64, kvs: u64) -> B {
        let mut b = B::default();
        b.raw(b"GGUF");
        b.u32(version);
        b.u64(tensors);
        b.u64(kvs);
        b
    }
    fn raw(&mut self, x: &[u8]) -> &mut Self {
        self.0.extend_from_slice(x);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }
    fn kv_u32(&mut self, k: &str, v: u32) -> &mut Self {
        self.str(k).u32(4).u32(v)
    }
    fn kv_str(&mut self, k: &str, v: &str) -> &mut Self {
        self.str(k).u32(8).str(v)
    }
    fn tensor(&mut self, name: &str, shape: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(shape.len() as u32);
        for &d in shape {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad(&mut self, align: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn done(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// A valid file: one string kv, one F32 [4] tensor.
fn valid() -> Vec<u8> {
    B::header(3, 1, 1)
        .kv_str("general.name", "ok")
        .tensor("t", &[4], 0, 0)
        .pad(32)
        .zeros(16)
        .done()
}

fn parse(bytes: Vec<u8>) -> Result<GgufFile, StorageError> {
    GgufFile::from_bytes("hostile.gguf", Backing::Owned(Arc::new(bytes)))
}

/// Expect a Format error whose field contains `field`; returns the message.
#[track_caller]
fn format_err(bytes: Vec<u8>, field: &str) -> String {
    match parse(bytes) {
        Err(e @ StorageError::Format { .. }) => {
            let StorageError::Format {
                path,
                field: f,
                message,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(path.to_str(), Some("hostile.gguf"));
            assert!(
                f.contains(field),
                "field {f:?} should name {field:?} ({message})"
            );
            let shown = e.to_string();
            assert!(
                shown.contains("hostile.gguf") && shown.contains(field),
                "{shown}"
            );
            message.clone()
        }
        Err(other) => panic!("expected a Format error naming {field}, got {other:?}"),
        Ok(_) => panic!("expected a Format error naming {field}, parsed fine"),
    }
}

#[test]
fn the_valid_base_parses() {
    let f = parse(valid()).unwrap();
    assert_eq!(f.tensors()[0].name, "t");
    assert_eq!(f.tensor("t").unwrap().bytes.len(), 16);
}

#[test]
fn empty_input() {
    let m = format_err(Vec::new(), "magic");
    assert!(m.contains("truncated"), "{m}");
}

#[test]
fn wrong_magic() {
    let mut b = valid();
    b[0..4].copy_from_slice(b"GGML");
    assert!(format_err(b, "magic").contains("not a GGUF"));
}

#[test]
fn version_1_is_refused() {
    assert!(format_err(B::header(1, 0, 0).done(), "version").contains("obsolete"));
}

#[test]
fn version_99_is_refused() {
    assert!(format_err(B::header(99, 0, 0).done(), "version").contains("99"));
}

#[test]
fn big_endian_is_refused() {
    assert!(format_err(B::header(0x0300_0000, 0, 0).done(), "version").contains("big-endian"));
}

#[test]
fn version_2_is_read() {
    let mut b = valid();
    b[4] = 2;
    assert_eq!(parse(b).unwrap().version(), 2);
}

#[test]
fn truncated_in_header() {
    let b = valid();
    format_err(b[..6].to_vec(), "version");
    format_err(b[..12].to_vec(), "tensor_count");
    format_err(b[..20].to_vec(), "kv_count");
}

#[test]
fn tensor_count_2_pow_63() {
    let m = format_err(B::header(3, 1 << 63, 0).done(), "tensor_count");
    assert!(m.contains("negative"), "{m}");
}

#[test]
fn kv_count_2_pow_63() {
    format_err(B::header(3, 0, 1 << 63).done(), "kv_count");
}

#[test]
fn counts_above_the_limits() {
    assert!(format_err(B::header(3, 1 << 40, 0).done(), "tensor_count").contains("limit"));
    assert!(format_err(B::header(3, 0, u32::MAX as u64).done(), "kv_count").contains("limit"));
}

#[test]
fn kv_count_larger_than_the_file_holds() {
    // 900,000 claimed entries, one present: fails when the bytes run out.
    let b = B::header(3, 0, 900_000).kv_u32("a.b", 1).done();
    assert!(format_err(b, "metadata key #1").contains("truncated"));
}

#[test]
fn truncated_in_metadata() {
    let full = B::header(3, 0, 1).kv_str("general.name", "hello").done();
    for cut in 24..full.len() {
        assert!(parse(full[..cut].to_vec()).is_err(), "cut at {cut}");
    }
    format_err(full[..30].to_vec(), "metadata key #0");
    format_err(full[..full.len() - 2].to_vec(), "general.name");
}

#[test]
fn string_length_past_the_end() {
    let b = B::header(3, 0, 1).u64(1 << 40).raw(b"abc").done();
    assert!(format_err(b, "metadata key #0").contains("limit"));
    let b = B::header(3, 0, 1).u64(500).raw(b"abc").done();
    assert!(format_err(b, "metadata key #0").contains("past the end"));
    let b = B::header(3, 0, 1)
        .str("k")
        .u32(8)
        .u64(100)
        .raw(b"short")
        .done();
    assert!(format_err(b, "k").contains("past the end"));
}

#[test]
fn string_value_longer_than_the_limit() {
    let b = B::header(3, 0, 1)
        .str("k")
        .u32(8)
        .u64(2_000_000)
        .zeros(2_000_000)
        .done();
    assert!(format_err(b, "k").contains("limit"));
}

#[test]
fn invalid_utf8_key() {
    let b = B::header(3, 0, 1)
        .u64(2)
        .raw(&[0xff, 0xfe])
        .u32(4)
        .u32(1)
        .done();
    assert!(format_err(b, "metadata key #0").contains("UTF-8"));
}

#[test]
fn unknown_value_type() {
    let b = B::header(3, 0, 1).str("k").u32(13).u32(0).done();
    assert!(format_err(b, "k").contains("unknown metadata value type 13"));
}

#[test]
fn bool_that_is_not_0_or_1() {
    let b = B::header(3, 0, 1).str("k").u32(7).raw(&[2]).done();
    format_err(b, "k");
}

#[test]
fn duplicate_keys() {
    let b = B::header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2).done();
    assert!(format_err(b, "a.b").contains("duplicate"));
}

#[test]
fn array_count_2_pow_63() {
    let b = B::header(3, 0, 1)
        .str("arr")
        .u32(9)
        .u32(4)
        .u64(1 << 63)
        .done();
    format_err(b, "arr");
}

#[test]
fn array_longer_than_the_file() {
    let b = B::header(3, 0, 1)
        .str("arr")
        .u32(9)
        .u32(6)
        .u64(1000)
        .zeros(40)
        .done();
    assert!(format_err(b, "arr").contains("past the end"));
    // Strings: the 3rd of 1000 is cut.
    let b = B::header(3, 0, 1)
        .str("arr")
        .u32(9)
        .u32(8)
        .u64(1000)
        .str("a")
        .str("b")
        .u64(5)
        .done();
    format_err(b, "arr");
}

#[test]
fn array_of_unknown_element_type() {
    let b = B::header(3, 0, 1).str("arr").u32(9).u32(77).u64(1).done();
    format_err(b, "arr");
}

#[test]
fn nesting_too_deep() {
    let mut b = B::header(3, 0, 1);
    b.str("deep").u32(9);
    for _ in 0..70 {
        b.u32(9).u64(1);
    }
    b.u32(4).u64(0);
    assert!(format_err(b.done(), "deep").contains("nested"));
}

#[test]
fn nesting_within_the_limit_is_read() {
    let mut b = B::header(3, 0, 1);
    b.str("nest").u32(9);
    for _ in 0..10 {
        b.u32(9).u64(1);
    }
    b.u32(4).u64(2).u32(7).u32(8);
    let f = parse(b.done()).unwrap();
    let mut v = f.get("nest").unwrap().clone();
    for _ in 0..10 {
        v = v.as_array().unwrap().iter().next().unwrap();
    }
    let inner = v.as_array().unwrap();
    assert_eq!(inner.to_i64(), Some(vec![7, 8]));
}

#[test]
fn alignment_0() {
    let b = B::header(3, 0, 1).kv_u32("general.alignment", 0).done();
    assert!(format_err(b, "general.alignment").contains("power of two"));
}

#[test]
fn alignment_3() {
    let b = B::header(3, 0, 1).kv_u32("general.alignment", 3).done();
    format_err(b, "general.alignment");
}

#[test]
fn alignment_of_the_wrong_type() {
    let b = B::header(3, 0, 1).kv_str("general.alignment", "32").done();
    format_err(b, "general.alignment");
}

#[test]
fn alignment_64_is_honoured() {
    let b = B::header(3, 1, 1)
        .kv_u32("general.alignment", 64)
        .tensor("t", &[4], 0, 0)
        .pad(64)
        .zeros(16)
        .done();
    let f = parse(b).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_start() % 64, 0);
}

#[test]
fn truncated_in_tensor_infos() {
    let full = valid();
    let infos_end = full.len() - 16;
    for cut in 24..infos_end {
        let e = parse(full[..cut].to_vec()).unwrap_err();
        assert!(
            matches!(e, StorageError::Format { .. }),
            "cut at {cut}: {e:?}"
        );
    }
    format_err(full[..62].to_vec(), "tensor info #0 name");
}

#[test]
fn nine_dimensions() {
    let b = B::header(3, 1, 0).tensor("t", &[1; 9], 0, 0).done();
    assert!(format_err(b, "tensor t n_dims").contains('9'));
}

#[test]
fn zero_dimensions_and_zero_extent() {
    format_err(
        B::header(3, 1, 0).tensor("t", &[], 0, 0).done(),
        "tensor t n_dims",
    );
    format_err(
        B::header(3, 1, 0).tensor("t", &[4, 0], 0, 0).done(),
        "tensor t shape",
    );
}

#[test]
fn unknown_ggml_type() {
    let b = B::header(3, 1, 0)
        .tensor("t", &[4], 99, 0)
        .pad(32)
        .zeros(64)
        .done();
    assert!(format_err(b, "tensor t type").contains("99"));
}

#[test]
fn known_but_unsupported_ggml_type() {
    let b = B::header(3, 1, 0)
        .tensor("t", &[32], 9, 0)
        .pad(32)
        .zeros(64)
        .done();
    match parse(b) {
        Err(StorageError::Unsupported(m)) => {
            assert!(m.contains("tensor t") && m.contains("Q8_1"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn duplicate_tensor_names() {
    let b = B::header(3, 2, 0)
        .tensor("t", &[4], 0, 0)
        .tensor("t", &[4], 0, 32)
        .pad(32)
        .zeros(64)
        .done();
    assert!(format_err(b, "tensor t").contains("duplicate"));
}

#[test]
fn tensor_name_too_long() {
    let name = "n".repeat(64);
    let b = B::header(3, 1, 0).tensor(&name, &[4], 0, 0).done();
    format_err(b, "tensor info #0 name");
}

#[test]
fn misaligned_offset() {
    let b = B::header(3, 1, 0)
        .tensor("t", &[4], 0, 8)
        .pad(32)
        .zeros(64)
        .done();
    assert!(format_err(b, "tensor t offset").contains("alignment"));
}

#[test]
fn offset_past_the_end() {
    let b = B::header(3, 1, 0)
        .tensor("t", &[4], 0, 1 << 20)
        .pad(32)
        .zeros(16)
        .done();
    assert!(format_err(b, "tensor t offset").contains("past the end"));
    // Offset so large that data_start + offset overflows.
    let b = B::header(3, 1, 0)
        .tensor("t", &[4], 0, u64::MAX - 31)
        .pad(32)
        .done();
    format_err(b, "tensor t offset");
}

#[test]
fn tensor_data_cut_short() {
    let b = valid();
    let n = b.len();
    assert!(format_err(b[..n - 1].to_vec(), "tensor t offset").contains("past the end"));
}

#[test]
fn byte_size_overflowing_u64() {
    // 2^62 f32 elements = 2^64 bytes.
    let b = B::header(3, 1, 0).tensor("t", &[1 << 62], 0, 0).done();
    assert!(format_err(b, "tensor t shape").contains("overflows"));
    // Element count itself overflows.
    let b = B::header(3, 1, 0)
        .tensor("t", &[1 << 40, 1 << 40], 0, 0)
        .done();
    assert!(format_err(b, "tensor t shape").contains("overflows"));
}

#[test]
fn row_not_a_whole_number_of_blocks() {
    let b = B::header(3, 1, 0)
        .tensor("t", &[33, 2], 2, 0)
        .pad(32)
        .zeros(64)
        .done();
    assert!(format_err(b, "tensor t shape").contains("blocks"));
}

#[test]
fn overlapping_tensors() {
    let b = B::header(3, 2, 0)
        .tensor("a", &[16], 0, 0)
        .tensor("b", &[4], 0, 32)
        .pad(32)
        .zeros(64)
        .done();
    assert!(format_err(b, "tensor b offset").contains("overlaps"));
}

#[test]
fn wrong_typed_getters_name_the_key() {
    let f = parse(B::header(3, 0, 1).kv_str("a.count", "7").done()).unwrap();
    match f.get_u32("a.count") {
        Err(StorageError::Format { field, .. }) => assert_eq!(field, "a.count"),
        other => panic!("{other:?}"),
    }
    assert_eq!(f.get_u32("missing").unwrap(), None);
}

/// Every prefix of a richer valid file, and many single-byte corruptions of it, give an
/// error or a file — never a panic.
#[test]
fn truncations_and_byte_flips_never_panic() {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama").unwrap();
    w.add_kv("x.f", 1.5f32).unwrap();
    w.add_kv("x.b", true).unwrap();
    w.add_kv("x.s", MetaValue::str_array(["a", "bc", "def"]))
        .unwrap();
    w.add_kv(
        "x.n",
        MetaValue::array(
            MetaType::Array,
            &[MetaValue::i32_array(&[1, 2]), MetaValue::f32_array(&[0.5])],
        )
        .unwrap(),
    )
    .unwrap();
    w.add_f32_tensor("a", &[4, 2], &[1.0; 8]).unwrap();
    w.add_tensor("q", DType::Q8_0, &[32], vec![0u8; 34])
        .unwrap();
    let good = w.to_bytes();
    let f = parse(good.clone()).unwrap();
    assert_eq!(f.tensors().len(), 2);
    for cut in 0..good.len() {
        let _ = parse(good[..cut].to_vec());
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..4000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut b = good.clone();
        let i = (seed % b.len() as u64) as usize;
        b[i] = (seed >> 32) as u8;
        if let Ok(f) = parse(b) {
            // Whatever parsed must be safe to view and iterate.
            for t in f.tensors() {
                let _ = f.view(t);
            }
            for kv in f.metadata() {
                if let Some(a) = kv.value.as_array() {
                    let _ = a.iter().count();
                }
            }
        }
    }
}

#[test]
fn invalid_utf8_inside_a_string_array() {
    // Short strings (the one-call fast path): the bad one is the second.
    let b = B::header(3, 0, 1)
        .str("toks")
        .u32(9)
        .u32(8)
        .u64(3)
        .str("ab")
        .u64(2)
        .raw(&[0xc3, 0x28])
        .str("cd")
        .done();
    let m = format_err(b, "toks");
    assert!(m.contains("UTF-8"), "{m}");
    // A string cut in the middle of a multi-byte sequence, followed by another string.
    let b = B::header(3, 0, 1)
        .str("toks")
        .u32(9)
        .u32(8)
        .u64(2)
        .u64(1)
        .raw(&[0xe2])
        .str("\u{82}")
        .done();
    format_err(b, "toks");
    // A long string (length prefix with a byte >= 0x80: checked on its own).
    let mut long = vec![b'a'; 200];
    long[150] = 0xff;
    let b = B::header(3, 0, 1)
        .str("toks")
        .u32(9)
        .u32(8)
        .u64(2)
        .str("ok")
        .u64(200)
        .raw(&long)
        .done();
    format_err(b, "toks");
    // Valid mixed lengths and multi-byte text parse.
    let long_ok = "é".repeat(100);
    let b = B::header(3, 0, 1)
        .str("toks")
        .u32(9)
        .u32(8)
        .u64(3)
        .str("Ġthe")
        .str(&long_ok)
        .str("日本")
        .done();
    let f = parse(b).unwrap();
    let v = f.get_str_array("toks").unwrap().unwrap();
    assert_eq!(v, vec!["Ġthe".to_string(), long_ok, "日本".into()]);
}
