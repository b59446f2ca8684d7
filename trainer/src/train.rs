//! The training loop: AdamW, warmup + cosine, clipping, dropout, periodic
//! evaluation, a CSV log and atomic checkpoints that resume exactly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use indicatif::{ProgressBar, ProgressStyle};
use nrgpt_core::model::{init_weights, num_params, Dropout, Weights};
use nrgpt_core::rng::Rng64;
use nrgpt_core::format::Integrity;
use nrgpt_core::layout::{Body, WeightLayout, EBT_REPLAY};
use nrgpt_core::{Arch, Checkpoint, ModelConfig, Vocab};
use serde::{Deserialize, Serialize};

use crate::data::{random_batch, random_batch_ids, Corpus};
use crate::divergence::LossWatch;
use crate::files::{read_checkpoint, write_atomic, RunLock};
use crate::run_log::{self, Appender};
use crate::resume::{check_flags, check_vocab, resumed_iters, Requested};
use crate::eval::estimate_loss;
use crate::fast::adamw::FastAdamW;
use crate::fast::ebt::{FastEbt, FlatPlan};
use crate::fast::{self, FastModel, TrainBackend};
use crate::net::Net;
use crate::optim::{clip_factor, lr_at, CandleAdamW};
use crate::think_plan::{self, EbtRegularisers, ReplayBuffer};

/// Everything that defines a run besides the model config; saved in the
/// checkpoint so `--resume` continues with the same settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainSettings {
    pub batch: usize,
    pub iters: usize,
    pub lr: f64,
    pub min_lr: f64,
    pub warmup: usize,
    pub weight_decay: f64,
    pub dropout: f64,
    /// Dropout on the attention probabilities (0 for runs saved before it existed).
    #[serde(default)]
    pub attn_dropout: f64,
    pub grad_clip: f64,
    pub eval_every: usize,
    pub eval_iters: usize,
    pub seed: u64,
    /// EBT's thinking regularisers (off for runs saved before they existed).
    #[serde(default)]
    pub ebt: EbtRegularisers,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainState {
    /// Iterations completed.
    pub iter: usize,
    pub settings: TrainSettings,
    pub train_loss: Option<f64>,
    pub val_loss: Option<f64>,
}

pub struct RunPaths {
    pub dir: PathBuf,
}

impl RunPaths {
    pub fn ckpt(&self) -> PathBuf {
        self.dir.join("ckpt.safetensors")
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join("log.csv")
    }
    /// The weights at the lowest val estimate so far (no optimizer state): the
    /// paper reports its best-validation checkpoint, and a run that turns up
    /// still has its best model.
    pub fn best(&self) -> PathBuf {
        self.dir.join("best.safetensors")
    }
    /// The run's checkpoint and the train state saved in it (what `--resume`
    /// continues from), or None while the run has no checkpoint.
    pub fn stored(&self) -> Result<Option<(Checkpoint, TrainState)>> {
        stored_at(&self.ckpt())
    }

    /// The val loss of the run's best model, which a new best must beat (the
    /// file records it, so it holds across resumes whatever the log says);
    /// infinity while there is none.
    fn best_val(&self) -> Result<f64> {
        let path = self.best();
        let advice = || format!("{} is the run's best model: restore it, or move it aside to let this run save a new best", path.display());
        let Some((_, state)) = stored_at(&path).with_context(advice)? else { return Ok(f64::INFINITY) };
        state.val_loss.with_context(|| format!("{} records no val loss", path.display())).with_context(advice)
    }

    /// What a fresh run in this folder would replace: its checkpoint, its
    /// best model, a log with rows.
    fn existing(&self) -> Result<Vec<PathBuf>> {
        let mut found = Vec::new();
        for path in [self.ckpt(), self.best()] {
            if path.try_exists().with_context(|| format!("reading {}", path.display()))? {
                found.push(path);
            }
        }
        if run_log::has_rows(&self.log())? {
            found.push(self.log());
        }
        Ok(found)
    }
}

/// A checkpoint file and the train state saved in it, or None when there is no file.
fn stored_at(path: &Path) -> Result<Option<(Checkpoint, TrainState)>> {
    // try_exists, not exists: a folder we may not read is an error, not "no checkpoint"
    if !path.try_exists().with_context(|| format!("reading {}", path.display()))? {
        return Ok(None);
    }
    let ck = read_checkpoint(path)?;
    let state = ck.meta.get("train_state").with_context(|| format!("{} has no train_state", path.display()))?;
    let state: TrainState = serde_json::from_str(state).with_context(|| format!("parsing the train_state of {}", path.display()))?;
    Ok(Some((ck, state)))
}

/// A fresh run in `paths` may only replace a run there when told to.
fn clear_for_fresh_run(paths: &RunPaths, overwrite: bool) -> Result<()> {
    let existing = paths.existing()?;
    if existing.is_empty() {
        return Ok(());
    }
    if !overwrite {
        let names: Vec<String> = existing.iter().map(|p| p.display().to_string()).collect();
        bail!("{} holds a run ({}): --resume continues it, --overwrite replaces it, or give another --out", paths.dir.display(), names.join(", "));
    }
    for path in existing {
        std::fs::remove_file(&path).with_context(|| format!("removing {} (--overwrite)", path.display()))?;
    }
    Ok(())
}

const STREAM_DROPOUT: u64 = 0xD50;
/// Attention dropout draws from its own stream, so turning it on leaves the
/// residual masks (and every earlier run) as they were.
const STREAM_ATTN_DROPOUT: u64 = 0xA7D0;
const STREAM_EVAL: u64 = 0xE7A1;
/// The noise an EBT starts its training candidates from, and its regularisers.
const STREAM_EBT: u64 = 0xEB7;

/// The run's checkpoint (`path`), with the optimizer state when `extra` is given.
fn save(path: &Path, cfg: &ModelConfig, vocab: &Vocab, weights: Weights, extra: Weights, state: &TrainState) -> Result<()> {
    let mut meta = BTreeMap::new();
    meta.insert("train_state".to_string(), serde_json::to_string(state)?);
    let ck = Checkpoint { config: cfg.clone(), vocab: vocab.clone(), weights, extra, meta, integrity: Integrity::Verified };
    write_atomic(path, &ck.to_bytes()?)
}

/// The model and optimizer of one backend: candle autograd on `Var`s, or the
/// fast backend's hand-written backward on flat f32 buffers. Both save the
/// same checkpoint (parameter names, `opt.m.*` / `opt.v.*` moments).
enum Backend {
    Candle { vars: Vec<(String, Var)>, net: Box<Net>, opt: CandleAdamW },
    Fast { model: Box<FastModel>, opt: FastAdamW },
    FastEbt { model: Box<FastEbt>, opt: FastAdamW },
}

/// A backend and, for EBT, the replay buffer its batches start from (saved
/// with the checkpoint, so either backend resumes the other's run).
struct Learner {
    backend: Backend,
    replay: ReplayBuffer,
    cfg: ModelConfig,
}

/// One AdamW update of the fast backend's buffers; returns the global
/// gradient norm (f64, summed as `CandleAdamW::clip_factor` does).
fn fast_update(lay: &WeightLayout, params: &mut [Vec<f32>], grads: &[Vec<f32>], opt: &mut FastAdamW, lr: f64, grad_clip: f64) -> f64 {
    let sq: f64 = grads.iter().flatten().map(|&g| (g as f64) * (g as f64)).sum();
    let gnorm = sq.sqrt();
    opt.step(lay, params, grads, lr, clip_factor(gnorm, grad_clip));
    gnorm
}

impl Learner {
    fn new(cfg: &ModelConfig, weights: &Weights, s: &TrainSettings, backend: TrainBackend) -> Result<Self> {
        let lay = WeightLayout::new(cfg);
        let ebt_log_a = match &lay.body {
            Body::Ebt(ix) => Some(ix.log_a),
            _ => None,
        };
        if ebt_log_a.is_some() {
            for (flag, p) in [("--dropout", s.dropout), ("--attn-dropout", s.attn_dropout)] {
                if p > 0.0 {
                    bail!("{flag} {p}: dropout is not implemented for EBT; train it with {flag} 0");
                }
            }
        }
        let replay = ReplayBuffer::new(cfg.block_size * cfg.vocab_size, 2 * s.batch);
        let backend = match (backend, ebt_log_a) {
            (TrainBackend::Fast, Some(log_a)) => {
                let model = FastEbt::new(cfg, weights, s.batch, fast::num_threads())?;
                let mut opt = FastAdamW::new(&model.lay, s.weight_decay);
                opt.lr_mult[log_a] = s.ebt.step_lr_mult;
                Backend::FastEbt { model: Box::new(model), opt }
            }
            (TrainBackend::Fast, None) => {
                let model = FastModel::new(cfg, weights, s.batch, fast::num_threads())?;
                let opt = FastAdamW::new(&model.lay, s.weight_decay);
                Backend::Fast { model: Box::new(model), opt }
            }
            (TrainBackend::Candle, _) => {
                let vars: Vec<(String, Var)> = weights.iter().map(|(n, t)| Ok((n.clone(), Var::from_tensor(t)?))).collect::<Result<_>>()?;
                let net = Box::new(Net::new(cfg, &vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect())?);
                let mut opt = CandleAdamW::new(vars.clone(), s.weight_decay)?;
                if let Some(log_a) = ebt_log_a {
                    opt.set_lr_mult(lay.name(log_a), s.ebt.step_lr_mult);
                }
                Backend::Candle { vars, net, opt }
            }
        };
        Ok(Learner { backend, replay, cfg: cfg.clone() })
    }

    fn name(&self) -> &'static str {
        match self.backend {
            Backend::Candle { .. } => "candle",
            Backend::Fast { .. } | Backend::FastEbt { .. } => "fast",
        }
    }

    /// The current parameters (detached copies).
    fn weights(&self) -> Result<Weights> {
        match &self.backend {
            Backend::Candle { vars, .. } => Ok(vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().detach())).collect()),
            Backend::Fast { model, .. } => model.weights(),
            Backend::FastEbt { model, .. } => model.weights(),
        }
    }

    fn opt_state(&self) -> Result<Weights> {
        let mut w = match &self.backend {
            Backend::Candle { opt, .. } => opt.state(),
            Backend::Fast { model, opt } => opt.state(&model.lay)?,
            Backend::FastEbt { model, opt } => opt.state(&model.lay)?,
        };
        if !self.replay.is_empty() {
            w.insert(EBT_REPLAY.to_string(), self.replay.to_tensor(self.cfg.block_size, self.cfg.vocab_size)?);
        }
        Ok(w)
    }

    fn load_opt_state(&mut self, extra: &Weights, iter: u64) -> Result<()> {
        if let Some(t) = extra.get(EBT_REPLAY) {
            self.replay.load(t)?;
        }
        match &mut self.backend {
            Backend::Candle { opt, .. } => opt.load_state(extra, iter),
            Backend::Fast { model, opt } => opt.load_state(&model.lay, extra, iter),
            Backend::FastEbt { model, opt } => opt.load_state(&model.lay, extra, iter),
        }
    }

    /// One training iteration on the batch of `iter`: returns (loss, grad norm).
    fn train_step(&mut self, corpus: &Corpus, cfg: &ModelConfig, s: &TrainSettings, iter: usize, lr: f64) -> Result<(f64, f64)> {
        let dev = Device::Cpu;
        let mut rng = Rng64::derive(s.seed, iter as u64);
        let mut drop = Dropout { p: s.dropout, rng: Rng64::derive(s.seed ^ STREAM_DROPOUT, iter as u64) };
        let mut attn_drop = Dropout { p: s.attn_dropout, rng: Rng64::derive(s.seed ^ STREAM_ATTN_DROPOUT, iter as u64) };
        let replay = &mut self.replay;
        let plan = |replay: &ReplayBuffer| think_plan::draw(&s.ebt, cfg, s.batch, &mut Rng64::derive(s.seed ^ STREAM_EBT, iter as u64), replay);
        match &mut self.backend {
            Backend::Candle { net, opt, .. } => {
                let (x, y) = random_batch(&corpus.train, s.batch, cfg.block_size, &mut rng, &dev)?;
                let plan = match cfg.arch {
                    Arch::Ebt => Some(plan(&*replay)?),
                    _ => None,
                };
                let (loss, last) = net.train_loss(&x, &y, &mut drop, &mut attn_drop, plan.as_ref())?;
                if let (Some(last), true) = (last, s.ebt.replay > 0.0) {
                    replay.push(&last.flatten_all()?.to_vec1::<f32>()?);
                }
                let grads = loss.backward()?;
                let (gnorm, clip) = opt.clip_factor(&grads, s.grad_clip)?;
                opt.step(&grads, lr, clip)?;
                Ok((loss.to_scalar::<f32>()? as f64, gnorm))
            }
            Backend::Fast { model, opt } => {
                let (x, y) = random_batch_ids(&corpus.train, s.batch, cfg.block_size, &mut rng)?;
                // The masks the candle path would draw, in its order.
                let shape = [s.batch, cfg.block_size, cfg.d_model];
                let mut masks = Vec::new();
                for _ in 0..fast::mask_count(cfg) {
                    if let Some(m) = drop.mask(&shape, DType::F32, &dev)? {
                        masks.push(m.flatten_all()?.to_vec1::<f32>()?);
                    }
                }
                let masks = if masks.is_empty() { None } else { Some(masks) };
                // the attention masks the candle path draws, one per step
                let attn_shape = [s.batch, cfg.n_head, cfg.block_size, cfg.block_size];
                let mut attn_masks = Vec::new();
                for _ in 0..cfg.steps {
                    if let Some(m) = attn_drop.mask(&attn_shape, DType::F32, &dev)? {
                        attn_masks.push(m.flatten_all()?.to_vec1::<f32>()?);
                    }
                }
                let attn_masks = if attn_masks.is_empty() { None } else { Some(attn_masks) };
                let loss = model.loss_and_grad_dropped(&x, &y, masks.as_deref(), attn_masks.as_deref())?;
                let FastModel { lay, params, grads, .. } = &mut **model;
                Ok((loss, fast_update(lay, params, grads, opt, lr, s.grad_clip)))
            }
            Backend::FastEbt { model, opt } => {
                let (x, y) = random_batch_ids(&corpus.train, s.batch, cfg.block_size, &mut rng)?;
                let (loss, last) = model.loss_and_grad(&x, &y, &FlatPlan::new(&plan(&*replay)?)?)?;
                if s.ebt.replay > 0.0 {
                    replay.push(&last);
                }
                let FastEbt { lay, params, grads, .. } = &mut **model;
                Ok((loss, fast_update(lay, params, grads, opt, lr, s.grad_clip)))
            }
        }
    }
}

pub struct Outcome {
    pub train_loss: f64,
    pub val_loss: f64,
    pub tokens_per_s: f64,
}

/// How a run starts.
pub enum Start {
    /// A new run; `overwrite` lets it replace a run already in the folder.
    Fresh { cfg: ModelConfig, settings: TrainSettings, overwrite: bool },
    /// Continue the run in the folder with its saved settings; `iters` extends
    /// it, and `requested` must agree with what the run stored.
    Resume { iters: Option<usize>, requested: Requested },
}

/// Trains a fresh model, or continues the run in `paths` exactly where its
/// last checkpoint left it.
pub fn run(corpus: &Corpus, vocab: &Vocab, start: Start, paths: &RunPaths, quiet: bool, backend: TrainBackend) -> Result<Outcome> {
    let dev = Device::Cpu;
    std::fs::create_dir_all(&paths.dir).with_context(|| format!("creating {}", paths.dir.display()))?;
    let _lock = RunLock::acquire(&paths.dir)?;
    let (cfg, settings, weights, opt_state) = match start {
        Start::Resume { iters, requested } => {
            let path = paths.ckpt();
            let (ck, state) = paths.stored()?.with_context(|| format!("no checkpoint {} to resume", path.display()))?;
            state.settings.validate().with_context(|| format!("resuming {}", path.display()))?;
            let dropout = state.settings.dropout > 0.0 || state.settings.attn_dropout > 0.0;
            crate::budget::train(&ck.config, state.settings.batch, "the stored batch", dropout).with_context(|| format!("resuming {}", path.display()))?;
            check_flags(&ck.config, &state.settings, &requested)?;
            check_vocab(&ck.vocab, vocab)?;
            let mut s = state.settings.clone();
            s.iters = resumed_iters(s.iters, state.iter, iters)?;
            (ck.config, s, ck.weights, Some((ck.extra, state.iter)))
        }
        Start::Fresh { cfg, settings, overwrite } => {
            let mut w = init_weights(&cfg, settings.seed, DType::F32, &dev)?;
            if let (Body::Ebt(ix), Some(a)) = (&WeightLayout::new(&cfg).body, settings.ebt.step_size) {
                let name = WeightLayout::new(&cfg).name(ix.log_a).to_string();
                w.insert(name, Tensor::new(&[a.ln() as f32], &dev)?);
            }
            // after the config is known to be good: a refused flag touches nothing
            clear_for_fresh_run(paths, overwrite)?;
            (cfg, settings, w, None)
        }
    };
    if vocab.len() != cfg.vocab_size {
        bail!("the vocabulary has {} characters but the model expects {}", vocab.len(), cfg.vocab_size);
    }
    let mut learner = Learner::new(&cfg, &weights, &settings, backend)?;
    let start = match opt_state {
        Some((extra, iter)) => {
            learner.load_opt_state(&extra, iter as u64)?;
            run_log::truncate_for_resume(&paths.log(), iter)?;
            iter
        }
        None => {
            run_log::create(&paths.log())?;
            0
        }
    };
    let mut log = Appender::open(&paths.log())?;
    let mut best_val = paths.best_val()?;
    let mut watch = LossWatch::new(&cfg, &settings.ebt, start, settings.lr, paths.dir.clone());
    let s = &settings;
    let pb = if quiet { ProgressBar::hidden() } else { ProgressBar::new(s.iters as u64) };
    pb.set_style(ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {msg} [{elapsed_precise}<{eta_precise}]")?);
    pb.set_position(start as u64);
    eprintln!(
        "{} | {} params | d={} heads={} steps={} block={} batch={} | {} iters from {} | {} backend",
        cfg.arch.name(),
        num_params(&cfg),
        cfg.d_model,
        cfg.n_head,
        cfg.steps,
        cfg.block_size,
        s.batch,
        s.iters,
        start,
        learner.name()
    );
    let t0 = Instant::now();
    let mut trained_tokens = 0usize;
    let mut train_time = 0.0f64;
    let (mut last_train, mut last_val) = (f64::NAN, f64::NAN);
    for iter in start..=s.iters {
        if iter % s.eval_every == 0 || iter == s.iters {
            let weights = learner.weights()?;
            let m = Net::new(&cfg, &weights)?;
            last_train = estimate_loss(&m, &corpus.train, s.batch, s.eval_iters, s.seed ^ STREAM_EVAL)?;
            last_val = estimate_loss(&m, &corpus.val, s.batch, s.eval_iters, s.seed ^ STREAM_EVAL)?;
            // checked before anything of this state is logged or saved
            watch.check(iter, "train-split estimate", last_train)?;
            watch.check(iter, "val loss", last_val)?;
            // the checkpoint first, then the best model, then the row: a kill
            // between them leaves no best or row without its checkpoint, and the
            // resume evaluates this iteration again
            let state = TrainState { iter, settings: s.clone(), train_loss: Some(last_train), val_loss: Some(last_val) };
            save(&paths.ckpt(), &cfg, vocab, weights.clone(), learner.opt_state()?, &state)?;
            watch.saved(iter);
            if last_val < best_val {
                best_val = last_val;
                save(&paths.best(), &cfg, vocab, weights, Weights::new(), &state)?;
            }
            log.append(&format!("{iter},,,,{last_train},{last_val},,{:.3}", t0.elapsed().as_secs_f64()))?;
            let line = format!("iter {iter:>6}: train {last_train:.4}  val {last_val:.4}");
            if quiet {
                eprintln!("{line}");
            } else {
                pb.println(line);
            }
        }
        if iter == s.iters {
            break;
        }
        let step_t = Instant::now();
        let lr = lr_at(iter, s.lr, s.min_lr, s.warmup, s.iters);
        let (loss_v, gnorm) = learner.train_step(corpus, &cfg, s, iter, lr)?;
        watch.step(iter, loss_v)?;
        train_time += step_t.elapsed().as_secs_f64();
        trained_tokens += s.batch * cfg.block_size;
        let tps = trained_tokens as f64 / train_time;
        log.append(&format!("{iter},{lr:e},{loss_v},{gnorm},,,{tps:.1},{:.3}", t0.elapsed().as_secs_f64()))?;
        pb.set_message(format!("loss {loss_v:.3} | val {last_val:.3} | {:.1}k tok/s", tps / 1000.0));
        pb.inc(1);
    }
    pb.finish_and_clear();
    let tokens_per_s = if train_time > 0.0 { trained_tokens as f64 / train_time } else { 0.0 };
    Ok(Outcome { train_loss: last_train, val_loss: last_val, tokens_per_s })
}
