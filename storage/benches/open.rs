//! Opening the SmolLM2-135M-Instruct GGUF: `GgufFile::open` (parse only) and
//! `import::open` (parse + architecture judgement + operand table), wall time per open,
//! and the heap each costs (a counting global allocator; printed before the timings).
//!
//! `cargo bench -p lql-storage --bench open`; model from `LQL_TEST_MODEL` or the catalogue.

use criterion::{criterion_group, criterion_main, Criterion};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/common/heap.rs"]
mod heap;

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

/// (peak, retained) heap bytes of running `f`, keeping its result alive.
fn heap_of<T>(f: impl FnOnce() -> T) -> (usize, usize, T) {
    let before = heap::live();
    heap::reset_peak();
    let t = f();
    (heap::peak() - before, heap::live() - before, t)
}

fn bench(c: &mut Criterion) {
    let path = common::smollm2();
    let (p, l, f) = heap_of(|| lql_storage::format::gguf::GgufFile::open(&path).unwrap());
    println!("heap GgufFile::open: peak {p} B, retained {l} B");
    drop(f);
    let (p, l, m) = heap_of(|| lql_storage::import::open(&path).unwrap());
    println!("heap import::open: peak {p} B, retained {l} B");
    let (p, l, spec) = heap_of(|| m.tokenizer_spec().unwrap());
    println!("heap tokenizer_spec (first call): peak {p} B, retained {l} B");
    drop((spec, m));

    c.bench_function("GgufFile::open smollm2", |b| {
        b.iter(|| lql_storage::format::gguf::GgufFile::open(&path).unwrap())
    });
    c.bench_function("import::open smollm2", |b| {
        b.iter(|| lql_storage::import::open(&path).unwrap())
    });
    c.bench_function("import::open + tokenizer_spec smollm2", |b| {
        b.iter(|| {
            let m = lql_storage::import::open(&path).unwrap();
            m.tokenizer_spec().unwrap()
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
