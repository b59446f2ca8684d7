//! EBT on the fast backend: the same training loss as crates/core/src/ebt.rs
//! `train_loss` (trainer/tests/fast_ebt.rs holds every gradient to candle's),
//! with its parameter gradient computed exactly, in f32, by hand.
//!
//! Per batch the real stream runs once (the GPT layers of gpt_baselines.rs,
//! keeping each layer's keys and values; of the last layer only those, as
//! nothing reads its output). Per thinking step s, with z(s)
//! detached and its Langevin noise added: the prediction stream's forward and
//! its input-gradient pass give g = dE/dz or dE/dy (predict.rs); z(s+1) =
//! z(s) - a s_A g (or softmax(z(s)) - a s_A g) and its cross-entropy give
//! dL/dz(s+1); the loss reaches the parameters only through g, so its
//! gradient is that of a directional derivative of E, taken by a
//! tangent pass and its reverse (second.rs: exact second order, not a
//! finite-difference Hessian-vector product, so the agreement with candle is
//! f32 round-off and no step size has to be tuned). The gradients every
//! step sends into the real keys and values are summed, and the real stream's
//! backward runs once at the end.
//!
//! Chunks of whole sequences run in parallel as in `FastModel` (deterministic
//! for any thread count).

pub mod attend;
pub mod norm_tangent;
pub mod predict;
pub mod second;
pub mod tape;
pub mod think;

use std::sync::Mutex;

use anyhow::{bail, ensure, Result};
use nrgpt_core::ebt::{sequence_correlation, target_smoothing, EnergyLoss, ThinkPlan, MIN_STEP};
use nrgpt_core::layout::{Body, EbtIdx, WeightLayout};
use nrgpt_core::model::Weights;
use nrgpt_core::{Arch, ModelConfig};

use super::backward::embed_bwd;
use super::buffers::Buffers;
use super::forward::embed;
use super::gpt_baselines::{layer_backward, layer_forward, LayerScratch};
use super::gemm::{mm, View};
use super::math::{char_losses, cross_entropy_rows, norm_bwd, norm_fwd};
use super::{run_chunks, sum_in_order, SEQS_PER_CHUNK};
use tape::EbtWorkspace;

/// A [`ThinkPlan`] as flat f32 rows (B * n rows of V, or of 1 for the step scale).
pub struct FlatPlan {
    pub z0: Vec<f32>,
    pub steps: usize,
    pub step_scale: Option<Vec<f32>>,
    pub langevin: Vec<Vec<f32>>,
    pub final_only: bool,
    pub soften: f64,
    pub energy_loss: EnergyLoss,
}

impl FlatPlan {
    pub fn new(plan: &ThinkPlan) -> Result<Self> {
        let flat = |t: &candle_core::Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?) };
        Ok(Self {
            z0: flat(&plan.z0)?,
            steps: plan.steps,
            step_scale: plan.step_scale.as_ref().map(flat).transpose()?,
            langevin: plan.langevin.iter().map(flat).collect::<Result<_>>()?,
            final_only: plan.final_only,
            soften: plan.soften,
            energy_loss: plan.energy_loss,
        })
    }
}

pub struct FastEbt {
    pub cfg: ModelConfig,
    pub lay: WeightLayout,
    pub params: Vec<Vec<f32>>,
    /// dL/dparam of the last `loss_and_grad`.
    pub grads: Vec<Vec<f32>>,
    pub batch: usize,
    ws: Vec<Mutex<EbtWorkspace>>,
    threads: usize,
    pt: Vec<Vec<f32>>,
}

/// One chunk's slice of the plan.
struct ChunkPlan<'a> {
    z0: &'a [f32],
    scale: Option<&'a [f32]>,
    langevin: Vec<&'a [f32]>,
    steps: usize,
    final_only: bool,
    soften: f64,
    energy_loss: EnergyLoss,
    /// Tokens in the whole batch (the cross-entropy's mean).
    total: usize,
}

impl FastEbt {
    pub fn new(cfg: &ModelConfig, weights: &Weights, batch: usize, threads: usize) -> Result<Self> {
        cfg.validate()?;
        ensure!(cfg.arch == Arch::Ebt, "the fast EBT trainer needs an EBT config, not `{}`", cfg.arch.name());
        ensure!(batch > 0, "batch must be positive");
        let lay = WeightLayout::new(cfg);
        let params = lay.from_weights(weights, "")?;
        let chunks = batch.div_ceil(SEQS_PER_CHUNK);
        let ws = (0..chunks).map(|c| Mutex::new(EbtWorkspace::new(cfg, batch / chunks + usize::from(c < batch % chunks), lay.zeros()))).collect();
        Ok(Self { cfg: cfg.clone(), grads: lay.zeros(), lay, params, batch, ws, threads: threads.clamp(1, chunks), pt: Vec::new() })
    }

    fn ix(&self) -> &EbtIdx {
        match &self.lay.body {
            Body::Ebt(ix) => ix,
            _ => unreachable!("checked in new"),
        }
    }

    /// The training loss of the batch (`ids`, `tgt`: batch * block tokens) thinking
    /// as `plan` says, its gradient into `self.grads`, and the final candidates z(steps).
    pub fn loss_and_grad(&mut self, ids: &[u32], tgt: &[u32], plan: &FlatPlan) -> Result<(f64, Vec<f32>)> {
        let (n, v) = (self.cfg.block_size, self.cfg.vocab_size);
        let total = self.batch * n;
        ensure!(ids.len() == total && tgt.len() == total, "batch of {} tokens, expected {total}", ids.len());
        if let Some(&bad) = ids.iter().chain(tgt).find(|&&t| t as usize >= v) {
            bail!("token id {bad} is outside the vocabulary of {v}");
        }
        ensure!(plan.steps > 0, "EBT training needs at least one thinking step");
        ensure!(plan.z0.len() == total * v, "the plan's z0 has {} values, expected {}", plan.z0.len(), total * v);
        ensure!(plan.step_scale.as_ref().is_none_or(|s| s.len() == total), "the plan's step scale has the wrong size");
        ensure!(plan.langevin.is_empty() || plan.langevin.len() >= plan.steps, "the plan has noise for {} of {} steps", plan.langevin.len(), plan.steps);
        ensure!(plan.langevin.iter().all(|e| e.len() == total * v), "the plan's Langevin noise has the wrong size");
        self.lay.transposes(&self.params, &mut self.pt);
        let (cfg, lay, params, pt, ix) = (&self.cfg, &self.lay, &self.params, &self.pt, self.ix());
        let starts = self.chunk_starts();
        run_chunks(&self.ws, self.threads, |i, ws| {
            let (row0, rows) = (starts[i], ws.dims.r);
            let cp = ChunkPlan {
                z0: &plan.z0[row0 * v..(row0 + rows) * v],
                scale: plan.step_scale.as_ref().map(|s| &s[row0..row0 + rows]),
                langevin: plan.langevin.iter().take(plan.steps).map(|e| &e[row0 * v..(row0 + rows) * v]).collect(),
                steps: plan.steps,
                final_only: plan.final_only,
                soften: plan.soften,
                energy_loss: plan.energy_loss,
                total,
            };
            chunk(cfg, lay, ix, params, pt, ws, &ids[row0..row0 + rows], &tgt[row0..row0 + rows], &cp);
        });
        let ws: Vec<&EbtWorkspace> = self.ws.iter_mut().map(|w| &*w.get_mut().unwrap()).collect();
        sum_in_order(&mut self.grads, ws.iter().map(|w| &w.grads[..]));
        let loss: f64 = ws.iter().map(|w| w.loss_sum).sum();
        let z: Vec<f32> = ws.iter().flat_map(|w| w.z.iter().copied()).collect();
        Ok((loss / total as f64, z))
    }

    /// The first row of each chunk's workspace in the batch.
    fn chunk_starts(&self) -> Vec<usize> {
        self.ws
            .iter()
            .scan(0, |acc, w| {
                let s = *acc;
                *acc += w.lock().unwrap().dims.r;
                Some(s)
            })
            .collect()
    }

    pub fn weights(&self) -> Result<Weights> {
        self.lay.to_weights(&self.params, "")
    }

    pub fn grad_weights(&self) -> Result<Weights> {
        self.lay.to_weights(&self.grads, "")
    }
}

/// The real stream of a chunk, once: every layer's tape, and of the last
/// layer only the keys and values (the predictions read nothing else of it).
fn real_stream(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], pt: &[Vec<f32>], ws: &mut EbtWorkspace, ids: &[u32]) {
    let dims = ws.dims;
    let (n, d) = (dims.n, dims.d);
    let layers = ix.layers.len();
    embed(lay, p, ids, n, d, None, &mut ws.real[0].x);
    for l in 0..layers - 1 {
        let (head, tail) = ws.real.split_at_mut(l + 1);
        layer_forward(cfg, &ix.layers[l], p, pt, &dims, &mut head[l], &mut tail[0].x, (&mut ws.tmp_d, &mut ws.nn), (None, None, None));
    }
    let (top, top_ix) = (&mut ws.real[layers - 1], &ix.layers[layers - 1]);
    norm_fwd(cfg.norm, &top.x, &p[top_ix.ln1], cfg.eps as f32, d, &mut top.xh1, &mut top.rstd1, &mut top.g1);
    mm(&mut top.k, View::rm(&top.g1, dims.r, d), View::rm(&pt[top_ix.wk], d, dims.hd), false, 1.0);
    mm(&mut top.v, View::rm(&top.g1, dims.r, d), View::rm(&pt[top_ix.wv], d, dims.hd), false, 1.0);
}

/// a = max(e^log_a, MIN_STEP) and da/dlog_a (a where the exponential is above the floor, else 0).
fn step_size(ix: &EbtIdx, p: &[Vec<f32>]) -> (f32, f64) {
    let ea = (p[ix.log_a][0] as f64).exp();
    if ea > MIN_STEP {
        (ea as f32, ea)
    } else {
        (MIN_STEP as f32, 0.0)
    }
}

/// The losses on the energy's level ([`EnergyLoss`]), their values into
/// `ws.loss_sum` and their gradients into `ws.grads`, after the thinking
/// steps: `ws.z` holds z(S), `ws.z_next` the last step's input.
#[allow(clippy::too_many_arguments)]
fn energy_losses(
    cfg: &ModelConfig,
    lay: &WeightLayout,
    ix: &EbtIdx,
    p: &[Vec<f32>],
    pt: &[Vec<f32>],
    ws: &mut EbtWorkspace,
    tgt: &[u32],
    plan: &ChunkPlan,
    guess_energy: &[f32],
) {
    let v = ws.dims.v;
    let EnergyLoss { contrastive, calibrate } = plan.energy_loss;
    let inv_total = 1.0 / plan.total as f64;
    if calibrate > 0.0 {
        // minus the mean over sequences of corr(E(z(S)), CE(z(S))), the cross-entropy held fixed
        predict::forward(cfg, lay, ix, p, pt, ws);
        let energy = predict::energies(lay, p, ws);
        let ce: Vec<f32> = char_losses(&ws.z, tgt, v).into_iter().map(|l| l as f32).collect();
        let n = ws.dims.n;
        let mut c = Vec::with_capacity(energy.len());
        for (e, l) in energy.chunks_exact(n).zip(ce.chunks_exact(n)) {
            let (r, grad) = sequence_correlation(e, l);
            // each sequence's r weighs n / total in the loss, a mean over sequences
            ws.loss_sum -= calibrate * r * n as f64;
            c.extend(grad.iter().map(|g| (-calibrate * n as f64 * inv_total * *g as f64) as f32));
        }
        second::energy_backward(cfg, lay, ix, p, ws, &c);
    }
    if contrastive > 0.0 {
        // softplus(E(one-hot truth) - E(guess)): d/dE(truth) = sigmoid(gap) = -d/dE(guess)
        ws.y.fill(0.0);
        for (row, &t) in tgt.iter().enumerate() {
            ws.y[row * v + t as usize] = 1.0;
        }
        predict::forward_at_y(cfg, lay, ix, p, pt, ws);
        let real = predict::energies(lay, p, ws);
        let mut c = vec![0f32; real.len()];
        for (row, (&er, &eg)) in real.iter().zip(guess_energy).enumerate() {
            let gap = (er - eg) as f64;
            ws.loss_sum += contrastive * (gap.max(0.0) + (-gap.abs()).exp().ln_1p());
            c[row] = (contrastive / (1.0 + (-gap).exp()) * inv_total) as f32;
        }
        second::energy_backward(cfg, lay, ix, p, ws, &c);
        // the guess: the forward again at the last step's input
        std::mem::swap(&mut ws.z, &mut ws.z_next);
        predict::forward(cfg, lay, ix, p, pt, ws);
        c.iter_mut().for_each(|x| *x = -*x);
        second::energy_backward(cfg, lay, ix, p, ws, &c);
        std::mem::swap(&mut ws.z, &mut ws.z_next);
    }
}

/// Forward and backward of one chunk, every thinking step; leaves its gradients, loss and final z in `ws`.
#[allow(clippy::too_many_arguments)]
fn chunk(
    cfg: &ModelConfig,
    lay: &WeightLayout,
    ix: &EbtIdx,
    p: &[Vec<f32>],
    pt: &[Vec<f32>],
    ws: &mut EbtWorkspace,
    ids: &[u32],
    tgt: &[u32],
    plan: &ChunkPlan,
) {
    let dims = ws.dims;
    let (n, d, v) = (dims.n, dims.d, dims.v);
    ws.grads.iter_mut().for_each(|g| g.fill(0.0));
    ws.kbar.iter_mut().chain(ws.vbar.iter_mut()).for_each(|g| g.fill(0.0));
    ws.loss_sum = 0.0;
    real_stream(cfg, lay, ix, p, pt, ws, ids);
    let layers = ix.layers.len();
    let (a, dadlog) = step_size(ix, p);
    let bound = cfg.ebt_grad_bound(a);
    // each step's share of the loss: the mean over steps, or the last step alone
    let weight = |s: usize| if plan.final_only { f32::from(u8::from(s + 1 == plan.steps)) } else { 1.0 / plan.steps as f32 };
    let mut dlog_a = 0.0f64;
    // the energy at the last step's input (the contrastive loss's guess)
    let mut guess_energy = Vec::new();
    ws.z.copy_from_slice(plan.z0);
    for s in 0..plan.steps {
        if let Some(noise) = plan.langevin.get(s) {
            ws.z.iter_mut().zip(noise.iter()).for_each(|(z, e)| *z += e);
        }
        predict::forward(cfg, lay, ix, p, pt, ws);
        if s + 1 == plan.steps && plan.energy_loss.contrastive > 0.0 {
            guess_energy = predict::energies(lay, p, ws);
        }
        predict::input_grad(cfg, lay, ix, p, ws);
        // z(s+1) = z(s) - a s_A g, or softmax(z(s)) - a s_A g
        let EbtWorkspace { z, z_next, y, g, u, zero_v, loss_sum, .. } = ws;
        z_next.copy_from_slice(z);
        for (row, ((zn, yr), gr)) in z_next.chunks_exact_mut(v).zip(y.chunks_exact(v)).zip(g.chunks_exact(v)).enumerate() {
            cfg.ebt_update.step_row(zn, yr, gr, a * plan.scale.map_or(1.0, |sc| sc[row]), bound);
        }
        let w = weight(s);
        if w > 0.0 {
            // its cross-entropy, and dL/dz(s+1) (times the step's share) into u
            u.copy_from_slice(z_next);
            let ls = target_smoothing(plan.soften, s, plan.steps) as f32;
            *loss_sum += cross_entropy_rows(u, zero_v, tgt, v, plan.total, ls) * w as f64;
            // u = dL/dg = -a s_A dL/dz(s+1); dL/da = -sum_A s_A g_A . dL/dz(s+1)
            for (row, (ur, gr)) in u.chunks_exact_mut(v).zip(g.chunks_exact(v)).enumerate() {
                let sc = plan.scale.map_or(1.0, |sc| sc[row]);
                let mut dot = 0.0f32;
                for (x, g) in ur.iter_mut().zip(gr) {
                    // a clamped entry moves by ±sc ebt_clamp whatever g and a: no gradient
                    *x *= if g.abs() > bound { 0.0 } else { w };
                    dot += *x * g;
                    *x *= -a * sc;
                }
                dlog_a -= (sc * dot) as f64 * dadlog;
            }
            second::tangent(cfg, lay, ix, p, pt, ws);
            second::backward(cfg, lay, ix, p, ws);
        }
        std::mem::swap(&mut ws.z, &mut ws.z_next);
    }
    ws.grads[ix.log_a][0] += dlog_a as f32;
    energy_losses(cfg, lay, ix, p, pt, ws, tgt, plan, &guess_energy);
    // the real stream's backward, once, from what every step sent its keys and values
    let EbtWorkspace { real, kbar, vbar, dx, dg, tmp_d, tmp_hd, dq, dk, dv, ta, nn, grads, .. } = ws;
    let (r, hd) = (dims.r, dims.hd);
    let (top, top_ix, l) = (&real[layers - 1], &ix.layers[layers - 1], layers - 1);
    // k, v = g1 W^T: dg1 = dk Wk + dv Wv, dW += d^T g1, then the norm
    mm(dg, View::rm(&kbar[l], r, hd), View::rm(&p[top_ix.wk], hd, d), false, 1.0);
    mm(dg, View::rm(&vbar[l], r, hd), View::rm(&p[top_ix.wv], hd, d), true, 1.0);
    mm(&mut grads[top_ix.wk], View::rm(&kbar[l], r, hd).t(), View::rm(&top.g1, r, d), true, 1.0);
    mm(&mut grads[top_ix.wv], View::rm(&vbar[l], r, hd).t(), View::rm(&top.g1, r, d), true, 1.0);
    dx.fill(0.0);
    norm_bwd(cfg.norm, dg, &top.xh1, &top.rstd1, &p[top_ix.ln1], d, dx, &mut grads[top_ix.ln1]);
    let mut sc = LayerScratch { dx, dg, tmp_d, tmp_hd, dq, dk, dv, ta, nn };
    for l in (0..layers - 1).rev() {
        layer_backward(cfg, &ix.layers[l], p, &dims, &real[l], &mut sc, grads, (None, None, None), Some((&kbar[l], &vbar[l])));
    }
    embed_bwd(lay, ids, n, d, None, sc.dx, grads);
}
