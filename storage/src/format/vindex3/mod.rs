//! The VINDEX3 container (seed 002): the graph shape we write and read, the bank shape we
//! recognise, version detection, verification and artifact-only introspection.
//!
//! ```text
//! <container>/
//! ├── index.json                 Vindex3Index, schema 4, the sole root authority (written last)
//! ├── system_graph.json          SystemGraph schema 6: component `text` with its execution
//! │                              surface, operand table, per-layer attention policy,
//! │                              operation program and continuation state (`program`),
//! │                              logical objects, edges
//! ├── segments/
//! │   ├── text.embedding.bin     [u64 LE header len][header JSON, space-padded][payload]
//! │   ├── text.decoder_stack.bin
//! │   ├── text.final_norm.bin
//! │   └── text.output_head.bin   only when the head is not tied to the embedding
//! └── tokenizer_spec.json, chat_template.jinja, special_tokens_map.json,
//!     generation_config.json, tokenizer.json (for tokenizer.json sources)
//!                                capability snapshot (serving, not execution)
//! ```
//!
//! Layout decisions (documented once, here):
//! - **Alignment.** The payload starts on a [`ALIGN`]-byte (32) boundary of the file (the
//!   header is padded with spaces; seed 002 fixes no alignment for tensor-table segments —
//!   its 64-byte rule is for LYRW regions, §6) and every tensor starts on a 32-byte
//!   boundary of the payload, so f32/f16 operands can be reinterpreted zero-copy
//!   and loaded with aligned AVX loads. When a tensor's length is not a multiple of 32 the
//!   gap before the next tensor is zero-filled. Readers accept any tensor offset.
//! - **Hashes.** `payload_sha256` is the SHA-256 of the tensors' bytes concatenated in table
//!   order, excluding alignment gaps: for a SOURCE extract it equals the SHA-256 of the
//!   source tensors' bytes. `segment_sha256` is the SHA-256 of the whole segment file.
//!   `tensor_sha256` (one per tensor) lets VERIFY name the tensor and byte range that drifted.
//! - **Crash safety.** EXTRACT refuses a target that exists and is not an empty directory.
//!   It builds the container in a sibling `<out>.tmp-<pid>-<nanos>` directory (segments,
//!   then the graph, then `index.json`, each written through `fsutil::AtomicFile`: an
//!   exclusive temporary file, fsynced and renamed), fsyncs it and renames the directory to
//!   `<out>` last. A crash leaves either no
//!   `<out>` or a complete one; the leftover temporary directory has no `index.json` unless
//!   it is itself complete.
//! - **Bank shape.** A container whose index names `moe_manifest` and no graph is written
//!   by [`bank_writer`] (`EXTRACT … SHAPE BANK`) and bound by [`bank_reader`] (the spine
//!   segment plus one LYRW v2 file per layer, experts read in place); STATS, SHOW TENSORS
//!   and VERIFY read its LYRW v2 files structurally ([`lyrw`]).
//! - **Open is O(1).** [`open_model`] parses `index.json`, the graph and the segment
//!   headers and maps the segments; it never hashes payloads ([`verify()`] does) and builds
//!   the tokenizer lazily.
//! - **Derived containers and COMPACT.** [`extract_stamped`] stamps `authority: derived`,
//!   `derived_from_model` and `applied_patches` (COMPILE); [`compact`] rewrites a container
//!   keeping its identity and names every file it discards or carries.

pub mod against;
pub mod artifact;
mod atomic;
pub mod bank_reader;
pub mod bank_writer;
pub mod compact;
mod consistency;
mod encode;
pub mod graph;
pub mod index;
mod inspect;
pub mod labels;
pub mod lyrw;
pub mod meter;
pub mod moe_manifest;
pub mod program;
pub mod provenance;
mod reader;
pub mod represent;
pub mod segment;
pub mod variants;
mod verify;
mod writer;

pub use bank_writer::extract_bank;
pub use encode::ExtractEncoding;
pub use graph::SystemGraph;
pub use index::{detect, ContainerShape, Vindex3Index};
pub use inspect::{
    show_components, show_representations, show_tensors, stats, ComponentRow, ContainerStats,
    RepresentationRow, TensorRow,
};
pub use reader::{open_model, open_model_profile, Container};
pub use verify::{all_ok, verify, VerifyRow, VerifyStatus};
pub use writer::{
    extract, extract_cancellable, extract_stamped, Derivation, ExtractProgress, ExtractReport,
};

/// `index.json` schema this build writes (seed 002 §12: VINDEX3 spans 3–4).
pub const INDEX_SCHEMA: u32 = 4;
/// `index.json` schemas this build reads as VINDEX3.
pub const INDEX_SCHEMAS_READ: std::ops::RangeInclusive<u64> = 3..=4;
/// SystemGraph schema this build writes.
pub const GRAPH_SCHEMA: u32 = 6;
/// Segment header schema this build writes and reads.
pub const SEGMENT_HEADER_SCHEMA: u32 = 1;
/// Alignment of the payload start and of every tensor inside it, in bytes.
pub const ALIGN: u64 = 32;
/// The only component this build writes: the text decoder.
pub const TEXT_COMPONENT: &str = "text";
