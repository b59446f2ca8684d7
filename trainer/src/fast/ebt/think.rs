//! Thinking without training on the fast backend: `Ebt::think` (the candle
//! oracle, crates/core/src/ebt.rs) written with the trainer's own forward and
//! input-gradient passes. The thinking table thinks 16 candidates for 32
//! steps over thousands of characters; on the oracle's tensors that is hours.

use anyhow::{bail, ensure, Result};
use candle_core::{Device, Tensor};
use nrgpt_core::ebt::Verify;
use nrgpt_core::model::Weights;
use nrgpt_core::rng::Rng64;
use nrgpt_core::ModelConfig;

use super::tape::EbtWorkspace;
use crate::fast::buffers::Buffers;
use super::{predict, real_stream, step_size, FastEbt};
use crate::fast::{num_threads, run_chunks};

/// z(s) (rows of V) and E(s) (one per row) for s = 0..=steps, rows in batch order.
pub struct Trajectory {
    pub logits: Vec<Vec<f32>>,
    pub energies: Vec<Vec<f32>>,
}

impl FastEbt {
    /// Thinks `steps` steps of the model's update (z <- z - a dE/dz, or
    /// softmax(z) - a dE/dy) from `z0` (batch * block rows of V) for the
    /// windows `ids` (batch * block tokens). `langevin[s]` (batch * block
    /// rows of V), when given, is added to z(s) before step s takes its
    /// gradient, as the reference's inference does; z(s) and E(s) are
    /// recorded before the noise, so a trajectory reads as clean candidates.
    pub fn think(&mut self, ids: &[u32], z0: &[f32], steps: usize, langevin: &[Vec<f32>]) -> Result<Trajectory> {
        let (n, v) = (self.cfg.block_size, self.cfg.vocab_size);
        let total = self.batch * n;
        ensure!(ids.len() == total, "a batch of {} tokens, expected {total}", ids.len());
        ensure!(z0.len() == total * v, "z0 has {} values, expected {}", z0.len(), total * v);
        ensure!(langevin.len() <= steps && langevin.iter().all(|l| l.len() == total * v), "Langevin noise must be one z per step taken");
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= v) {
            bail!("token id {bad} is outside the vocabulary of {v}");
        }
        self.lay.transposes(&self.params, &mut self.pt);
        let (cfg, lay, p, pt) = (&self.cfg, &self.lay, &self.params, &self.pt);
        let ix = self.ix();
        let (a, _) = step_size(ix, p);
        let bound = cfg.ebt_grad_bound(a);
        let starts = self.chunk_starts();
        let parts: Vec<std::sync::Mutex<Trajectory>> =
            self.ws.iter().map(|_| std::sync::Mutex::new(Trajectory { logits: Vec::new(), energies: Vec::new() })).collect();
        run_chunks(&self.ws, self.threads, |i, ws| {
            let (row0, rows) = (starts[i], ws.dims.r);
            real_stream(cfg, lay, ix, p, pt, ws, &ids[row0..row0 + rows]);
            ws.z.copy_from_slice(&z0[row0 * v..(row0 + rows) * v]);
            let mut out = parts[i].lock().unwrap();
            for s in 0..=steps {
                predict::forward(cfg, lay, ix, p, pt, ws);
                out.energies.push(predict::energies(lay, p, ws));
                out.logits.push(ws.z.clone());
                if s < steps {
                    // the step starts from the noisy point; the trajectory keeps the clean one
                    if let Some(noise) = langevin.get(s) {
                        ws.z.iter_mut().zip(&noise[row0 * v..(row0 + rows) * v]).for_each(|(z, n)| *z += n);
                        predict::forward(cfg, lay, ix, p, pt, ws);
                    }
                    predict::input_grad(cfg, lay, ix, p, ws);
                    let EbtWorkspace { z, y, g, .. } = ws;
                    for ((zr, yr), gr) in z.chunks_exact_mut(v).zip(y.chunks_exact(v)).zip(g.chunks_exact(v)) {
                        cfg.ebt_update.step_row(zr, yr, gr, a, bound);
                    }
                }
            }
        });
        let parts: Vec<Trajectory> = parts.into_iter().map(|m| m.into_inner().unwrap()).collect();
        let join = |f: &dyn Fn(&Trajectory) -> &Vec<Vec<f32>>, s: usize| parts.iter().flat_map(|t| f(t)[s].iter().copied()).collect();
        Ok(Trajectory { logits: (0..=steps).map(|s| join(&|t| &t.logits, s)).collect(), energies: (0..=steps).map(|s| join(&|t| &t.energies, s)).collect() })
    }
}

/// z(0) ~ N(0, ebt_noise^2) for `rows` rows of V, drawn as `Ebt::initial_logits` draws it.
pub fn initial_logits(cfg: &ModelConfig, rows: usize, rng: &mut Rng64) -> Vec<f32> {
    (0..rows * cfg.vocab_size).map(|_| (rng.normal() * cfg.ebt_noise) as f32).collect()
}

/// Self-verification as the oracle's `Ebt::predict`: `samples` candidates
/// from N(0, ebt_noise^2) noise drawn from `rng` in the same order, `steps`
/// steps each, kept per position by `verify`. Returns the logits (B, n, V).
pub fn predict(cfg: &ModelConfig, weights: &Weights, ids: &Tensor, steps: usize, samples: usize, verify: Verify, rng: &mut Rng64) -> Result<Tensor> {
    let (b, n) = ids.dims2()?;
    ensure!(n == cfg.block_size, "windows of {n} tokens, the model's block is {}", cfg.block_size);
    let v = cfg.vocab_size;
    let x: Vec<u32> = ids.flatten_all()?.to_vec1()?;
    let mut fast = FastEbt::new(cfg, weights, b, num_threads())?;
    let mut best: Option<(Vec<f32>, Vec<f32>)> = None;
    for _ in 0..samples.max(1) {
        let z0 = initial_logits(cfg, b * n, rng);
        let th = fast.think(&x, &z0, steps, &[])?;
        let score: Vec<f32> = th.energies[steps].iter().zip(&th.energies[0]).map(|(&e, &e0)| verify.score(e0, e)).collect();
        let z = &th.logits[steps];
        match &mut best {
            None => best = Some((z.clone(), score)),
            Some((bz, bs)) => {
                // per position: the strictly lower score wins
                for (row, (s, bs)) in score.iter().zip(bs.iter_mut()).enumerate() {
                    if s < bs {
                        *bs = *s;
                        bz[row * v..(row + 1) * v].copy_from_slice(&z[row * v..(row + 1) * v]);
                    }
                }
            }
        }
    }
    let (z, _) = best.expect("at least one sample");
    Ok(Tensor::from_vec(z, (b, n, v), &Device::Cpu)?)
}
