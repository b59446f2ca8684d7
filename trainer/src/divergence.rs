//! Stops a run whose loss has gone non-finite or exploded, on the step it
//! happens and before any checkpoint of that state is written, saying that
//! the run diverged, where, and what to resume from.

use std::collections::VecDeque;
use std::path::PathBuf;

use anyhow::{bail, Result};
use nrgpt_core::{Arch, ModelConfig};

use crate::think_plan::EbtRegularisers;

/// Step losses remembered for the running median.
const WINDOW: usize = 64;
/// Steps the median needs before it is trusted.
const MEDIAN_MIN: usize = 8;
/// A step loss this many times the running median is an explosion.
const MEDIAN_FACTOR: f64 = 10.0;
/// A loss this many times what a fresh model starts from is an explosion,
/// from the first update on (see [`start_loss`]): training lowers the loss,
/// so 3x the start has learned far worse than nothing. Measured on 60
/// iterations of the tests' d = 32 models, the largest step loss over the
/// start was 1.01 (NRGPT, lr 3e-3), 1.05 (GPT, lr 3e-2, no warm-up), 1.04 and
/// 1.06 (EBT, lr 3e-3 and 1e-2), 1.00 (EBT, start noise 3), 0.58 (ebt-s2);
/// lr 1 reached 4.5x on its first update, lr 100 NaN or 24,000x (GPT) and
/// 3.9x (EBT, its third). The median rule caps at the same 3x of ln V once
/// a run beats it.
const START_FACTOR: f64 = 3.0;

/// The loss a fresh model starts from, the ceiling's unit. A GPT or NRGPT
/// starts with logits near 0: the uniform guess, ln V. An EBT's candidate
/// starts as logits drawn N(0, s^2) (s: its start noise, plus the Langevin
/// noise it adds before each step), whose cross-entropy is at most
/// ln V + min(s^2 / 2, s sqrt(2 ln V)) in expectation (Jensen's bound on
/// logsumexp, and the expected maximum of V normals). Its energy terms add at
/// most their coefficients (softplus(0) = ln 2 < 1; a correlation is <= 1).
pub fn start_loss(cfg: &ModelConfig, reg: &EbtRegularisers) -> f64 {
    let uniform = (cfg.vocab_size as f64).ln();
    if cfg.arch != Arch::Ebt {
        return uniform;
    }
    let s = cfg.ebt_noise + reg.langevin;
    uniform + (s * s / 2.0).min(s * (2.0 * uniform).sqrt()) + reg.contrastive + reg.calibrate
}

pub struct LossWatch {
    recent: VecDeque<f64>,
    /// ln V: the loss of predicting every character equally.
    uniform: f64,
    /// [`start_loss`] of the run's model, or what it measured before its
    /// first update if that is higher.
    start: f64,
    /// Iteration the run started (or resumed) at, for the message.
    started: usize,
    /// Iteration of the last checkpoint written (None: none yet).
    saved: Option<usize>,
    lr: f64,
    /// The run folder, for the resume command in the message.
    dir: PathBuf,
}

impl LossWatch {
    pub fn new(cfg: &ModelConfig, reg: &EbtRegularisers, started: usize, lr: f64, dir: PathBuf) -> Self {
        let uniform = (cfg.vocab_size as f64).ln();
        // a resumed run's folder holds the checkpoint it started from
        let saved = (started > 0).then_some(started);
        Self { recent: VecDeque::with_capacity(WINDOW), uniform, start: start_loss(cfg, reg), started, saved, lr, dir }
    }

    /// Records that the checkpoint of `iter` was written.
    pub fn saved(&mut self, iter: usize) {
        self.saved = Some(iter);
    }

    /// The limit a loss must stay under, and the rule that sets it.
    fn limit(&self) -> (f64, String) {
        let ceiling = (START_FACTOR * self.start, format!("3x the {:.3} a fresh model starts from", self.start));
        let mut v: Vec<f64> = self.recent.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let median = (v.len() >= MEDIAN_MIN).then(|| v[v.len() / 2]);
        let by_median = match median {
            Some(m) if m < self.uniform => (MEDIAN_FACTOR * m).min(START_FACTOR * self.uniform),
            Some(m) => MEDIAN_FACTOR * m,
            None => f64::INFINITY,
        };
        if by_median < ceiling.0 {
            (by_median, format!("10x the running median, at most 3x the uniform guess's {:.3}", self.uniform))
        } else {
            ceiling
        }
    }

    /// Checks `loss` measured at `iter` (`what`: "training loss", "val loss" ...).
    pub fn check(&mut self, iter: usize, what: &str, loss: f64) -> Result<()> {
        let (limit, rule) = self.limit();
        if loss.is_finite() && iter == 0 {
            // before the first update nothing can have diverged: what the
            // fresh model measures is its start (an EBT with a large step
            // size starts above the formula's estimate)
            self.start = self.start.max(loss);
            return Ok(());
        }
        if loss.is_finite() && loss <= limit {
            return Ok(());
        }
        let cause = if iter <= self.started + 1 && self.started > 0 {
            format!("right after resuming at iteration {}: the checkpoint's state may be damaged, or --lr {} too high", self.started, self.lr)
        } else {
            format!("likely a learning rate too high (--lr {}) or too weak clipping (--grad-clip)", self.lr)
        };
        let ckpt = self.dir.join("ckpt.safetensors");
        let kept = match self.saved {
            Some(at) => format!(
                "{} holds iteration {at}, the last good state: `trainer train --resume --out {}` continues from it with the run's stored settings, so a learning rate too high diverges again; to change --lr, start a new run (--overwrite, or another --out)",
                ckpt.display(),
                self.dir.display()
            ),
            None => "the run has no checkpoint yet".to_string(),
        };
        bail!("the run diverged at iteration {iter}: the {what} is {loss} (limit {limit:.3}: {rule}); {cause}. No checkpoint of this state was written; {kept}")
    }

    /// Checks a step's loss, then remembers it for the median.
    pub fn step(&mut self, iter: usize, loss: f64) -> Result<()> {
        self.check(iter, "training loss", loss)?;
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(loss);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(arch: Arch) -> ModelConfig {
        ModelConfig::new(arch, 65, 32, 2, 2, 16)
    }

    fn watch(arch: Arch, started: usize, lr: f64) -> LossWatch {
        LossWatch::new(&cfg(arch), &EbtRegularisers::default(), started, lr, PathBuf::from("runs/x"))
    }

    #[test]
    fn nan_inf_and_explosions_stop_with_the_iteration() {
        let mut w = watch(Arch::NrgptFf2w, 0, 3e-3);
        for i in 0..20 {
            w.step(i, 4.0 - 0.05 * i as f64).unwrap();
        }
        w.saved(15);
        // 10x the median of ~3.5 is 35, but 3 ln 65 = 12.5 is lower
        w.step(20, 12.0).unwrap();
        for bad in [f64::NAN, f64::INFINITY, 13.0, 1e33] {
            let err = w.check(21, "training loss", bad).unwrap_err().to_string();
            assert!(err.contains("diverged at iteration 21") && err.contains("--lr 0.003") && err.contains("No checkpoint"), "{err}");
            assert!(err.contains("runs/x/ckpt.safetensors holds iteration 15") && err.contains("--resume --out runs/x"), "{err}");
        }
        // with a low median, 10x is the tighter rule
        let mut w = watch(Arch::NrgptFf2w, 0, 1.0);
        (0..20).for_each(|i| w.step(i, 0.5).unwrap());
        assert!(w.step(20, 5.5).is_err() && w.check(20, "val loss", 4.9).is_ok());
    }

    #[test]
    fn the_first_steps_are_bounded_by_the_start_loss_without_history() {
        // the issue's lr-100 run: no median yet, yet 3x ln 65 = 12.5 stops it
        let mut w = watch(Arch::Gpt, 0, 100.0);
        w.step(0, 4.2).unwrap();
        let err = w.step(1, 267.0).unwrap_err().to_string();
        assert!(err.contains("diverged at iteration 1") && err.contains("3x the 4.200 a fresh model starts from"), "{err}");
        assert!(err.contains("the run has no checkpoint yet"), "{err}");
        // an EBT's start noise raises its start: noise 4 adds min(8, 4 sqrt(2 ln 65)) = 8
        let mut c = cfg(Arch::Ebt);
        c.ebt_noise = 4.0;
        let mut w = LossWatch::new(&c, &EbtRegularisers::default(), 0, 3e-3, PathBuf::from("r"));
        assert!(w.check(1, "training loss", 30.0).is_ok() && w.check(1, "training loss", 37.0).is_err());
        // what a fresh model measures before its first update is its start
        w.check(0, "val loss", 20.0).unwrap();
        assert!(w.check(1, "training loss", 59.0).is_ok() && w.check(1, "training loss", 61.0).is_err());
        assert!(w.check(0, "val loss", f64::NAN).is_err(), "a non-finite start is no start");
    }

    #[test]
    fn right_after_a_resume_it_suspects_the_checkpoint() {
        let mut w = watch(Arch::NrgptFf2w, 300, 3e-3);
        assert!(w.check(300, "val loss", 12.0).is_ok(), "no median yet: only the start ceiling");
        let err = w.check(300, "val loss", f64::NAN).unwrap_err().to_string();
        assert!(err.contains("after resuming at iteration 300") && err.contains("damaged") && err.contains("holds iteration 300"), "{err}");
    }
}
