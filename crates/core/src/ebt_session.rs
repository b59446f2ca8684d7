//! EBT decoding, the reference way: for every character, recompute the real
//! stream over the window and think each candidate for the last position
//! with the oracle's tensor ops. The engine's incremental EBT decoder and the
//! page are held to this (same seed, same text; logits within 1e-3).

use std::ops::ControlFlow;

use candle_core::{DType, Device, Tensor};

use crate::ebt::{Context, Ebt, Verify};
use crate::rng::Rng64;
use crate::sample::{draw, filtered_probs, SampleOpts};
use crate::session::{window_after, EbtThinkOpts, StepOpts, TokenTrace};
use crate::scalar::softmax_row;
use crate::{Checkpoint, EbtUpdate, Error, Result, Vocab};

/// The stream the candidates' starting noise is drawn from.
const STREAM_CANDIDATES: u64 = 0xCA4D;

/// z(0) of each of the `samples` candidates for the character at sequence
/// index `index`: N(0, std^2) logits of length `v`, candidate-major.
pub fn candidate_noise(seed: u64, index: u64, samples: usize, v: usize, std: f64) -> Vec<Vec<f32>> {
    let mut rng = Rng64::derive(seed ^ STREAM_CANDIDATES, index);
    (0..samples.max(1)).map(|_| (0..v).map(|_| (rng.normal() * std) as f32).collect()).collect()
}

/// The stream the candidates' Langevin noise is drawn from.
const STREAM_LANGEVIN: u64 = 0x1A4E;

/// The Langevin noise of each of the `samples` candidates for the character
/// at sequence index `index`: for each of its `steps` steps, N(0, std^2) of
/// length `v` (candidate-major, then step). Empty when `std` is 0.
pub fn langevin_noise(seed: u64, index: u64, samples: usize, steps: usize, v: usize, std: f32) -> Vec<Vec<Vec<f32>>> {
    if std == 0.0 {
        return vec![Vec::new(); samples.max(1)];
    }
    let mut rng = Rng64::derive(seed ^ STREAM_LANGEVIN, index);
    (0..samples.max(1)).map(|_| (0..steps).map(|_| (0..v).map(|_| (rng.normal() * std as f64) as f32).collect()).collect()).collect()
}

/// The relative rise in energy that accept-only-lower treats as a rise.
pub const RISE_TOL: f32 = 1e-5;

/// One candidate's thinking: z and E per step taken, and the steps used.
pub struct CandidateThought {
    pub logits: Vec<Vec<f32>>,
    pub energies: Vec<f32>,
}

/// The index of the candidate `verify` prefers (ties: the first).
pub fn choose(thoughts: &[CandidateThought], verify: Verify) -> usize {
    let score = |t: &CandidateThought| verify.score(t.energies[0], *t.energies.last().expect("a thought has its start"));
    (1..thoughts.len()).fold(0, |best, c| if score(&thoughts[c]) < score(&thoughts[best]) { c } else { best })
}

/// Thinks one candidate from `z0`: up to `steps` steps of `update` (z <- z -
/// a dE/dz, or z <- softmax(z) - a dE/dy), stopping early once |E(s) - E(s-1)| < tol, and, with `accept_lower`,
/// before a step that raises E. `langevin[s]`, when given, is added to z
/// before step s (the reference's inference): the step starts from the noisy
/// point, and the thought records that point and its energy; the final z is
/// clean. `energy_grad(z, want_grad)` is the path's own math (the oracle's
/// tensors, the engine's loops); the control flow is this one.
pub fn think_candidate(
    z0: &[f32],
    steps: usize,
    tol: Option<f32>,
    accept_lower: bool,
    (update, a, bound): (EbtUpdate, f32, f32),
    langevin: &[Vec<f32>],
    mut energy_grad: impl FnMut(&[f32], bool) -> Result<(f32, Option<Vec<f32>>)>,
) -> Result<CandidateThought> {
    let mut z = z0.to_vec();
    let mut y = vec![0f32; z.len()];
    let mut out = CandidateThought { logits: Vec::new(), energies: Vec::new() };
    for s in 0..=steps {
        if let Some(noise) = langevin.get(s).filter(|_| s < steps) {
            z.iter_mut().zip(noise).for_each(|(z, n)| *z += n);
        }
        let (e, grad) = energy_grad(&z, s < steps)?;
        if !e.is_finite() {
            return Err(Error::Config(format!("the energy became {e} at thinking step {s}")));
        }
        let prev = out.energies.last().copied();
        // a rise within f32 round-off is no rise: on a plateau (a saturated
        // softmax) it would stop the f32 engine and not the f64 oracle
        if accept_lower && prev.is_some_and(|p| e > p + RISE_TOL * p.abs().max(1.0)) {
            break;
        }
        out.energies.push(e);
        out.logits.push(z.clone());
        if s == steps || prev.is_some_and(|p| tol.is_some_and(|tol| (e - p).abs() < tol)) {
            break;
        }
        let grad = grad.ok_or_else(|| Error::Config("the energy path gave no gradient".into()))?;
        // (the logits' step does not read y)
        if update == EbtUpdate::Probs {
            softmax_row(&z, &mut y);
        }
        update.step_row(&mut z, &y, &grad, a, bound);
    }
    Ok(out)
}

/// The oracle's thinking for the last position of `ctx`'s window (n tokens).
pub fn think_last(
    ebt: &Ebt,
    ctx: &Context,
    n: usize,
    (z0, langevin): (&[f32], &[Vec<f32>]),
    steps: usize,
    tol: Option<f32>,
    accept_lower: bool,
) -> Result<CandidateThought> {
    let v = z0.len();
    let a = ebt.step_size()?.to_dtype(DType::F32)?.to_vec1::<f32>()?[0];
    think_candidate(z0, steps, tol, accept_lower, (ebt.cfg.ebt_update, a, ebt.cfg.ebt_grad_bound(a)), langevin, |z, want_grad| {
        // the other positions' candidates do not touch the last one's energy: zeros
        let mut full = vec![0f32; (n - 1) * v];
        full.extend_from_slice(z);
        let zt = Tensor::from_vec(full, (1, n, v), &Device::Cpu)?.to_dtype(ebt.dtype())?;
        let eg = ebt.energy_grad(ctx, &zt, want_grad)?;
        let e = eg.energy.get(0)?.get(n - 1)?.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        let g = match eg.grad {
            Some(g) => Some(g.get(0)?.get(n - 1)?.to_dtype(DType::F32)?.to_vec1()?),
            None => None,
        };
        Ok((e, g))
    })
}

/// The trace of a character from its candidates' thoughts.
pub fn trace_of(thoughts: Vec<CandidateThought>, verify: Verify) -> TokenTrace {
    let chosen = choose(&thoughts, verify);
    let candidates = thoughts.iter().map(|t| t.energies.clone()).collect();
    let best = thoughts.into_iter().nth(chosen).expect("chosen is a candidate");
    TokenTrace {
        logits: best.logits.last().cloned().unwrap_or_default(),
        steps_used: best.energies.len() - 1,
        energies: best.energies,
        step_logits: best.logits,
        proj: Vec::new(),
        candidates,
        chosen,
    }
}

pub struct EbtSession {
    pub ebt: Ebt,
    pub vocab: Vocab,
    ids: Vec<u32>,
    /// Characters fed since the reset: the noise index of the next one.
    fed: u64,
}

impl EbtSession {
    pub fn new(ck: &Checkpoint) -> Result<Self> {
        Ok(Self { ebt: Ebt::new(&ck.config, &ck.weights)?, vocab: ck.vocab.clone(), ids: Vec::new(), fed: 0 })
    }

    pub fn reset(&mut self) {
        self.ids.clear();
        self.fed = 0;
    }

    /// Appends `tokens` without thinking about what follows them (a prompt's inside).
    pub fn feed(&mut self, tokens: &[u32]) -> Result<()> {
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= self.ebt.cfg.vocab_size) {
            return Err(Error::Vocab(format!("token id {t} is outside the vocabulary")));
        }
        self.ids = window_after(&self.ids, tokens, self.ebt.cfg.block_size).0;
        self.fed += tokens.len() as u64;
        Ok(())
    }

    /// Appends `token` and thinks the next character's candidates.
    pub fn push(&mut self, token: u32, opts: &StepOpts) -> Result<TokenTrace> {
        self.feed(&[token])?;
        let cfg = &self.ebt.cfg;
        let n = self.ids.len();
        let ctx = self.ebt.context(&Tensor::from_slice(&self.ids, (1, n), &Device::Cpu)?)?;
        let steps = opts.steps.unwrap_or(cfg.steps);
        let EbtThinkOpts { samples, verify, accept_lower, seed, langevin } = opts.ebt.clone();
        let noise = langevin_noise(seed, self.fed - 1, samples, steps, cfg.vocab_size, langevin);
        let thoughts = candidate_noise(seed, self.fed - 1, samples, cfg.vocab_size, cfg.ebt_noise)
            .iter()
            .zip(&noise)
            .map(|(z0, ld)| think_last(&self.ebt, &ctx, n, (z0, ld), steps, opts.early_exit, accept_lower))
            .collect::<Result<Vec<_>>>()?;
        Ok(trace_of(thoughts, verify))
    }
}

/// Generates `n_chars` after `prompt`: each character sampled from the
/// chosen candidate's final logits. The text `trainer sample` prints for an EBT.
pub fn generate_ebt(session: &mut EbtSession, prompt: &str, n_chars: usize, sample: &SampleOpts, step: &StepOpts) -> Result<String> {
    generate_ebt_streamed(session, prompt, n_chars, sample, step, &mut |_| ControlFlow::Continue(()))
}

/// [`generate_ebt`], handing each character to `emit` as soon as it is
/// drawn; `emit` breaking stops the run, which returns the text up to there.
pub fn generate_ebt_streamed(
    session: &mut EbtSession,
    prompt: &str,
    n_chars: usize,
    sample: &SampleOpts,
    step: &StepOpts,
    emit: &mut dyn FnMut(&str) -> ControlFlow<()>,
) -> Result<String> {
    let ids = session.vocab.encode(prompt)?;
    let Some((&last, inner)) = ids.split_last() else {
        return Err(Error::Vocab("the prompt is empty".into()));
    };
    session.reset();
    session.feed(inner)?;
    let mut rng = Rng64::new(sample.seed);
    let mut trace = session.push(last, step)?;
    let mut out = Vec::with_capacity(n_chars);
    for i in 0..n_chars {
        let next = draw(&filtered_probs(&trace.logits, sample), &mut rng) as u32;
        out.push(next);
        if emit(&session.vocab.decode(&[next])).is_break() {
            break;
        }
        if i + 1 < n_chars {
            trace = session.push(next, step)?;
        }
    }
    Ok(session.vocab.decode(&out))
}
