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
        // built once: the GPU uploads it, and the CPU fallback runs on it
        let params = DecodeParams::from_checkpoint(&ck)?;
        let (dec, backend) = if opts.force_cpu {
            (Decoder::Cpu(CpuDecoder::new(params, steps)), Backend::Cpu { reason: "GPU not requested".into() })
        } else {
            match gpu::GpuDecoder::new(bytes, &params, steps).await {
                Ok(g) => {
                    let adapter = g.adapter_name().to_string();
                    (Decoder::Gpu(g), Backend::Gpu { adapter })
                }
                Err(Error::NoGpu(reason)) => (Decoder::Cpu(CpuDecoder::new(params, steps)), Backend::Cpu { reason }),
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

    /// GPU compute dispatches issued so far (0 on the CPU backend).
    pub fn dispatches(&self) -> u64 {
        match &self.dec {
            Decoder::Gpu(d) => d.dispatches(),
            Decoder::Cpu(_) => 0,
        }
    }

    /// Feeds several characters (a prompt) and returns the last one's trace;
    /// on the GPU it is one submission (a dispatch per character).
    pub async fn push_many(&mut self, tokens: &[u32], opts: &StepOpts) -> Result<Trace> {
        self.check_tokens(tokens)?;
        let block = self.cfg.block_size;
        let mut last = None;
        if self.apply_opts(opts).await? {
            last = Some(self.refill().await?);
        }
        let mut i = 0;
        while i < tokens.len() {
            if self.window.len() >= block {
                // a slide: the one-token path recomputes the kept half
                last = Some(self.push(tokens[i], opts).await?);
                i += 1;
                continue;
            }
            let take = (block - self.window.len()).min(tokens.len() - i);
            let chunk = &tokens[i..i + take];
            self.window.extend_from_slice(chunk);
            last = Some(self.decode(chunk).await?);
            i += take;
        }
        last.ok_or_else(|| Error::Vocab("nothing to feed: the text is empty".into()))
    }

    /// Adopts the step count and tolerance of `opts`; true when the cached
    /// window must be recomputed under them.
    async fn apply_opts(&mut self, opts: &StepOpts) -> Result<bool> {
        let steps = opts.steps.unwrap_or(self.cfg.steps).max(1);
        let changed = steps != self.steps || opts.early_exit != self.tol;
        if steps != self.steps {
            self.steps = steps;
            match &mut self.dec {
                Decoder::Cpu(d) => *d = CpuDecoder::new(d.params().clone(), steps),
                Decoder::Gpu(d) => d.set_steps(steps).await?,
            }
        }
        self.tol = opts.early_exit;
        Ok(changed && !self.window.is_empty())
    }

    /// Runs `tokens` (already appended to the window) through the decoder.
    async fn decode(&mut self, tokens: &[u32]) -> Result<Trace> {
        match &mut self.dec {
            Decoder::Cpu(d) => Ok(tokens.iter().map(|&t| d.push(t, self.tol)).last().unwrap_or_default()),
            Decoder::Gpu(d) => d.push_many(tokens, self.tol).await,
        }
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        match tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            Some(t) => Err(Error::Vocab(format!("token id {t} is outside the vocabulary"))),
            None => Ok(()),
        }
    }

    /// Feeds one character and returns its trace (logits for the next one).
    pub async fn push(&mut self, token: u32, opts: &StepOpts) -> Result<Trace> {
        self.check_tokens(&[token])?;
        let mut refill = self.apply_opts(opts).await?;
        refill |= slide_window(&mut self.window, self.cfg.block_size);
        self.window.push(token);
        if refill {
            return self.refill().await;
        }
        self.decode(&[token]).await
    }

    /// Recomputes the whole window from position 0 (after a slide or a change of T or tolerance).
    async fn refill(&mut self) -> Result<Trace> {
        match &mut self.dec {
            Decoder::Cpu(d) => d.reset(),
            Decoder::Gpu(d) => d.reset(),
        }
        let all = self.window.clone();
        self.decode(&all).await
    }
}
