//! Where the forward pass runs: the session's `backend` setting (`SET backend = …`), the
//! binding's choice (`USE … BACKEND …`), building the bound model's executor on the CPU
//! or the GPU backend (`auto`: the GPU when an adapter can run the model, else the CPU),
//! and `SHOW BACKENDS`.

use std::sync::Arc;

use lql_exec::{Backend, Executor};
use lql_gpu::GpuBackend;
use lql_grammar::{BackendChoice, Setting};
use lql_planner::LogicalPlan;
use lql_storage::OperandSource;

use super::datum::Datum;
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// An executor over `source` on the backend `choice` names.
pub(crate) fn executor(source: Arc<dyn OperandSource>, choice: BackendChoice) -> Result<Executor> {
    match choice {
        BackendChoice::Cpu => Ok(Executor::new(source, 0)?),
        BackendChoice::Gpu => {
            let gpu: Arc<dyn Backend> = Arc::new(GpuBackend::new(None, 0)?);
            Ok(Executor::with_backend(source, gpu)?)
        }
        BackendChoice::Auto => match GpuBackend::new(None, 0) {
            Ok(g) => {
                let gpu: Arc<dyn Backend> = Arc::new(g.with_fallback(true));
                Ok(Executor::with_backend(source, gpu)?)
            }
            Err(_) => Ok(Executor::new(source, 0)?),
        },
    }
}

/// `gpu` needs an adapter: refused up front (before anything changes) when there is none.
pub(crate) fn check_available(choice: BackendChoice) -> Result<()> {
    if choice == BackendChoice::Gpu {
        GpuBackend::new(None, 1)?;
    }
    Ok(())
}

/// `SetSetting`: `SET backend = 'cpu' | 'gpu' | 'auto'` — for the bound model (its
/// executor is rebuilt on next use) and for later USE statements.
pub(crate) fn set(cx: &mut Cx<'_>, name: &str, value: &str) -> Result<Datum> {
    let LogicalPlan::Set(Setting::Backend(choice)) = cx.plan else {
        return Err(Error::internal(format!("SetSetting {name} outside SET")));
    };
    let choice = *choice;
    check_available(choice)?;
    cx.engine.backend = choice;
    if let Some(b) = cx.engine.bound.as_mut() {
        b.backend = choice;
        b.executor = None;
    }
    cx.engine.version += 1;
    let mut rows = Rows::new(super::result_columns(cx.plan));
    rows.push(vec![Value::from(name), Value::from(value)]);
    Ok(Datum::Rows(rows))
}

/// The backend the bound model's passes run on now (`None`: no executor built yet).
fn running(cx: &Cx<'_>) -> Option<&'static str> {
    let exec = cx.engine.bound.as_ref()?.executor.as_ref()?;
    Some(if exec.device().is_some() {
        "gpu"
    } else {
        "cpu"
    })
}

/// `SHOW BACKENDS`: the CPU and every GPU adapter, with the one this session runs on.
pub(crate) fn show(cx: &Cx<'_>) -> Rows {
    let choice = cx
        .engine
        .bound
        .as_ref()
        .map_or(cx.engine.backend, |b| b.backend);
    let adapters = lql_gpu::adapters();
    let active = running(cx).unwrap_or(match choice {
        BackendChoice::Cpu => "cpu",
        BackendChoice::Gpu => "gpu",
        BackendChoice::Auto if adapters.is_empty() => "cpu",
        BackendChoice::Auto => "gpu",
    });
    let mut rows = Rows::new(super::result_columns(cx.plan));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    rows.push(vec![
        Value::from("cpu"),
        Value::from(format!("host CPU ({threads} threads)")),
        Value::from("native"),
        Value::from("cpu"),
        Value::from(""),
        Value::from(active == "cpu"),
    ]);
    for (i, a) in adapters.iter().enumerate() {
        let kind = if a.kind == "cpu" {
            "cpu-emulated".to_string()
        } else {
            a.kind.clone()
        };
        rows.push(vec![
            Value::from("gpu"),
            Value::from(a.name.as_str()),
            Value::from(a.api.as_str()),
            Value::from(kind),
            Value::from(a.driver.as_str()),
            // The GPU backend runs on the first (best) adapter.
            Value::from(active == "gpu" && i == 0),
        ]);
    }
    rows
}
