//! `trainer sample --trace FILE`: a recorded generation for the embeddable
//! widget's poster (www/nrgpt-widget.js). Per character it keeps what the
//! widget's settling animation draws and nothing more: the glyph, its energy
//! per step, the few most likely characters per step and, for an EBT, every
//! candidate's energy curve. The run follows the worker's loop (the same
//! sessions, filtering and draws), so its text is `sample`'s for the seed.

use nrgpt_core::ebt_session::EbtSession;
use nrgpt_core::rng::Rng64;
use nrgpt_core::sample::{draw, filtered_probs, SampleOpts};
use nrgpt_core::session::{Session, StepOpts, TokenTrace};
use nrgpt_core::{Arch, Checkpoint, Vocab};
use serde::Serialize;

/// Characters listed per step: the widget shows the leader and two runners-up.
pub const TOP_PER_STEP: usize = 3;
/// Format version the widget checks before playing a poster.
pub const TRACE_VERSION: u32 = 1;

#[derive(Debug, Serialize)]
pub struct PosterTrace {
    pub version: u32,
    pub arch: String,
    pub prompt: String,
    pub seed: u64,
    pub temperature: f32,
    pub top_k: usize,
    /// Steps the run asked for (NRGPT's T, an EBT's S; a GPT's layers).
    pub steps: usize,
    pub candidates: usize,
    /// EBT: the Langevin noise std before every thinking step (0 = none).
    pub langevin: f32,
    /// The generated continuation, without the prompt.
    pub text: String,
    pub chars: Vec<PosterChar>,
}

#[derive(Debug, Serialize)]
pub struct PosterChar {
    pub c: char,
    /// Energy per step (empty for a GPT), three decimals.
    pub e: Vec<f64>,
    /// Per step, the `TOP_PER_STEP` most likely characters, best first.
    pub top: Vec<String>,
    /// EBT: each candidate's energy per thinking step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cand: Vec<Vec<f64>>,
    /// EBT: the candidate kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<usize>,
}

/// Three decimals are what the widget's plots resolve; f64 prints them without f32 noise.
fn round3(x: f32) -> f64 {
    (f64::from(x) * 1000.0).round() / 1000.0
}

/// The `n` largest logits' characters, ties to the lower id (as the widget sorts live traces).
pub fn top_chars(logits: &[f32], vocab: &Vocab, n: usize) -> String {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order.iter().take(n).map(|&i| vocab.chars()[i]).collect()
}

fn poster_char(c: char, tr: &TokenTrace, vocab: &Vocab) -> PosterChar {
    let ebt = !tr.candidates.is_empty();
    PosterChar {
        c,
        e: tr.energies.iter().copied().map(round3).collect(),
        top: tr.step_logits.iter().map(|l| top_chars(l, vocab, TOP_PER_STEP)).collect(),
        cand: tr.candidates.iter().map(|c| c.iter().copied().map(round3).collect()).collect(),
        kept: ebt.then_some(tr.chosen),
    }
}

/// The session behind a checkpoint: the recomputing reference for NRGPT and
/// GPT, the thinking session for an EBT.
enum Traced {
    Plain(Box<Session>),
    Ebt(Box<EbtSession>),
}

impl Traced {
    fn vocab(&self) -> &Vocab {
        match self {
            Traced::Plain(s) => &s.vocab,
            Traced::Ebt(s) => &s.vocab,
        }
    }
    fn push(&mut self, token: u32, opts: &StepOpts) -> nrgpt_core::Result<TokenTrace> {
        match self {
            Traced::Plain(s) => s.push(token, opts),
            Traced::Ebt(s) => s.push(token, opts),
        }
    }
    /// Reads the prompt and returns its last character's trace, as `sample`
    /// does: an EBT thinks only after the last one.
    fn prompt(&mut self, ids: &[u32], opts: &StepOpts) -> nrgpt_core::Result<TokenTrace> {
        let Some((&last, inner)) = ids.split_last() else {
            return Err(nrgpt_core::Error::Vocab("the prompt is empty".into()));
        };
        match self {
            Traced::Plain(s) => s.push_many(ids, opts),
            Traced::Ebt(s) => {
                s.feed(inner)?;
                s.push(last, opts)
            }
        }
    }
}

/// Generates `len` characters after `prompt` and records how each settled.
pub fn trace(ck: &Checkpoint, prompt: &str, len: usize, sample: &SampleOpts, step: &StepOpts) -> nrgpt_core::Result<PosterTrace> {
    sample.validate()?;
    let mut s = if ck.config.arch == Arch::Ebt { Traced::Ebt(Box::new(EbtSession::new(ck)?)) } else { Traced::Plain(Box::new(Session::new(ck)?)) };
    let ids = s.vocab().encode(prompt)?;
    let mut tr = s.prompt(&ids, step)?;
    let mut rng = Rng64::new(sample.seed);
    let mut chars = Vec::with_capacity(len);
    for i in 0..len {
        let next = draw(&filtered_probs(&tr.logits, sample), &mut rng);
        let c = s.vocab().chars()[next];
        chars.push(poster_char(c, &tr, s.vocab()));
        if i + 1 < len {
            tr = s.push(next as u32, step)?;
        }
    }
    let steps = chars.first().map_or(0, |c| c.top.len().saturating_sub(1));
    Ok(PosterTrace {
        version: TRACE_VERSION,
        arch: ck.config.arch.name().into(),
        prompt: prompt.into(),
        seed: sample.seed,
        temperature: sample.temperature,
        top_k: sample.top_k.unwrap_or(0),
        steps,
        candidates: step.ebt.samples,
        langevin: step.ebt.langevin,
        text: chars.iter().map(|c| c.c).collect(),
        chars,
    })
}
