//! What the candle paths train and evaluate: a language model whose forward
//! gives the logits (NRGPT, GPT), or an EBT that thinks its way to them.

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use nrgpt_core::ebt::{Ebt, ThinkPlan, Verify};
use nrgpt_core::model::{cross_entropy, Dropout, Weights};
use nrgpt_core::rng::Rng64;
use nrgpt_core::{Arch, ForwardOpts, Model, ModelConfig};

use crate::fast::ebt::think::predict;

pub enum Net {
    Lm(Model),
    /// The oracle trains (the candle backend); evaluation thinks on the fast
    /// backend's passes from the same weights (`fast::ebt::think::predict`, held to `Ebt::predict`).
    Ebt {
        oracle: Ebt,
        weights: Weights,
    },
}

/// How an EBT predicts when evaluated: thinking steps (default: as trained)
/// and candidates kept by lowest energy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Thinking {
    pub steps: Option<usize>,
    pub samples: usize,
    pub verify: Verify,
}

impl Net {
    pub fn new(cfg: &ModelConfig, w: &Weights) -> Result<Self> {
        Ok(if cfg.arch == Arch::Ebt { Net::Ebt { oracle: Ebt::new(cfg, w)?, weights: w.clone() } } else { Net::Lm(Model::new(cfg, w)?) })
    }

    pub fn cfg(&self) -> &ModelConfig {
        match self {
            Net::Lm(m) => &m.cfg,
            Net::Ebt { oracle, .. } => &oracle.cfg,
        }
    }

    pub fn device(&self) -> &Device {
        match self {
            Net::Lm(m) => m.device(),
            Net::Ebt { oracle, .. } => oracle.device(),
        }
    }

    /// Next-character logits (B, n, V) for `ids`: the forward with `think.steps`
    /// recursion steps, or an EBT's best of `think.samples` thoughts from noise drawn from `seed`.
    pub fn logits(&self, ids: &Tensor, think: Thinking, seed: u64) -> Result<Tensor> {
        Ok(match self {
            Net::Lm(m) => m.forward(ids, ForwardOpts { steps: think.steps, ..Default::default() })?.logits,
            Net::Ebt { oracle, weights } => {
                let steps = think.steps.unwrap_or(oracle.cfg.steps);
                predict(&oracle.cfg, weights, ids, steps, think.samples.max(1), think.verify, &mut Rng64::new(seed))?
            }
        })
    }

    /// The training loss of one batch, and an EBT's final candidates; an EBT thinks as `plan` says.
    pub fn train_loss(
        &self,
        x: &Tensor,
        y: &Tensor,
        dropout: &mut Dropout,
        attn_dropout: &mut Dropout,
        plan: Option<&ThinkPlan>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        match self {
            Net::Lm(m) => {
                let logits = m.forward(x, ForwardOpts { dropout: Some(dropout), attn_dropout: Some(attn_dropout), ..Default::default() })?.logits;
                Ok((cross_entropy(&logits, y)?, None))
            }
            Net::Ebt { oracle: e, .. } => {
                if dropout.p > 0.0 || attn_dropout.p > 0.0 {
                    bail!("dropout is not implemented for EBT: train it with --dropout 0");
                }
                let plan = plan.context("an EBT trains from a thinking plan")?;
                let (loss, last) = e.train_loss(x, y, plan)?;
                Ok((loss, Some(last)))
            }
        }
    }
}
