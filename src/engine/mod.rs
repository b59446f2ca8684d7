//! The decoding engine the page runs: exact incremental NRGPT descent on the
//! GPU through wgpu (WebGPU in the browser, Vulkan natively), falling back to
//! the same algorithm on the CPU when no adapter exists. Same contract as the
//! CPU reference [`crate::session::Session`], which tests hold it to.

pub mod cpu;
pub mod gpu;
pub mod params;

use crate::session::{slide_window, StepOpts};
use crate::{Checkpoint, Error, ModelConfig, Result, Vocab};
use cpu::CpuDecoder;
use params::DecodeParams;

pub use crate::session::TokenTrace as Trace;

/// Which backend runs, in words the page can show.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    Gpu { adapter: String },
    Cpu { reason: String },
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Gpu { adapter } => write!(f, "GPU: {adapter}"),
            Backend::Cpu { reason } => write!(f, "CPU ({reason})"),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct EngineOpts {
    /// Skip the GPU even when an adapter exists.
    pub force_cpu: bool,
}

enum Decoder {
    Cpu(CpuDecoder),
    Gpu(gpu::GpuDecoder),
}

pub struct Engine {
    dec: Decoder,
    backend: Backend,
    vocab: Vocab,
    cfg: ModelConfig,
    /// The tokens the decoder's cache holds, in order (positions 0..).
    window: Vec<u32>,
    steps: usize,
    tol: Option<f32>,
}

impl Engine {
    /// Parses the checkpoint (f32 or quantized) and picks a backend.
    pub async fn new(bytes: &[u8], opts: EngineOpts) -> Result<Self> {
        let ck = Checkpoint::from_bytes(bytes, candle_core::DType::F32, &candle_core::Device::Cpu)?;
        let cfg = ck.config.clone();
        let steps = cfg.steps;
        let (dec, backend) = if opts.force_cpu {
            (Decoder::Cpu(CpuDecoder::new(DecodeParams::from_checkpoint(&ck)?, steps)), Backend::Cpu { reason: "GPU not requested".into() })
        } else {
            match gpu::GpuDecoder::new(bytes, &ck, steps).await {
                Ok(g) => {
                    let adapter = g.adapter_name().to_string();
                    (Decoder::Gpu(g), Backend::Gpu { adapter })
                }
                Err(Error::NoGpu(reason)) => {
                    (Decoder::Cpu(CpuDecoder::new(DecodeParams::from_checkpoint(&ck)?, steps)), Backend::Cpu { reason })
                }
                Err(e) => return Err(e),
            }
        };
        Ok(Self { dec, backend, vocab: ck.vocab, cfg, window: Vec::new(), steps, tol: None })
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn reset(&mut self) {
        self.window.clear();
        match &mut self.dec {
            Decoder::Cpu(d) => d.reset(),
            Decoder::Gpu(d) => d.reset(),
        }
    }

    /// Feeds one character and returns its trace (logits for the next one).
    pub async fn push(&mut self, token: u32, opts: &StepOpts) -> Result<Trace> {
        if token as usize >= self.cfg.vocab_size {
            return Err(Error::Vocab(format!("token id {token} is outside the vocabulary")));
        }
        let steps = opts.steps.unwrap_or(self.cfg.steps).max(1);
        let mut refill = steps != self.steps || opts.early_exit != self.tol;
        if steps != self.steps {
            self.steps = steps;
            match &mut self.dec {
                Decoder::Cpu(d) => *d = CpuDecoder::new(DecodeParams { cfg: d.params().cfg.clone(), w: d.params().w.clone(), dirs: d.params().dirs.clone() }, steps),
                Decoder::Gpu(d) => d.set_steps(steps).await?,
            }
        }
        self.tol = opts.early_exit;
        refill |= slide_window(&mut self.window, self.cfg.block_size);
        self.window.push(token);
        let tokens = if refill { self.window.clone() } else { vec![token] };
        if refill {
            match &mut self.dec {
                Decoder::Cpu(d) => d.reset(),
                Decoder::Gpu(d) => d.reset(),
            }
        }
        match &mut self.dec {
            Decoder::Cpu(d) => {
                let mut last = Trace::default();
                for &t in &tokens {
                    last = d.push(t, self.tol);
                }
                Ok(last)
            }
            Decoder::Gpu(d) => d.push_many(&tokens, self.tol).await,
        }
    }
}
