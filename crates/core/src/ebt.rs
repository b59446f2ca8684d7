//! The Energy-Based Transformer (arXiv 2507.02092), decoder-only, for the
//! next character: the candidate prediction itself is refined by descent on
//! a learned energy ("thinking"), and its energy scores it ("verification").
//!
//! For each position A the candidate is logits `z` over the vocabulary,
//! embedded as `e = softmax(z)^T Emb` (the shared token embedding). `layers`
//! pre-norm layers run two streams: the real tokens attend causally to real
//! tokens (B <= A), as in GPT; the prediction at A attends to the real tokens
//! B <= A and to itself. A linear head on the normalised prediction stream
//! gives the energy `E_A(z)`. The real stream does not depend on `z`, so it is
//! computed once ([`Ebt::context`]); [`Ebt::energy_grad`] writes the prediction
//! stream's input gradient `dE/dz` analytically, as tensor ops, so one pass of
//! candle's autograd differentiates through it (candle's gradient of a
//! gradient is silently wrong). Thinking: `z <- z - a dE/dz`, or with
//! [`EbtUpdate::Probs`] the reference's `z <- softmax(z) - a dE/dy`.

use candle_core::{DType, Device, Result, Tensor, D};

use crate::gpt::{GptLayer, LayerDrops};
use crate::layout::{Body, WeightLayout};
use crate::linear::linear;
use crate::model::{check_weights, Ends, Weights};
use crate::norm::{norm, norm_vjp, Normed};
use crate::ops::{activation, causal_masks, merge_heads, softmax_lse, split_heads};
use crate::rng::Rng64;
use crate::{EbtUpdate, Error, ModelConfig};

/// The smallest thinking step (the reference clamps its step size there).
pub const MIN_STEP: f64 = 1e-4;

pub struct Ebt {
    pub cfg: ModelConfig,
    /// Its head is the energy head: (1, D) and (1).
    ends: Ends,
    log_a: Tensor,
    /// The candidate's input map (V, D): the token embedding, or its own.
    in_emb: Tensor,
    layers: Vec<GptLayer>,
}

/// What the prediction stream reads from the real stream: per layer, the real
/// tokens' keys and values (B, H, n, dh), and the additive causal mask (n, n).
pub struct Context {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    mask: Tensor,
    pos: Tensor,
}

/// What one layer of the prediction stream keeps for its backward.
struct Saved {
    n1: Normed,
    q: Tensor,
    k_self: Tensor,
    v_self: Tensor,
    /// Attention weights on the real tokens (B, H, n, n) and on itself (B, H, n, 1).
    p_real: Tensor,
    p_self: Tensor,
    n2: Normed,
    ds: Tensor,
}

/// `E_A(z)` (B, n) and, when asked, the gradient the thinking step takes
/// (B, n, V): `dE_A/dz_A`, or `dE_A/dy_A` with [`EbtUpdate::Probs`].
pub struct EnergyGrad {
    pub energy: Tensor,
    pub grad: Option<Tensor>,
}

/// How one training batch thinks: drawn by the trainer from the reference's
/// regularisers, and read the same way by every training path.
pub struct ThinkPlan {
    /// z(0), (B, n, V): noise, or final logits from the replay buffer.
    pub z0: Tensor,
    /// Steps this batch takes (S, or more with a random step count).
    pub steps: usize,
    /// Per-token multiplier of the step size `a`, (B, n, 1); None: 1 everywhere.
    pub step_scale: Option<Tensor>,
    /// Langevin noise added to z(s) before step s (B, n, V), already scaled
    /// (the reference adds it before the softmax); empty: none.
    pub langevin: Vec<Tensor>,
    /// The loss is the last step's cross-entropy only (the reference's
    /// `truncate_mcmc`), not the mean over the steps.
    pub final_only: bool,
    /// The reference's `soften_target_prob_dist`: step s's cross-entropy
    /// aims at the truth smoothed by [`target_smoothing`] (0: off).
    pub soften: f64,
    /// Losses on the energy's own level (0: off), see [`EnergyLoss`].
    pub energy_loss: EnergyLoss,
}

/// Label smoothing of step s's target out of `steps`: `soften` at the first
/// step, falling linearly to 0 at the last, so early steps aim at a soft
/// target and the last at the true character (as the reference).
pub fn target_smoothing(soften: f64, s: usize, steps: usize) -> f64 {
    if steps <= 1 {
        return 0.0;
    }
    (steps - 1 - s) as f64 / (steps - 1) as f64 * soften
}

/// The thinking loss reaches the energy only through its gradient, so its
/// level is free. These terms tie it to correctness; each is a coefficient
/// (0: off) on a mean over the characters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EnergyLoss {
    /// The reference's `contrastive_loss`: softplus(E(true) - E(pred)),
    /// the true character's one-hot against the last step's input (its
    /// `predicted_energies[-1]`), so the truth lies lower than the guess.
    pub contrastive: f64,
    /// Ours: minus the Pearson correlation, within each sequence, of the
    /// final energy E(z(S)) with the final cross-entropy (held fixed), so a
    /// character's energy says how hard it is. Scale-free on purpose: the
    /// thinking step needs the energy steep, and a squared error to the loss
    /// (tried first) fought that and diverged within 100 iterations.
    pub calibrate: f64,
}

/// The stabiliser of [`sequence_correlation`]'s denominator.
pub const CORR_EPS: f64 = 1e-12;

/// Pearson's r of `e` with `l` over one sequence, `S_el / sqrt(S_ee S_ll +
/// CORR_EPS)` (S the centred sums), and its gradient with respect to `e`.
/// Written once for the f32 paths; the oracle writes it in tensors.
pub fn sequence_correlation(e: &[f32], l: &[f32]) -> (f64, Vec<f32>) {
    let n = e.len() as f64;
    let (me, ml) = (e.iter().map(|&x| x as f64).sum::<f64>() / n, l.iter().map(|&x| x as f64).sum::<f64>() / n);
    let de: Vec<f64> = e.iter().map(|&x| x as f64 - me).collect();
    let dl: Vec<f64> = l.iter().map(|&x| x as f64 - ml).collect();
    let (see, sll) = (de.iter().map(|x| x * x).sum::<f64>(), dl.iter().map(|x| x * x).sum::<f64>());
    let sel: f64 = de.iter().zip(&dl).map(|(a, b)| a * b).sum();
    let root = (see * sll + CORR_EPS).sqrt();
    // dr/de_i = dl_i / R - S_el S_ll de_i / R^3 (the centring drops out: sum dl = sum de = 0)
    let grad = de.iter().zip(&dl).map(|(de, dl)| (dl / root - sel * sll * de / root.powi(3)) as f32).collect();
    (sel / root, grad)
}

/// How self-verification picks one of N thought candidates, per character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// The lowest final energy.
    #[default]
    MinEnergy,
    /// The largest drop from its start (the reference's `max_gap`).
    MaxGap,
}

impl Verify {
    /// A candidate's score from its first and final energy: the lower wins.
    /// Every f32 path scores here; `Ebt::predict` writes it in tensors.
    pub fn score(self, first: f32, last: f32) -> f32 {
        match self {
            Verify::MinEnergy => last,
            Verify::MaxGap => last - first,
        }
    }
}

impl std::str::FromStr for Verify {
    type Err = Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "min" => Ok(Verify::MinEnergy),
            "max-gap" => Ok(Verify::MaxGap),
            _ => Err(Error::Config(format!("self-verification is `min` or `max-gap`, not `{s}`"))),
        }
    }
}

/// A thinking trajectory: `logits[s]` is z(s) and `energies[s]` its energy, s = 0..=S.
pub struct Thought {
    pub logits: Vec<Tensor>,
    pub energies: Vec<Tensor>,
}

impl Ebt {
    /// Builds the model from `w`, checking every name and shape.
    pub fn new(cfg: &ModelConfig, w: &Weights) -> crate::Result<Self> {
        cfg.validate()?;
        let lay = WeightLayout::new(cfg);
        let Body::Ebt(ix) = &lay.body else {
            return Err(Error::Config(format!("`{}` is not an EBT", cfg.arch.name())));
        };
        check_weights(&lay, w)?;
        let get = |i: usize| w[lay.name(i)].clone();
        let layers = ix.layers.iter().map(|l| GptLayer::from_layout(cfg, l, get)).collect();
        Ok(Self { cfg: cfg.clone(), ends: Ends::from_layout(&lay, get), log_a: get(ix.log_a), in_emb: get(ix.input), layers })
    }

    pub fn dtype(&self) -> DType {
        self.ends.tok_emb.dtype()
    }

    pub fn device(&self) -> &Device {
        self.ends.tok_emb.device()
    }

    /// The thinking step `a = max(e^{log a}, 1e-4)`, shape (1).
    pub fn step_size(&self) -> Result<Tensor> {
        self.log_a.exp()?.maximum(MIN_STEP)
    }

    /// Runs the real stream over `ids` (B, n) u32 and keeps what predictions read.
    pub fn context(&self, ids: &Tensor) -> crate::Result<Context> {
        let n = ids.dim(1)?;
        let mut x = self.ends.embed(ids)?;
        let pos = self.ends.pos_emb.narrow(0, 0, n)?;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for layer in &self.layers {
            let h = norm(layer.norm, &x, &layer.ln1, layer.eps)?.g;
            keys.push(split_heads(&linear(&h, &layer.wk, None)?, layer.n_head)?);
            values.push(split_heads(&linear(&h, &layer.wv, None)?, layer.n_head)?);
            x = layer.forward(&x, LayerDrops::default())?;
        }
        let (mask, _) = causal_masks(n, false, x.dtype(), x.device())?;
        Ok(Context { keys, values, mask, pos })
    }

    /// `E_A(z)` for every position, and `dE_A/dz_A` when `want_grad`
    /// (each position's energy depends on its own candidate only).
    pub fn energy_grad(&self, ctx: &Context, z: &Tensor, want_grad: bool) -> Result<EnergyGrad> {
        self.energy_grad_at(ctx, &softmax_lse(z)?.0, want_grad)
    }

    /// [`Ebt::energy_grad`] at the probabilities `y` = softmax(z) (B, n, V).
    fn energy_grad_at(&self, ctx: &Context, y: &Tensor, want_grad: bool) -> Result<EnergyGrad> {
        // e = softmax(z)^T Emb (or W_in), placed at the position it predicts from
        let mut p = linear(y, &self.in_emb.t()?, None)?.broadcast_add(&ctx.pos)?;
        let mut saved = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let (next, s) = self.predict_layer(layer, &ctx.keys[l], &ctx.values[l], &ctx.mask, &p)?;
            p = next;
            saved.push(s);
        }
        let no = norm(self.cfg.norm, &p, &self.ends.out_gamma, self.cfg.eps)?;
        // E = w_E . N_out(p) + b_E
        let energy = linear(&no.g, &self.ends.head_w, Some(&self.ends.head_b))?.squeeze(D::Minus1)?;
        if !want_grad {
            return Ok(EnergyGrad { energy, grad: None });
        }
        let mut delta = norm_vjp(self.cfg.norm, &no, &self.ends.out_gamma, &self.ends.head_w.squeeze(0)?.broadcast_as(p.shape())?)?;
        for (l, layer) in self.layers.iter().enumerate().rev() {
            delta = predict_layer_vjp(layer, &ctx.keys[l], &ctx.values[l], &saved[l], &delta)?;
        }
        // dE/dy = Emb dE/de
        let g = linear(&delta, &self.in_emb, None)?;
        let grad = match self.cfg.ebt_update {
            EbtUpdate::Probs => g,
            // dE/dz = (diag(y) - y y^T) dE/dy
            EbtUpdate::Logits => (y * g.broadcast_sub(&(y * &g)?.sum_keepdim(D::Minus1)?)?)?,
        };
        Ok(EnergyGrad { energy, grad: Some(grad) })
    }

    /// One pre-norm layer of the prediction stream: attention over the real
    /// tokens B <= A and the prediction itself, then the MLP.
    fn predict_layer(&self, layer: &GptLayer, keys: &Tensor, values: &Tensor, mask: &Tensor, p: &Tensor) -> Result<(Tensor, Saved)> {
        let h = layer.n_head;
        let n1 = norm(layer.norm, p, &layer.ln1, layer.eps)?;
        let q = split_heads(&linear(&n1.g, &layer.wq, None)?, h)?;
        let k_self = split_heads(&linear(&n1.g, &layer.wk, None)?, h)?;
        let v_self = split_heads(&linear(&n1.g, &layer.wv, None)?, h)?;
        let scale = 1.0 / (q.dim(3)? as f64).sqrt();
        let s_real = (q.matmul(&keys.t()?)? * scale)?.broadcast_add(mask)?;
        let s_self = ((&q * &k_self)?.sum_keepdim(D::Minus1)? * scale)?;
        let n = s_real.dim(3)?;
        let (pr, _) = softmax_lse(&Tensor::cat(&[&s_real, &s_self], D::Minus1)?)?;
        let (p_real, p_self) = (pr.narrow(D::Minus1, 0, n)?, pr.narrow(D::Minus1, n, 1)?);
        let att = (p_real.matmul(values)? + p_self.broadcast_mul(&v_self)?)?;
        let p1 = (p + linear(&merge_heads(&att)?, &layer.wo, None)?)?;
        let n2 = norm(layer.norm, &p1, &layer.ln2, layer.eps)?;
        let (s, ds) = activation(layer.act, &linear(&n2.g, &layer.w1, Some(&layer.b1))?)?;
        let p2 = (&p1 + linear(&s, &layer.w2, Some(&layer.b2))?)?;
        Ok((p2, Saved { n1, q, k_self, v_self, p_real, p_self, n2, ds }))
    }

    /// One thinking step from `z` along `grad` with step `a` (broadcast):
    /// `z - a g`, or `softmax(z) - a g`, g clamped to ±ebt_clamp / a_learned
    /// when set ([`EbtUpdate::step_row`] in tensors).
    pub fn step(&self, z: &Tensor, grad: &Tensor, a: &Tensor) -> Result<Tensor> {
        let base = match self.cfg.ebt_update {
            EbtUpdate::Logits => z.clone(),
            EbtUpdate::Probs => softmax_lse(z)?.0,
        };
        let grad = if self.cfg.ebt_clamp > 0.0 {
            // as the reference, the bound reads the learned step (its gradient flows there)
            let bound = (self.step_size()?.recip()? * self.cfg.ebt_clamp)?;
            grad.broadcast_minimum(&bound)?.broadcast_maximum(&bound.neg()?)?
        } else {
            grad.clone()
        };
        base - grad.broadcast_mul(a)?
    }

    /// Thinks `steps` steps from `z0` (B, n, V), with the step size scaled by
    /// `step_scale` (1 = as trained). Returns every z(s) and its energy.
    pub fn think(&self, ctx: &Context, z0: &Tensor, steps: usize, step_scale: f64) -> Result<Thought> {
        let a = (self.step_size()? * step_scale)?;
        let mut z = z0.clone();
        let (mut logits, mut energies) = (Vec::with_capacity(steps + 1), Vec::with_capacity(steps + 1));
        for _ in 0..steps {
            let eg = self.energy_grad(ctx, &z, true)?;
            logits.push(z.clone());
            energies.push(eg.energy);
            z = self.step(&z, &eg.grad.expect("asked for the gradient"), &a)?.detach();
        }
        energies.push(self.energy_grad(ctx, &z, false)?.energy);
        logits.push(z);
        Ok(Thought { logits, energies })
    }

    /// The training loss: the mean over the plan's thinking steps of the
    /// cross-entropy of softmax(z(s+1)) against the next characters (or the
    /// last step's alone, `final_only`). As in the reference, z is detached
    /// between steps, so each step's loss differentiates through that step's
    /// input gradient only. (The reference's S2 script keeps the candidate
    /// attached, `no_mcmc_detach`, but with `truncate_mcmc` the earlier
    /// steps' gradients are taken without a graph, so the parameters still
    /// receive the last step's second-order term only: the same gradient.)
    /// Also returns the final candidates z(steps), detached (for a replay buffer).
    pub fn train_loss(&self, ids: &Tensor, targets: &Tensor, plan: &ThinkPlan) -> crate::Result<(Tensor, Tensor)> {
        if plan.steps == 0 {
            return Err(Error::Config("EBT training needs at least one thinking step".into()));
        }
        let ctx = self.context(ids)?;
        let a = match &plan.step_scale {
            Some(scale) => scale.broadcast_mul(&self.step_size()?)?,
            None => self.step_size()?,
        };
        let mut z = plan.z0.clone();
        let mut total: Option<Tensor> = None;
        let mut last_energy = None;
        for s in 0..plan.steps {
            // Langevin noise on z(s), then z(s+1) = step(z(s))
            if let Some(noise) = plan.langevin.get(s) {
                z = (z + noise)?;
            }
            let eg = self.energy_grad(&ctx, &z, true)?;
            last_energy = Some(eg.energy);
            let grad = eg.grad.expect("asked for the gradient");
            let next = self.step(&z, &grad, &a)?;
            if !plan.final_only || s + 1 == plan.steps {
                let ce = crate::model::smoothed_cross_entropy(&next, targets, target_smoothing(plan.soften, s, plan.steps))?;
                total = Some(match total {
                    Some(t) => (t + ce)?,
                    None => ce,
                });
            }
            z = next.detach();
        }
        let counted = if plan.final_only { 1 } else { plan.steps };
        let mut loss = (total.expect("at least one step") / counted as f64)?;
        let EnergyLoss { contrastive, calibrate } = plan.energy_loss;
        if contrastive > 0.0 {
            // softplus(E(one-hot truth) - E(last step's input))
            let v = self.cfg.vocab_size;
            let truth = Tensor::ones(targets.dims(), self.dtype(), self.device())?.unsqueeze(D::Minus1)?;
            let onehot = Tensor::zeros((targets.dim(0)?, targets.dim(1)?, v), self.dtype(), self.device())?.scatter_add(
                &targets.unsqueeze(D::Minus1)?.contiguous()?,
                &truth,
                D::Minus1,
            )?;
            let real = self.energy_grad_at(&ctx, &onehot, false)?.energy;
            let gap = (real - last_energy.expect("at least one step"))?;
            let softplus = (gap.relu()? + (gap.abs()?.neg()?.exp()? + 1.0)?.log()?)?;
            loss = (loss + (softplus.mean_all()? * contrastive)?)?;
        }
        if calibrate > 0.0 {
            // minus the mean over sequences of corr(E(z(S)), CE(z(S))), the cross-entropy held fixed
            let energy = self.energy_grad(&ctx, &z, false)?.energy;
            let ce = crate::model::char_cross_entropy(&z, targets)?.reshape(energy.shape())?.detach();
            let centre = |t: &Tensor| t.broadcast_sub(&t.mean_keepdim(D::Minus1)?);
            let (de, dl) = (centre(&energy)?, centre(&ce)?);
            let sum = |t: Tensor| t.sum_keepdim(D::Minus1);
            let root = ((sum(de.sqr()?)? * sum(dl.sqr()?)?)? + CORR_EPS)?.sqrt()?;
            let r = (sum((&de * &dl)?)? / root)?;
            loss = (loss - (r.mean_all()? * calibrate)?)?;
        }
        Ok((loss, z))
    }

    /// Self-verification: thinks `samples` candidates from independent noise
    /// for `steps` steps and keeps, per position, the one `verify` scores
    /// lowest. Returns its logits (B, n, V) and score (B, n).
    pub fn predict(&self, ids: &Tensor, steps: usize, samples: usize, verify: Verify, rng: &mut Rng64) -> crate::Result<(Tensor, Tensor)> {
        let (b, n) = ids.dims2()?;
        let ctx = self.context(ids)?;
        let mut best: Option<(Tensor, Tensor)> = None;
        for _ in 0..samples.max(1) {
            let z0 = self.initial_logits(b, n, rng)?;
            let th = self.think(&ctx, &z0, steps, 1.0)?;
            let z = th.logits[steps].clone();
            let e = match verify {
                Verify::MinEnergy => th.energies[steps].clone(),
                Verify::MaxGap => (&th.energies[steps] - &th.energies[0])?,
            };
            best = Some(match best {
                None => (z, e),
                Some((bz, be)) => {
                    // per position: the lower energy wins
                    let take = e.lt(&be)?;
                    let z = take.unsqueeze(D::Minus1)?.broadcast_as(z.shape())?.where_cond(&z, &bz)?;
                    (z, take.where_cond(&e, &be)?)
                }
            });
        }
        Ok(best.expect("at least one sample"))
    }

    /// z(0) ~ N(0, ebt_noise^2) of shape (B, n, V), deterministic in `rng`.
    pub fn initial_logits(&self, b: usize, n: usize, rng: &mut Rng64) -> Result<Tensor> {
        let (v, std) = (self.cfg.vocab_size, self.cfg.ebt_noise);
        let data: Vec<f32> = (0..b * n * v).map(|_| (rng.normal() * std) as f32).collect();
        Tensor::from_vec(data, (b, n, v), self.device())?.to_dtype(self.dtype())
    }
}

/// `dE/dp_in` of one prediction-stream layer from `delta` = dE/dp_out.
fn predict_layer_vjp(layer: &GptLayer, keys: &Tensor, values: &Tensor, s: &Saved, delta: &Tensor) -> Result<Tensor> {
    // MLP branch: p2 = p1 + W2 s(W1 N2(p1) + b1) + b2
    let dh1 = (linear(delta, &layer.w2.t()?, None)? * &s.ds)?;
    let d1 = (delta + norm_vjp(layer.norm, &s.n2, &layer.ln2, &linear(&dh1, &layer.w1.t()?, None)?)?)?;
    // attention branch: p1 = p + Wo att, att = P_real V + P_self v_self
    let da = split_heads(&linear(&d1, &layer.wo.t()?, None)?, layer.n_head)?;
    let dv_self = s.p_self.broadcast_mul(&da)?;
    let dp_real = da.matmul(&values.t()?)?;
    let dp_self = (&da * &s.v_self)?.sum_keepdim(D::Minus1)?;
    // softmax VJP over the real keys and the self key together
    let dot = ((&s.p_real * &dp_real)?.sum_keepdim(D::Minus1)? + (&s.p_self * &dp_self)?)?;
    let ds_real = (&s.p_real * dp_real.broadcast_sub(&dot)?)?;
    let ds_self = (&s.p_self * (dp_self - &dot)?)?;
    let scale = 1.0 / (s.q.dim(3)? as f64).sqrt();
    let dq = ((ds_real.matmul(keys)? + ds_self.broadcast_mul(&s.k_self)?)? * scale)?;
    let dk_self = (ds_self.broadcast_mul(&s.q)? * scale)?;
    let du = (linear(&merge_heads(&dq)?, &layer.wq.t()?, None)?
        + linear(&merge_heads(&dk_self)?, &layer.wk.t()?, None)?
        + linear(&merge_heads(&dv_self)?, &layer.wv.t()?, None)?)?;
    d1 + norm_vjp(layer.norm, &s.n1, &layer.ln1, &du)?
}
