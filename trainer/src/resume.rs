//! What `--resume` may trust: the stored settings are checked like flags
//! would be, a flag that differs from them is refused (only `--iters` may
//! change, and only upward), and the tokenizer must equal the vocabulary
//! the checkpoint was trained with.

use anyhow::{bail, Result};
use nrgpt_core::{ModelConfig, Vocab};
use serde_json::Value;

use crate::train::TrainSettings;

/// The flags a resumed run was given, with the values they ask for.
pub struct Requested {
    pub cfg: ModelConfig,
    pub settings: TrainSettings,
    /// clap ids of the options given on the command line.
    pub given: Vec<String>,
}

/// clap id -> (is a config field, its name in the stored JSON).
fn stored_key(id: &str) -> Option<(bool, &str)> {
    Some(match id {
        "model" => (true, "arch"),
        "heads" => (true, "n_head"),
        "block" => (true, "block_size"),
        "d_model" | "head_dim" | "steps" | "layers" | "ebt_noise" | "ebt_update" | "ebt_input" | "ebt_clamp" | "ff_mult" | "norm" | "eta" | "activation"
        | "eta_init" | "attn_beta" | "block_norm" | "gpt_block" => (true, id),
        "attn_mask" => (true, "attn_diag"),
        "batch" | "lr" | "min_lr" | "warmup" | "weight_decay" | "dropout" | "attn_dropout" | "grad_clip" | "eval_every" | "eval_iters" | "seed" => (false, id),
        // EBT's regularisers, stored under settings.ebt
        "ebt_langevin" | "ebt_step_jitter" | "ebt_extra_steps" | "ebt_replay" | "ebt_step_lr_mult" | "ebt_truncate" | "ebt_step_size" | "ebt_contrastive"
        | "ebt_calibrate" | "ebt_soften" => (false, id),
        _ => return None,
    })
}

/// Refuses given flags whose values differ from the run's stored ones.
pub fn check_flags(stored_cfg: &ModelConfig, stored: &TrainSettings, req: &Requested) -> Result<()> {
    let (cfg_a, cfg_b) = (serde_json::to_value(stored_cfg)?, serde_json::to_value(&req.cfg)?);
    let (set_a, set_b) = (serde_json::to_value(stored)?, serde_json::to_value(&req.settings)?);
    let mut differ = Vec::new();
    for id in &req.given {
        let Some((in_cfg, key)) = stored_key(id) else { continue };
        let (a, b): (&Value, &Value) = match (in_cfg, key.strip_prefix("ebt_")) {
            (true, _) => (&cfg_a[key], &cfg_b[key]),
            (false, Some(field)) => (&set_a["ebt"][field], &set_b["ebt"][field]),
            (false, None) => (&set_a[key], &set_b[key]),
        };
        if a != b {
            differ.push(format!("--{} {b} (the run has {a})", id.replace('_', "-")));
        }
    }
    if !differ.is_empty() {
        bail!(
            "--resume continues a run with the settings it was started with; these flags differ: {}. Drop them, or start a new run in another --out",
            differ.join(", ")
        );
    }
    Ok(())
}

/// The iteration count a resumed run goes to: its own, or more.
pub fn resumed_iters(stored: usize, done: usize, asked: Option<usize>) -> Result<usize> {
    match asked {
        Some(n) if n < done => bail!("--iters {n} is below the {done} iterations this run has done: pass {done} or more"),
        Some(n) => Ok(n),
        None => Ok(stored.max(done)),
    }
}

/// The tokenizer given with `--vocab` must be the checkpoint's vocabulary.
pub fn check_vocab(stored: &Vocab, given: &Vocab) -> Result<()> {
    if stored == given {
        return Ok(());
    }
    let at = stored.chars().iter().zip(given.chars()).position(|(a, b)| a != b);
    let detail = match at {
        Some(i) => format!("id {i} is {:?} in the checkpoint but {:?} in the tokenizer", stored.chars()[i], given.chars()[i]),
        None => format!("the checkpoint has {} characters, the tokenizer {}", stored.len(), given.len()),
    };
    bail!("the tokenizer (--vocab) is not the vocabulary this run was trained with: {detail}")
}

impl TrainSettings {
    /// The ranges the CLI enforces, for settings read back from a checkpoint.
    pub fn validate(&self) -> Result<()> {
        let fail = |field: &str, value: String, rule: &str| bail!("stored setting `{field}` is {value}: {rule}");
        for (field, v) in [("batch", self.batch), ("iters", self.iters), ("eval_every", self.eval_every), ("eval_iters", self.eval_iters)] {
            if v == 0 {
                return fail(field, v.to_string(), "must be >= 1");
            }
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return fail("lr", self.lr.to_string(), "must be finite and > 0");
        }
        for (field, v) in [("min_lr", self.min_lr), ("weight_decay", self.weight_decay), ("grad_clip", self.grad_clip)] {
            if !(v >= 0.0 && v.is_finite()) {
                return fail(field, v.to_string(), "must be finite and >= 0");
            }
        }
        for (field, v) in [("dropout", self.dropout), ("attn_dropout", self.attn_dropout)] {
            if !(0.0..1.0).contains(&v) {
                return fail(field, v.to_string(), "must be in [0, 1)");
            }
        }
        Ok(())
    }
}
