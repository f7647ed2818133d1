//! Where the forward pass runs: the session's `backend` setting (`SET backend = …`), the
//! binding's choice (`USE … BACKEND …`) as the binder resolved it against the adapters
//! present ([`lql_planner::RunsOn`]: `auto` is the GPU when an adapter is present, else the
//! CPU; EXPLAIN PLAN of the USE shows it), building the bound model's executor there, and
//! `SHOW BACKENDS`. The GPU backend is the `gpu` feature of this crate (on by
//! default); a build without it runs on the CPU and refuses `gpu` by name.

use std::sync::Arc;

use lql_exec::{Backend, Executor};
use lql_grammar::{BackendChoice, Setting};
use lql_planner::RunsOn;
use lql_storage::OperandSource;

use super::datum::Datum;
use super::Cx;
use crate::error::Result;
use crate::rows::Rows;
use crate::value::Value;

/// The GPU backend of this build.
#[cfg(feature = "gpu")]
mod gpu {
    use super::*;
    use lql_gpu::GpuBackend;

    /// The backend on the best adapter (`fallback`: ops it lacks run on the CPU).
    pub(super) fn backend(threads: usize, fallback: bool) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(
            GpuBackend::new(None, threads)?.with_fallback(fallback),
        ))
    }

    /// The adapters present: (name, api, kind, driver).
    pub(super) fn adapters() -> Vec<[String; 4]> {
        lql_gpu::adapters()
            .into_iter()
            .map(|a| [a.name, a.api, a.kind, a.driver])
            .collect()
    }
}

/// A build without the `gpu` feature: no adapter, `gpu` refused by name.
#[cfg(not(feature = "gpu"))]
mod gpu {
    use super::*;
    use crate::error::Error;

    pub(super) fn backend(_threads: usize, _fallback: bool) -> Result<Arc<dyn Backend>> {
        Err(Error::unsupported(
            "not supported by this build: the GPU backend (lql was built without its `gpu` feature)",
        ))
    }

    pub(super) fn adapters() -> Vec<[String; 4]> {
        Vec::new()
    }
}

/// An executor over `source` where `runs_on` says. With the host fallback (`auto`), a
/// device that cannot be opened after all leaves the passes on the CPU.
pub(crate) fn executor(source: Arc<dyn OperandSource>, runs_on: &RunsOn) -> Result<Executor> {
    match runs_on {
        RunsOn::Cpu => Ok(Executor::new(source, 0)?),
        RunsOn::Gpu {
            host_fallback: false,
            ..
        } => Ok(Executor::with_backend(source, gpu::backend(0, false)?)?),
        RunsOn::Gpu {
            host_fallback: true,
            ..
        } => match gpu::backend(0, true) {
            Ok(g) => Ok(Executor::with_backend(source, g)?),
            Err(_) => Ok(Executor::new(source, 0)?),
        },
    }
}

/// The first GPU adapter's name (the one the GPU backend runs on), probed once per
/// process.
pub(crate) fn first_adapter() -> Option<String> {
    static FIRST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FIRST
        .get_or_init(|| gpu::adapters().into_iter().next().map(|[name, ..]| name))
        .clone()
}

/// Where `choice` runs.
pub(crate) fn resolve(choice: BackendChoice) -> RunsOn {
    RunsOn::resolve(choice, first_adapter)
}

/// `gpu` needs an adapter: refused up front (before anything changes) when there is none.
pub(crate) fn check_available(choice: BackendChoice) -> Result<()> {
    if choice == BackendChoice::Gpu {
        gpu::backend(1, false)?;
    }
    Ok(())
}

/// `SetSetting`: `SET backend = 'cpu' | 'gpu' | 'auto'` — for the bound model (its
/// executor is rebuilt on next use) and for later USE statements.
pub(crate) fn set(cx: &mut Cx<'_>, setting: Setting) -> Result<Datum> {
    let Setting::Backend(choice) = setting;
    check_available(choice)?;
    cx.engine.backend = choice;
    if let Some(b) = cx.engine.bound.as_mut() {
        b.backend = choice;
        b.runs_on = resolve(choice);
        b.executor = None;
    }
    cx.engine.version += 1;
    let mut rows = Rows::new(cx.result_columns());
    rows.push(vec![Value::from("backend"), Value::from(choice.name())]);
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
    let adapters = gpu::adapters();
    let active = running(cx).unwrap_or_else(|| match &cx.engine.bound {
        Some(b) => b.runs_on.name(),
        None => resolve(cx.engine.backend).name(),
    });
    let mut rows = Rows::new(cx.result_columns());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    rows.push(vec![
        Value::from("cpu"),
        Value::from(format!("host CPU ({threads} threads)")),
        Value::from("native"),
        Value::from("cpu"),
        Value::from(""),
        Value::from(active == "cpu"),
    ]);
    for (i, [name, api, kind, driver]) in adapters.iter().enumerate() {
        let kind = if kind == "cpu" {
            "cpu-emulated"
        } else {
            kind.as_str()
        };
        rows.push(vec![
            Value::from("gpu"),
            Value::from(name.as_str()),
            Value::from(api.as_str()),
            Value::from(kind),
            Value::from(driver.as_str()),
            // The GPU backend runs on the first (best) adapter.
            Value::from(active == "gpu" && i == 0),
        ]);
    }
    rows
}
