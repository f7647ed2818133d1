//! The bytes a forward pass reads, counted at the operand seam (`storage::meter`): an
//! expert bank counts only the experts the router picked, an embedding table only the
//! rows gathered — what EXPLAIN ANALYZE's `read=` shows.

use std::sync::Arc;

use lql_exec::Executor;
use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::meter::{Metered, ReadMeter};
use lql_storage::{Model, OperandKey, OperandSource, Role};

#[test]
fn a_forward_pass_reads_the_routed_experts_and_the_rows_it_gathers() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("mixtral.gguf");
    TinyModel::mixtral().write(&p).unwrap();
    let model = Arc::new(Model::open(&p).unwrap());
    let meter = Arc::new(ReadMeter::default());
    let source: Arc<dyn OperandSource> = Arc::new(Metered::new(model.clone(), meter.clone()));
    let exec = meter.paused(|| Executor::new(source, 1)).unwrap();
    assert!(
        meter.snapshot().is_empty(),
        "building the plan reads no payload"
    );

    let bytes = |k: OperandKey| model.view(k).map_or(0, |v| v.bytes.len() as u64);
    let n_layers = model.surface.n_layers;
    let banks = [Role::FfnGateExps, Role::FfnUpExps, Role::FfnDownExps];
    let (mut all_banks, mut dense) = (0u64, 0u64);
    for k in model.operands.keys() {
        match k.layer {
            Some(_) if banks.contains(&k.role) => all_banks += bytes(*k),
            Some(_) => dense += bytes(*k),
            None => {}
        }
    }
    let emb = model
        .view(OperandKey::global(Role::TokenEmbedding))
        .unwrap();
    let head = bytes(OperandKey::global(Role::Output));
    assert!(
        all_banks / 2 > dense,
        "the bound below tells the two cases apart"
    );

    // One token: each layer's router picks 2 of the 4 experts.
    let before = meter.snapshot();
    exec.session().extend_to_residual(&[5], None).unwrap();
    let read: u64 = meter.since(&before).values().sum();
    let routed = all_banks / 2;
    assert!(read >= routed, "read {read} < the routed experts' {routed}");
    assert!(
        read <= dense + routed + emb.row_bytes() as u64 + head,
        "read {read}: more than the dense operands ({dense}), the routed experts ({routed}) and one embedding row"
    );
    assert!(n_layers > 0);
}
