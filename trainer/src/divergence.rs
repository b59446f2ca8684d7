//! Stops a run whose loss has gone non-finite or exploded, before any
//! checkpoint of that state is written, with the iteration and the likely cause.

use std::collections::VecDeque;

use anyhow::{bail, Result};

/// Step losses remembered for the running median.
const WINDOW: usize = 64;
/// A step loss this many times the running median is an explosion.
const MEDIAN_FACTOR: f64 = 10.0;
/// Once a run beats the uniform guess (ln V), a loss this many times ln V
/// is an explosion even where the median rule would allow it.
const UNIFORM_FACTOR: f64 = 3.0;

pub struct LossWatch {
    recent: VecDeque<f64>,
    /// ln V: the loss of predicting every character equally.
    uniform: f64,
    /// Iteration the run started (or resumed) at, for the message.
    started: usize,
    lr: f64,
}

impl LossWatch {
    pub fn new(vocab_size: usize, started: usize, lr: f64) -> Self {
        Self { recent: VecDeque::with_capacity(WINDOW), uniform: (vocab_size as f64).ln(), started, lr }
    }

    fn median(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.recent.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        (v.len() >= 8).then(|| v[v.len() / 2])
    }

    /// Checks `loss` measured at `iter` (`what`: "training loss", "val loss" ...).
    pub fn check(&self, iter: usize, what: &str, loss: f64) -> Result<()> {
        // until the median settles only a non-finite loss stops the run (a
        // large --ebt-noise starts far above the uniform guess, legitimately)
        let limit = match self.median() {
            Some(m) if m < self.uniform => (MEDIAN_FACTOR * m).min(UNIFORM_FACTOR * self.uniform),
            Some(m) => MEDIAN_FACTOR * m,
            None => f64::INFINITY,
        };
        if loss.is_finite() && loss <= limit {
            return Ok(());
        }
        let cause = if iter <= self.started + 1 && self.started > 0 {
            format!("the run diverged right after resuming at iteration {}: the checkpoint's state may be damaged, or --lr {} too high", self.started, self.lr)
        } else {
            format!("likely a learning rate too high (--lr {}) or too weak clipping (--grad-clip)", self.lr)
        };
        let rule = if limit.is_finite() {
            format!(" (limit {limit:.3}: 10x the running median, at most 3x the uniform guess's {:.3})", self.uniform)
        } else {
            String::new()
        };
        bail!("stopped at iteration {iter}: the {what} is {loss}{rule}; {cause}. No checkpoint of this state was written: the last good one is kept")
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

    #[test]
    fn nan_inf_and_explosions_stop_with_the_iteration() {
        let mut w = LossWatch::new(65, 0, 3e-3);
        for i in 0..20 {
            w.step(i, 4.0 - 0.05 * i as f64).unwrap();
        }
        // 10x the median of ~3.5 is 35, but 3 ln 65 = 12.5 is lower
        w.step(20, 12.0).unwrap();
        for bad in [f64::NAN, f64::INFINITY, 13.0, 1e33] {
            let err = w.check(21, "training loss", bad).unwrap_err().to_string();
            assert!(err.contains("iteration 21") && err.contains("--lr 0.003") && err.contains("No checkpoint"), "{err}");
        }
        // with a low median, 10x is the tighter rule
        let mut w = LossWatch::new(65, 0, 1.0);
        (0..20).for_each(|i| w.step(i, 0.5).unwrap());
        assert!(w.step(20, 5.5).is_err() && w.check(20, "val loss", 4.9).is_ok());
    }

    #[test]
    fn right_after_a_resume_it_suspects_the_checkpoint() {
        let w = LossWatch::new(65, 300, 3e-3);
        assert!(w.check(300, "val loss", 400.0).is_ok(), "no median yet: only non-finite stops");
        let err = w.check(300, "val loss", f64::NAN).unwrap_err().to_string();
        assert!(err.contains("after resuming at iteration 300") && err.contains("damaged"), "{err}");
    }
}
