//! The batched decode step (`Executor::decode_batch`) against each sequence decoded alone:
//! bit-identical where the backend computes rows one by one (B below the GEMM threshold,
//! or a backend without batched GEMM), within the GEMM bound otherwise, and the same greedy
//! continuations of four different prompts on the real model; errors leave every session
//! as it was.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::real::executor;
use common::{arc, build, max_abs_diff, Spec};
use lql_exec::{CpuBackend, ExecError, Executor, Logits, Session};

/// Four prompts of different lengths (so every sequence sits at its own position).
const PROMPTS: [&[u32]; 4] = [
    &[504, 3575, 282, 4649, 314],
    &[28, 30, 216, 33, 30, 216, 34, 30],
    &[1348, 2114, 253, 655],
    &[504, 2365, 282, 260, 1345, 314, 3108, 30, 378, 1101, 282],
];

/// Greedy: `steps` tokens of each prompt decoded alone; per prompt the tokens and the
/// logits of each decode step.
fn solo(exec: &Executor, prompts: &[&[u32]], steps: usize) -> Vec<(Vec<u32>, Vec<Logits>)> {
    prompts
        .iter()
        .map(|p| {
            let mut s = exec.session();
            let mut logits = s.prefill(p).unwrap();
            let (mut toks, mut all) = (Vec::new(), Vec::new());
            for _ in 0..steps {
                let t = logits.argmax();
                toks.push(t);
                logits = s.decode(t).unwrap();
                all.push(logits.clone());
            }
            (toks, all)
        })
        .collect()
}

/// The same, all sequences decoded together through `decode_batch`.
fn batched(exec: &Executor, prompts: &[&[u32]], steps: usize) -> Vec<(Vec<u32>, Vec<Logits>)> {
    let mut sessions: Vec<Session> = prompts.iter().map(|_| exec.session()).collect();
    let mut logits: Vec<Logits> = sessions
        .iter_mut()
        .zip(prompts)
        .map(|(s, p)| s.prefill(p).unwrap())
        .collect();
    let mut out: Vec<(Vec<u32>, Vec<Logits>)> = vec![(Vec::new(), Vec::new()); prompts.len()];
    for _ in 0..steps {
        let ids: Vec<u32> = logits.iter().map(Logits::argmax).collect();
        let mut refs: Vec<&mut Session> = sessions.iter_mut().collect();
        logits = exec.decode_batch(&mut refs, &ids).unwrap();
        for (i, (o, l)) in out.iter_mut().zip(&logits).enumerate() {
            o.0.push(ids[i]);
            o.1.push(l.clone());
        }
    }
    for (s, (p, o)) in sessions.iter().zip(prompts.iter().zip(&out)) {
        assert_eq!(s.position(), p.len() + steps);
        assert_eq!(&s.tokens()[p.len()..], &o.0[..]);
    }
    out
}

fn worst(a: &[(Vec<u32>, Vec<Logits>)], b: &[(Vec<u32>, Vec<Logits>)]) -> f32 {
    let mut w = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        for (l, m) in x.1.iter().zip(&y.1) {
            w = w.max(max_abs_diff(&l.values, &m.values));
        }
    }
    w
}

#[test]
fn without_gemm_a_batch_of_four_is_bit_identical_to_each_alone() {
    let Some(exec) = executor() else { return };
    let dots = Executor::with_backend(
        exec.source().clone(),
        Arc::new(CpuBackend::new(2).unwrap().without_batched_gemm()),
    )
    .unwrap();
    let alone = solo(&dots, &PROMPTS, 6);
    let together = batched(&dots, &PROMPTS, 6);
    for (a, t) in alone.iter().zip(&together) {
        assert_eq!(a.0, t.0);
        for (x, y) in a.1.iter().zip(&t.1) {
            assert_eq!(x.values, y.values, "bit-identical logits");
        }
    }
}

#[test]
fn batches_of_one_and_two_are_bit_identical_on_the_default_backend() {
    let Some(exec) = executor() else { return };
    for b in [1usize, 2] {
        let alone = solo(&exec, &PROMPTS[..b], 4);
        let together = batched(&exec, &PROMPTS[..b], 4);
        for (a, t) in alone.iter().zip(&together) {
            assert_eq!(a.0, t.0);
            for (x, y) in a.1.iter().zip(&t.1) {
                assert_eq!(x.values, y.values, "B = {b}: bit-identical logits");
            }
        }
    }
}

/// Through GEMM (B ≥ 3) the logits differ by summation order only (the project's GEMM
/// bound, as for prefill against decode), and greedy continuations of four different
/// prompts are the ones each prompt decodes alone.
#[test]
fn a_gemm_batch_of_four_matches_each_alone_and_decodes_the_same_greedy_text() {
    let Some(exec) = executor() else { return };
    let alone = solo(&exec, &PROMPTS, 24);
    let together = batched(&exec, &PROMPTS, 24);
    let w = worst(&alone, &together);
    eprintln!("batched (GEMM) vs alone: max abs logit diff {w:.2e}");
    assert!(w < 1e-3, "max abs diff {w}");
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.0, t.0, "prompt {i}: greedy continuation");
    }
}

#[test]
fn refusals_and_failures_leave_every_session_unchanged() {
    let spec = Spec {
        context: 10,
        ..Spec::default()
    };
    let exec = Executor::new(arc(build(&spec, 7)), 1).unwrap();
    let other = Executor::new(arc(build(&spec, 7)), 1).unwrap();
    let mut a = exec.session();
    let mut b = exec.session();
    a.prefill(&[1, 2, 3]).unwrap();
    b.prefill(&[4, 5, 6, 7, 8, 9, 10, 11, 12]).unwrap();
    let before = (a.tokens().to_vec(), b.tokens().to_vec());
    let check = |a: &Session, b: &Session| {
        assert_eq!((a.tokens().to_vec(), b.tokens().to_vec()), before);
        assert_eq!((a.position(), b.position()), (3, 9));
    };

    // Token ids and sessions do not pair up.
    let e = exec.decode_batch(&mut [&mut a, &mut b], &[1]).unwrap_err();
    assert!(matches!(e, ExecError::Internal(_)), "{e}");
    // A token outside the vocabulary.
    let e = exec
        .decode_batch(&mut [&mut a, &mut b], &[1, 500])
        .unwrap_err();
    assert!(
        matches!(e, ExecError::TokenOutOfRange { id: 500, .. }),
        "{e}"
    );
    check(&a, &b);
    // A session of another executor.
    let mut c = other.session();
    c.prefill(&[1]).unwrap();
    let e = exec
        .decode_batch(&mut [&mut a, &mut c], &[1, 1])
        .unwrap_err();
    assert!(e.to_string().contains("another executor"), "{e}");
    check(&a, &b);
    // Cancelled mid-step.
    exec.cancel_flag().store(true, Ordering::SeqCst);
    let e = exec
        .decode_batch(&mut [&mut a, &mut b], &[1, 1])
        .unwrap_err();
    assert!(matches!(e, ExecError::Cancelled), "{e}");
    exec.cancel_flag().store(false, Ordering::SeqCst);
    check(&a, &b);
    // One step fills b's context; the next overflows it and leaves a alone too.
    let ok = exec.decode_batch(&mut [&mut a, &mut b], &[1, 1]).unwrap();
    assert_eq!(ok.len(), 2);
    let (pa, pb) = (a.position(), b.position());
    assert_eq!((pa, pb), (4, 10));
    let e = exec
        .decode_batch(&mut [&mut a, &mut b], &[1, 1])
        .unwrap_err();
    assert!(matches!(e, ExecError::ContextOverflow { .. }), "{e}");
    assert_eq!((a.position(), b.position()), (4, 10));
    assert_eq!(a.tokens().len(), 4);
    // An empty batch is nothing to do.
    assert!(exec.decode_batch(&mut [], &[]).unwrap().is_empty());
}

/// Prompts prefilled in the same step as the next tokens of sequences already decoding
/// (`extend_batch`): bit-identical to each alone without GEMM, within the GEMM bound with
/// it.
#[test]
fn prompts_prefill_in_the_same_step_as_decoding_sequences() {
    let Some(exec) = executor() else { return };
    let dots = Executor::with_backend(
        exec.source().clone(),
        Arc::new(CpuBackend::new(2).unwrap().without_batched_gemm()),
    )
    .unwrap();
    for (e, exact) in [(&dots, true), (&exec, false)] {
        // Alone: prompt 0 then its greedy next token; prompts 1..3 prefilled.
        let mut a = e.session();
        let t = a.prefill(PROMPTS[0]).unwrap().argmax();
        let want0 = a.decode(t).unwrap();
        let want: Vec<Logits> = PROMPTS[1..]
            .iter()
            .map(|p| e.session().prefill(p).unwrap())
            .collect();
        // Together: prompt 0's next token beside three prompts.
        let mut s0 = e.session();
        assert_eq!(s0.prefill(PROMPTS[0]).unwrap().argmax(), t);
        let mut others: Vec<Session> = PROMPTS[1..].iter().map(|_| e.session()).collect();
        let mut refs: Vec<&mut Session> = vec![&mut s0];
        refs.extend(others.iter_mut());
        let mut lists: Vec<&[u32]> = vec![std::slice::from_ref(&t)];
        lists.extend(PROMPTS[1..].iter().copied());
        let got = e.extend_batch(&mut refs, &lists).unwrap();
        assert_eq!(got.len(), 4);
        for (i, (g, w)) in got
            .iter()
            .zip(std::iter::once(&want0).chain(&want))
            .enumerate()
        {
            if exact {
                assert_eq!(g.values, w.values, "sequence {i}: bit-identical");
            } else {
                let d = max_abs_diff(&g.values, &w.values);
                assert!(d < 1e-3, "sequence {i}: max abs diff {d}");
            }
        }
        assert_eq!(s0.position(), PROMPTS[0].len() + 1);
        for (s, p) in others.iter().zip(&PROMPTS[1..]) {
            assert_eq!(s.tokens(), *p);
        }
    }
}

/// On-CPU seconds of this process (user + system).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Opt-in figure (`cargo test --release -p lql-exec --test batch -- --ignored --nocapture`):
/// on-CPU milliseconds of one batched decode step by batch size, per row and in all.
#[test]
#[ignore]
fn batched_step_cost_by_batch_size() {
    let Some(exec) = executor() else { return };
    for b in [1usize, 2, 4, 8, 16] {
        let mut sessions: Vec<Session> = (0..b).map(|_| exec.session()).collect();
        for (i, s) in sessions.iter_mut().enumerate() {
            s.prefill(PROMPTS[i % 4]).unwrap();
        }
        let steps = 16;
        let c0 = cpu_seconds();
        for _ in 0..steps {
            let mut refs: Vec<&mut Session> = sessions.iter_mut().collect();
            exec.decode_batch(&mut refs, &vec![260; b]).unwrap();
        }
        let ms = (cpu_seconds() - c0) * 1e3 / steps as f64;
        eprintln!(
            "B = {b:2}: {ms:7.1} ms on-CPU per step, {:6.1} ms per row",
            ms / b as f64
        );
    }
}
