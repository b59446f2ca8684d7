//! A decoding session: feed characters one at a time and get, for each, the
//! next-character logits plus the trajectory the page animates. This is the
//! CPU reference (it recomputes the window for every character); the GPU
//! engine implements the same contract with cached states.

use candle_core::{DType, Device, Tensor};

use crate::ebt::Verify;
use crate::layout::WeightLayout;
use crate::projection::{project, top2_directions};
use crate::format::Integrity;
use crate::{Checkpoint, ForwardOpts, Model, Result, Vocab};

#[derive(Debug, Clone, Default)]
pub struct StepOpts {
    /// Recursion steps T (default: the checkpoint's).
    pub steps: Option<usize>,
    /// Early exit (engine only): a character stops descending once
    /// |E(t) - E(t-1)| < tol. The CPU reference ignores it.
    pub early_exit: Option<f32>,
    /// How an EBT thinks (ignored by NRGPT and GPT).
    pub ebt: EbtThinkOpts,
}

/// EBT inference: candidates, how one is chosen, and how descent may stop.
#[derive(Debug, Clone, PartialEq)]
pub struct EbtThinkOpts {
    /// Candidates thought per character (Best-of-N); 1 = no verification.
    pub samples: usize,
    pub verify: Verify,
    /// Reject a step that raises the energy, and stop there.
    pub accept_lower: bool,
    /// Seeds the candidates' starting noise (character i of a sequence draws
    /// from its own stream, so decoders that skip work still agree).
    pub seed: u64,
    /// Langevin noise std added to each candidate before every thinking
    /// step, as the reference's inference does (0 = plain descent). It keeps
    /// the candidates apart, which Best-of-N needs to choose among them.
    pub langevin: f32,
}

impl Default for EbtThinkOpts {
    fn default() -> Self {
        Self { samples: 1, verify: Verify::MinEnergy, accept_lower: false, seed: 0, langevin: 0.0 }
    }
}

/// The window policy every decoder shares: when the window is full, keep its
/// last half (positions restart at 0), so cached decoding recomputes only on
/// a slide. Returns whether it slid. A block of one keeps nothing: the
/// character about to be pushed fills it.
pub fn slide_window(window: &mut Vec<u32>, block: usize) -> bool {
    if window.len() < block {
        return false;
    }
    let keep = block / 2;
    window.drain(..window.len() - keep);
    true
}

/// The window after feeding `tokens` to `window` under [`slide_window`], and
/// whether it slid on the way. A decoder's state after a slide depends only
/// on this window, so a long prompt needs only what the window will hold to
/// be computed: every decoder and the sampler feed prompts through here.
pub fn window_after(window: &[u32], tokens: &[u32], block: usize) -> (Vec<u32>, bool) {
    let mut w = window.to_vec();
    let mut slid = false;
    for &t in tokens {
        slid |= slide_window(&mut w, block);
        w.push(t);
    }
    (w, slid)
}

/// What one character's descent looked like.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenTrace {
    /// Logits for the next character after the last step (V).
    pub logits: Vec<f32>,
    /// E_A(t), t = 0..=T (NRGPT; empty for the GPT baselines).
    pub energies: Vec<f32>,
    /// Readout logits of x_A(t), t = 0..=T: the candidates changing per step.
    pub step_logits: Vec<Vec<f32>>,
    /// x_A(t) projected on the checkpoint's fixed plane, t = 0..=T.
    pub proj: Vec<[f32; 2]>,
    /// Steps the character actually used (T unless it exited early).
    pub steps_used: usize,
    /// EBT: each candidate's energy over its thinking steps (empty otherwise);
    /// `energies` and `step_logits` follow candidate `chosen`.
    pub candidates: Vec<Vec<f32>>,
    pub chosen: usize,
}

impl TokenTrace {
    /// Stops a generation whose state went non-finite (a NaN or Inf logit or
    /// energy) instead of sampling from garbage: the caller shows the message
    /// and keeps the text generated so far.
    pub fn check_finite(&self) -> Result<()> {
        let bad = |xs: &[f32]| xs.iter().any(|x| !x.is_finite());
        if bad(&self.logits) || bad(&self.energies) || self.step_logits.iter().any(|l| bad(l)) {
            return Err(crate::Error::NonFinite(
                "the model's state became NaN or infinite (its descent diverged: try fewer steps, or another model); generation stopped".into(),
            ));
        }
        Ok(())
    }
}

pub struct Session {
    pub model: Model,
    pub vocab: Vocab,
    /// Whether the checkpoint matched its digest (the page shows the note of one that predates digests).
    pub integrity: Integrity,
    /// The current window (see [`slide_window`]).
    ids: Vec<u32>,
    dirs: [Vec<f32>; 2],
}

impl Session {
    pub fn new(ck: &Checkpoint) -> Result<Self> {
        let model = ck.model()?;
        let (v, d) = (ck.config.vocab_size, ck.config.d_model);
        let lay = WeightLayout::new(&ck.config);
        let head: Vec<f32> = ck.weights[lay.name(lay.head_w)].to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        Ok(Self { model, vocab: ck.vocab.clone(), integrity: ck.integrity, ids: Vec::new(), dirs: top2_directions(&head, v, d) })
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::new(&Checkpoint::from_bytes(bytes, DType::F32, &Device::Cpu)?)
    }

    pub fn reset(&mut self) {
        self.ids.clear();
    }

    /// Feeds several characters (a prompt) and returns the last one's trace.
    /// The window is recomputed once, so a long prompt costs one window.
    pub fn push_many(&mut self, tokens: &[u32], opts: &StepOpts) -> Result<TokenTrace> {
        let Some((&last, rest)) = tokens.split_last() else {
            return Err(crate::Error::Vocab("nothing to feed: the text is empty".into()));
        };
        if let Some(t) = rest.iter().find(|&&t| t as usize >= self.model.cfg.vocab_size) {
            return Err(crate::Error::Vocab(format!("token id {t} is outside the vocabulary")));
        }
        let block = self.model.cfg.block_size;
        let (mut w, _) = window_after(&self.ids, tokens, block);
        w.pop();
        // `push` would slide a full window before appending the last token
        // (the same step `window_after` took), so hand it the window without it
        self.ids = w;
        self.push(last, opts)
    }

    /// Appends `token` and runs the model on the last `block_size` characters.
    pub fn push(&mut self, token: u32, opts: &StepOpts) -> Result<TokenTrace> {
        if token as usize >= self.model.cfg.vocab_size {
            return Err(crate::Error::Vocab(format!("token id {token} is outside the vocabulary")));
        }
        slide_window(&mut self.ids, self.model.cfg.block_size);
        self.ids.push(token);
        let ctx = &self.ids[..];
        let n = ctx.len();
        let t = Tensor::from_slice(ctx, (1, n), self.model.device())?;
        let f = self.model.forward(&t, ForwardOpts { steps: opts.steps, record: true, ..Default::default() })?;
        let last = |x: &Tensor| -> Result<Vec<f32>> { Ok(x.get(0)?.get(n - 1)?.to_dtype(DType::F32)?.to_vec1()?) };
        let mut step_logits = Vec::with_capacity(f.states.len());
        let mut proj = Vec::with_capacity(f.states.len());
        for x in &f.states {
            let xa = x.narrow(1, n - 1, 1)?;
            step_logits.push(self.model.readout(&xa)?.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?);
            proj.push(project(&last(x)?, &self.dirs));
        }
        let energies = match &f.energies {
            Some(e) => e.narrow(2, n - 1, 1)?.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?,
            None => Vec::new(),
        };
        let trace = TokenTrace { logits: last(&f.logits)?, energies, step_logits, proj, steps_used: f.states.len() - 1, ..Default::default() };
        trace.check_finite()?;
        Ok(trace)
    }
}
