//! The bytes a device pass reads, reported to the source's read meter as the host pass's
//! views are counted (`storage::meter`): every stored matrix a kernel reads, the routed
//! experts only, one embedding row per token, the head when logits are made. The device
//! and the host count the same bytes per encoding for the same pass.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::gpu;
use lql_exec::backend::Backend;
use lql_exec::{Executor, LogitsWanted};
use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::meter::{Metered, ReadMeter};
use lql_storage::{Model, OperandSource};

/// What one pass over `ids` read on `backend` (None: the CPU), per encoding.
fn reads(
    model: &Arc<Model>,
    backend: Option<Arc<dyn Backend>>,
    ids: &[u32],
    want: LogitsWanted,
) -> BTreeMap<&'static str, u64> {
    let meter = Arc::new(ReadMeter::default());
    let source: Arc<dyn OperandSource> = Arc::new(Metered::new(model.clone(), meter.clone()));
    let exec = meter
        .paused(|| match backend {
            Some(b) => Executor::with_backend(source, b),
            None => Executor::new(source, 2),
        })
        .unwrap();
    assert!(
        meter.snapshot().is_empty(),
        "making the plan resident is not a read"
    );
    exec.session().extend(ids, want, None).unwrap();
    meter.snapshot()
}

#[test]
fn a_device_pass_reads_what_the_host_pass_reads() {
    let Some(g) = gpu() else { return };
    let dir = tempfile::tempdir().unwrap();
    for (name, tiny) in [
        ("llama", TinyModel::llama()),
        ("mixtral", TinyModel::mixtral()),
    ] {
        let p = dir.path().join(format!("{name}.gguf"));
        tiny.write(&p).unwrap();
        let model = Arc::new(Model::open(&p).unwrap());
        for want in [LogitsWanted::Last, LogitsWanted::Residual] {
            let ids = [5, 9, 2];
            let host = reads(&model, None, &ids, want);
            let device = reads(&model, Some(g.clone() as Arc<dyn Backend>), &ids, want);
            eprintln!("{name} {want:?}: host {host:?} · device {device:?}");
            assert!(!host.is_empty(), "{name}: the host pass read nothing");
            assert_eq!(device, host, "{name} {want:?}");
        }
    }
}
