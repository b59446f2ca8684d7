//! The fast backend: each model's forward and hand-derived backward in plain
//! Rust on f32 slices (NRGPT: forward.rs, backward.rs; the GPT baselines:
//! gpt_baselines.rs; EBT, with its exact second-order backward: ebt/), for
//! training on the CPU without an autograd graph.
//!
//! The batch is cut into chunks of whole sequences (a fixed size, independent
//! of the thread count); each chunk runs forward + backward on its own
//! preallocated `Workspace` with single-threaded gemms (attention and norms
//! never cross sequences). Threads take chunks from a shared counter (so a
//! thread the OS preempts does not hold the others up), and the chunks'
//! gradients are summed in chunk order: results are deterministic and the
//! same for any number of threads.
//! It computes exactly the function of the core crate's `Model::forward` +
//! `cross_entropy`; trainer/tests/fast_backend.rs checks every gradient against
//! candle's autograd.

pub mod adamw;
pub mod backward;
pub mod buffers;
pub mod ebt;
pub mod forward;
pub mod gemm;
pub mod gpt_baselines;
#[cfg(target_arch = "x86_64")]
pub mod kernel512;
pub mod math;
pub mod view;
pub mod workspace;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Result};
use nrgpt_core::model::Weights;
use nrgpt_core::ModelConfig;

use buffers::Buffers;
use nrgpt_core::layout::WeightLayout;
pub use backward::Fault;
use workspace::Workspace;

/// Which implementation trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainBackend {
    /// candle's autograd: the reference the fast backend is tested against.
    Candle,
    Fast,
}

impl std::str::FromStr for TrainBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "candle" => Ok(TrainBackend::Candle),
            "fast" => Ok(TrainBackend::Fast),
            _ => Err(format!("`{s}`: expected candle or fast")),
        }
    }
}

/// How many dropout masks one batch draws, in the candle path's order:
/// NRGPT the embedding's then one per descent step; GPT the embedding's then
/// two per applied layer (attention and MLP branches).
pub fn mask_count(cfg: &ModelConfig) -> usize {
    if cfg.arch.is_nrgpt() {
        cfg.steps + 1
    } else {
        2 * cfg.steps + 1
    }
}

/// Sequences per chunk: 8 x 64 = 512 rows keeps the gemms large and gives
/// the default batch of 32 four chunks to share between threads.
pub const SEQS_PER_CHUNK: usize = 8;

/// Worker threads: RAYON_NUM_THREADS if set, else the available cores.
pub fn num_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

pub struct FastModel {
    pub cfg: ModelConfig,
    pub lay: WeightLayout,
    /// Parameters in layout order (see `lay`).
    pub params: Vec<Vec<f32>>,
    /// dL/dparam of the last `loss_and_grad`, same layout.
    pub grads: Vec<Vec<f32>>,
    pub batch: usize,
    /// One per chunk (a Mutex only to hand each to one thread; never contended).
    ws: Vec<Mutex<Workspace>>,
    threads: usize,
    /// Transposed weight matrices, refreshed at each `loss_and_grad`.
    pt: Vec<Vec<f32>>,
    /// Test-only sabotage of one backward term.
    #[cfg(feature = "fault-injection")]
    pub fault: Option<Fault>,
}

/// Runs `f(i, chunk i)` on every chunk, on `threads` threads that take chunks
/// from a shared counter (so a thread the OS preempts does not hold the others up).
pub(crate) fn run_chunks<W: Send>(ws: &[Mutex<W>], threads: usize, f: impl Fn(usize, &mut W) + Sync) {
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= ws.len() {
            break;
        }
        f(i, &mut ws[i].lock().unwrap());
    };
    std::thread::scope(|sc| {
        for _ in 1..threads {
            sc.spawn(work);
        }
        work();
    });
}

/// `dst` = the sum of the chunks' gradients, added in chunk order (so the
/// result does not depend on which thread ran which chunk).
pub(crate) fn sum_in_order<'a>(dst: &mut [Vec<f32>], mut parts: impl Iterator<Item = &'a [Vec<f32>]>) {
    let first = parts.next().expect("at least one chunk");
    for (g, f) in dst.iter_mut().zip(first) {
        g.copy_from_slice(f);
    }
    for part in parts {
        for (g, p) in dst.iter_mut().zip(part) {
            g.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        }
    }
}

impl FastModel {
    /// A model for batches of `batch` sequences of `cfg.block_size` tokens, on `threads` threads.
    pub fn new(cfg: &ModelConfig, weights: &Weights, batch: usize, threads: usize) -> Result<Self> {
        cfg.validate()?;
        let lay = WeightLayout::new(cfg);
        let params = lay.from_weights(weights, "")?;
        if batch == 0 {
            bail!("batch must be positive");
        }
        let chunks = batch.div_ceil(SEQS_PER_CHUNK);
        let ws = (0..chunks).map(|c| Mutex::new(Workspace::new(cfg, batch / chunks + usize::from(c < batch % chunks), lay.zeros()))).collect();
        let threads = threads.clamp(1, chunks);
        Ok(Self {
            cfg: cfg.clone(),
            grads: lay.zeros(),
            lay,
            params,
            batch,
            ws,
            threads,
            pt: Vec::new(),
            #[cfg(feature = "fault-injection")]
            fault: None,
        })
    }

    /// Mean cross-entropy of the batch (`ids`, `tgt`: batch * block tokens) and
    /// its gradient into `self.grads`. `masks`: the `mask_count` dropout masks,
    /// each batch * block * d_model, if dropout is on.
    pub fn loss_and_grad(&mut self, ids: &[u32], tgt: &[u32], masks: Option<&[Vec<f32>]>) -> Result<f64> {
        self.loss_and_grad_dropped(ids, tgt, masks, None)
    }

    /// `loss_and_grad` with attention dropout: `attn_masks`, one per step
    /// (NRGPT) or applied layer (GPT), each batch * heads * block * block.
    pub fn loss_and_grad_dropped(&mut self, ids: &[u32], tgt: &[u32], masks: Option<&[Vec<f32>]>, attn_masks: Option<&[Vec<f32>]>) -> Result<f64> {
        let (n, d, h) = (self.cfg.block_size, self.cfg.d_model, self.cfg.n_head);
        let total = self.batch * n;
        if ids.len() != total || tgt.len() != total {
            bail!("batch of {} tokens, expected {total}", ids.len());
        }
        if let Some(mk) = masks {
            if mk.len() != mask_count(&self.cfg) || mk.iter().any(|m| m.len() != total * d) {
                bail!("dropout masks have the wrong shape");
            }
        }
        if let Some(mk) = attn_masks {
            if mk.len() != self.cfg.steps || mk.iter().any(|m| m.len() != self.batch * h * n * n) {
                bail!("attention dropout masks have the wrong shape");
            }
        }
        if let Some(&bad) = ids.iter().chain(tgt).find(|&&t| t as usize >= self.cfg.vocab_size) {
            bail!("token id {bad} is outside the vocabulary of {}", self.cfg.vocab_size);
        }
        self.lay.transposes(&self.params, &mut self.pt);
        let (cfg, lay, params, pt) = (&self.cfg, &self.lay, &self.params, &self.pt);
        #[cfg(feature = "fault-injection")]
        let fault = self.fault;
        #[cfg(not(feature = "fault-injection"))]
        let fault = None;
        let run = |ws: &mut Workspace, row0: usize| {
            let rows = ws.dims.r;
            let ck: Option<Vec<&[f32]>> = masks.map(|mk| mk.iter().map(|m| &m[row0 * d..(row0 + rows) * d]).collect());
            // the chunk's sequences row0 / n .. (row0 + rows) / n
            let per_seq = h * n;
            let ak: Option<Vec<&[f32]>> = attn_masks.map(|mk| mk.iter().map(|m| &m[row0 * per_seq..(row0 + rows) * per_seq]).collect());
            ws.grads.iter_mut().for_each(|g| g.fill(0.0));
            let (ids, tgt) = (&ids[row0..row0 + rows], &tgt[row0..row0 + rows]);
            if cfg.arch.is_nrgpt() {
                forward::forward(cfg, lay, params, pt, ws, ids, tgt, ck.as_deref(), ak.as_deref(), total);
                backward::backward(cfg, lay, params, pt, ws, ids, ck.as_deref(), ak.as_deref(), fault);
            } else {
                gpt_baselines::forward(cfg, lay, params, pt, ws, ids, tgt, ck.as_deref(), ak.as_deref(), total);
                gpt_baselines::backward(cfg, lay, params, ws, ids, ck.as_deref(), ak.as_deref());
            }
        };
        let starts: Vec<usize> = self
            .ws
            .iter_mut()
            .scan(0, |acc, w| {
                let s = *acc;
                *acc += w.get_mut().unwrap().dims.r;
                Some(s)
            })
            .collect();
        run_chunks(&self.ws, self.threads, |i, ws| run(ws, starts[i]));
        let ws: Vec<&Workspace> = self.ws.iter_mut().map(|w| &*w.get_mut().unwrap()).collect();
        sum_in_order(&mut self.grads, ws.iter().map(|w| &w.grads[..]));
        let loss: f64 = ws.iter().map(|w| w.loss_sum).sum();
        Ok(loss / total as f64)
    }

    /// The parameters as named f32 tensors (for checkpoints and evaluation).
    pub fn weights(&self) -> Result<Weights> {
        self.lay.to_weights(&self.params, "")
    }

    /// The gradients as named f32 tensors.
    pub fn grad_weights(&self) -> Result<Weights> {
        self.lay.to_weights(&self.grads, "")
    }
}
