//! Opening the SmolLM2-135M-Instruct GGUF: `GgufFile::open` (parse only) and
//! `import::open` (parse + architecture judgement + operand table), wall time per open,
//! and the heap each costs (a counting global allocator; printed before the timings).
//!
//! `cargo bench -p lql-storage --bench open`; model from `LQL_TEST_MODEL` or the catalogue.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn model_path() -> PathBuf {
    match std::env::var_os("LQL_TEST_MODEL") {
        Some(p) => PathBuf::from(p),
        None => lql_storage::catalogue::resolve("smollm2-135m-instruct", &mut |_| {})
            .expect("resolve the model through the catalogue"),
    }
}

/// (peak, retained) heap bytes of running `f`, keeping its result alive.
fn heap_of<T>(f: impl FnOnce() -> T) -> (usize, usize, T) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let t = f();
    (
        PEAK.load(Ordering::Relaxed) - before,
        LIVE.load(Ordering::Relaxed) - before,
        t,
    )
}

fn bench(c: &mut Criterion) {
    let path = model_path();
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
