//! The decoding engine the page runs: exact incremental NRGPT descent on the
//! GPU through wgpu (WebGPU in the browser, Vulkan natively), falling back to
//! the same algorithm on the CPU when no adapter exists. Same contract as the
//! CPU reference `nrgpt_core::session::Session`, which tests hold it to. An
//! EBT thinks the same way: in WGSL when an adapter exists, else on the CPU.

pub mod cpu_decoder;
pub mod decode_params;
pub mod ebt_decoder;
pub mod gpu_decoder;
pub mod gpu_ebt_decoder;
mod gpu_shared;

pub use gpu_shared::GpuDevice;

use cpu_decoder::CpuDecoder;
use ebt_decoder::EbtDecoder;
use decode_params::DecodeParams;
use gpu_decoder::GpuDecoder;
use gpu_ebt_decoder::GpuEbtDecoder;
use nrgpt_core::format::{Integrity, PackedCheckpoint};
use nrgpt_core::session::{slide_window, window_after, EbtThinkOpts, StepOpts};
use nrgpt_core::{Arch, Error, ModelConfig, Result, Vocab};

pub use nrgpt_core::session::TokenTrace as Trace;

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
pub struct DecoderOpts {
    /// Skip the GPU even when an adapter exists.
    pub force_cpu: bool,
    /// The device to run on, shared with other decoders; None: open one for this decoder.
    pub gpu: Option<GpuDevice>,
    /// Think an EBT in WGSL even on an adapter not known to be a hardware GPU.
    /// Off by default: on lavapipe the CPU engine thinks 8x faster (11 vs 94
    /// ms per character, d = 128, S = 4, N = 4); the parity tests turn it on.
    pub ebt_on_software_gpu: bool,
}

/// The implementation that descends (NRGPT) or thinks (EBT).
// One per decoder, held for its life: the GPU variants' size is paid once, and
// boxing them would add an indirection to every character.
#[allow(clippy::large_enum_variant)]
enum Runner {
    Cpu(CpuDecoder),
    Gpu(GpuDecoder),
    Ebt(EbtDecoder),
    GpuEbt(GpuEbtDecoder),
}

/// Incremental decoding of one sequence: feed characters, get each one's descent.
pub struct Decoder {
    runner: Runner,
    backend: Backend,
    vocab: Vocab,
    cfg: ModelConfig,
    /// The tokens the decoder's cache holds, in order (positions 0..).
    window: Vec<u32>,
    steps: usize,
    tol: Option<f32>,
    ebt: EbtThinkOpts,
    /// Characters fed since the reset: an EBT's candidates draw their noise by it.
    fed: u64,
    /// The CPU twin of a GPU runner: a lost GPU (the browser reclaiming the
    /// device, a driver reset) then costs one recompute of the window, not the text.
    standby: Option<Box<Runner>>,
    /// Whether the file matched its digest (the page shows the note of one that predates digests).
    integrity: Integrity,
}

/// The device `opts` shares, else a new one.
async fn device(opts: &DecoderOpts) -> Result<GpuDevice> {
    match &opts.gpu {
        Some(gpu) => Ok(gpu.clone()),
        None => GpuDevice::open().await,
    }
}

impl Decoder {
    /// Parses the checkpoint (f32 or quantized) and picks a backend.
    pub async fn new(bytes: &[u8], opts: DecoderOpts) -> Result<Self> {
        // the one parse: the GPU uploads its packed codes, the CPU runs their f32 values
        let file = PackedCheckpoint::from_bytes(bytes)?;
        let steps = file.config.steps;
        let mut standby = None;
        let (runner, backend) = if file.config.arch == Arch::Ebt {
            if opts.force_cpu {
                (Runner::Ebt(EbtDecoder::new(&file)?), Backend::Cpu { reason: "GPU not requested".into() })
            } else {
                match async { GpuEbtDecoder::new(&file, &device(&opts).await?).await }.await {
                    Ok(g) if g.software() && !opts.ebt_on_software_gpu => {
                        let reason = format!(
                            "an EBT thinks on the CPU engine: {} is not known to be a hardware GPU, and on a software one the CPU engine is faster",
                            g.adapter_name()
                        );
                        (Runner::Ebt(EbtDecoder::new(&file)?), Backend::Cpu { reason })
                    }
                    Ok(g) => {
                        let adapter = g.adapter_name().to_string();
                        standby = Some(Box::new(Runner::Ebt(EbtDecoder::new(&file)?)));
                        (Runner::GpuEbt(g), Backend::Gpu { adapter })
                    }
                    Err(Error::NoGpu(why)) => {
                        let reason = format!("an EBT thinks on the CPU engine without a GPU adapter ({why})");
                        (Runner::Ebt(EbtDecoder::new(&file)?), Backend::Cpu { reason })
                    }
                    Err(e) => return Err(e),
                }
            }
        } else {
            let params = DecodeParams::from_packed(&file)?;
            if opts.force_cpu {
                (Runner::Cpu(CpuDecoder::new(params, steps)), Backend::Cpu { reason: "GPU not requested".into() })
            } else {
                match async { GpuDecoder::new(&file, &params, steps, &device(&opts).await?).await }.await {
                    Ok(g) => {
                        let adapter = g.adapter_name().to_string();
                        standby = Some(Box::new(Runner::Cpu(CpuDecoder::new(params, steps))));
                        (Runner::Gpu(g), Backend::Gpu { adapter })
                    }
                    Err(Error::NoGpu(reason)) => (Runner::Cpu(CpuDecoder::new(params, steps)), Backend::Cpu { reason }),
                    Err(e) => return Err(e),
                }
            }
        };
        let ebt = EbtThinkOpts::default();
        let integrity = file.integrity;
        Ok(Self { runner, backend, vocab: file.vocab, cfg: file.config, window: Vec::new(), steps, tol: None, ebt, fed: 0, standby, integrity })
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

    pub fn integrity(&self) -> Integrity {
        self.integrity
    }

    pub fn reset(&mut self) {
        self.window.clear();
        self.fed = 0;
        self.reset_runner();
    }

    fn reset_runner(&mut self) {
        match &mut self.runner {
            Runner::Cpu(d) => d.reset(),
            Runner::Gpu(d) => d.reset(),
            Runner::Ebt(d) => d.reset(),
            Runner::GpuEbt(d) => d.reset(),
        }
    }

    /// GPU compute dispatches issued so far (0 on the CPU backend).
    pub fn dispatches(&self) -> u64 {
        match &self.runner {
            Runner::Gpu(d) => d.dispatches(),
            Runner::GpuEbt(d) => d.dispatches(),
            Runner::Cpu(_) | Runner::Ebt(_) => 0,
        }
    }

    /// Feeds several characters (a prompt) and returns the last one's trace;
    /// on the GPU it is one submission (a dispatch per character). Only what
    /// the window will hold is computed ([`window_after`]): a 5,000-character
    /// prompt costs at most one window, not 5,000 characters.
    pub async fn push_many(&mut self, tokens: &[u32], opts: &StepOpts) -> Result<Trace> {
        self.check_tokens(tokens)?;
        if tokens.is_empty() {
            return Err(Error::Vocab("nothing to feed: the text is empty".into()));
        }
        let refill = self.apply_opts(opts).await?;
        let (window, slid) = window_after(&self.window, tokens, self.cfg.block_size);
        self.fed += tokens.len() as u64;
        if slid || refill {
            self.window = window;
            return self.refill().await;
        }
        self.window = window;
        self.decode(tokens).await
    }

    /// Adopts the step count and tolerance of `opts`; true when the cached
    /// window must be recomputed under them.
    async fn apply_opts(&mut self, opts: &StepOpts) -> Result<bool> {
        let steps = opts.steps.unwrap_or(self.cfg.steps).max(1);
        if let Runner::Ebt(_) | Runner::GpuEbt(_) = self.runner {
            // the cached real stream does not depend on how the candidates think
            (self.steps, self.tol, self.ebt) = (steps, opts.early_exit, opts.ebt.clone());
            return Ok(false);
        }
        let changed = steps != self.steps || opts.early_exit != self.tol;
        if steps != self.steps {
            self.steps = steps;
            match &mut self.runner {
                Runner::Cpu(d) => *d = CpuDecoder::new(d.params().clone(), steps),
                Runner::Gpu(d) => d.set_steps(steps).await?,
                Runner::Ebt(_) | Runner::GpuEbt(_) => unreachable!("an EBT returned above"),
            }
        }
        self.tol = opts.early_exit;
        Ok(changed && !self.window.is_empty())
    }

    /// Runs `tokens` (already appended to the window) through the decoder.
    /// A GPU that fails hands over to its CPU twin, which recomputes the
    /// window: the sequence goes on, and `backend()` says what happened.
    async fn decode(&mut self, tokens: &[u32]) -> Result<Trace> {
        match self.decode_on_runner(tokens).await {
            Err(Error::Gpu(why)) if self.standby.is_some() => {
                let mut cpu = self.standby.take().expect("checked above");
                if let (Runner::Cpu(d), Runner::Gpu(_)) = (cpu.as_mut(), &self.runner) {
                    // the twin was made at load; the steps may have changed since
                    *d = CpuDecoder::new(d.params().clone(), self.steps);
                }
                self.runner = *cpu;
                self.backend = Backend::Cpu { reason: format!("the GPU failed mid-generation ({why}); the CPU engine took over and kept the text") };
                let all = self.window.clone();
                self.decode_on_runner(&all).await
            }
            r => r,
        }
    }

    async fn decode_on_runner(&mut self, tokens: &[u32]) -> Result<Trace> {
        let trace = match &mut self.runner {
            Runner::Cpu(d) => tokens.iter().map(|&t| d.push(t, self.tol)).last().unwrap_or_default(),
            Runner::Gpu(d) => d.push_many(tokens, self.tol).await?,
            Runner::Ebt(d) => {
                tokens.iter().for_each(|&t| d.append(t));
                d.think(self.fed - 1, self.steps, self.tol, &self.ebt)?
            }
            Runner::GpuEbt(d) => d.push_many(tokens, self.fed - 1, self.steps, self.tol, &self.ebt).await?,
        };
        trace.check_finite()?;
        Ok(trace)
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
        self.fed += 1;
        if refill {
            return self.refill().await;
        }
        self.decode(&[token]).await
    }

    /// Recomputes the whole window from position 0 (after a slide or a change of T or tolerance).
    async fn refill(&mut self) -> Result<Trace> {
        self.reset_runner();
        let all = self.window.clone();
        self.decode(&all).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descent that overflows stops the run with the core's message instead
    /// of handing a NaN trace to the sampler (the page shows it as the run's
    /// error). The reader refuses such weights and no in-bounds file was found
    /// that overflows (docs/reliability.md), so the weights are changed after loading.
    #[test]
    fn a_non_finite_trace_stops_the_decoder_with_a_message() {
        let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../www/models/small.safetensors")).unwrap();
        let mut dec = pollster::block_on(Decoder::new(&bytes, DecoderOpts { force_cpu: true, ..Default::default() })).unwrap();
        let opts = StepOpts::default();
        pollster::block_on(dec.push(3, &opts)).expect("the shipped model decodes");
        let Runner::Cpu(cpu) = &dec.runner else { panic!("force_cpu gives the CPU engine") };
        let mut p = cpu.params().clone();
        let ff = p.block().ff_scale;
        p.w[ff][0] = f32::INFINITY;
        dec.runner = Runner::Cpu(CpuDecoder::new(p, dec.steps));
        dec.reset();
        match pollster::block_on(dec.push(3, &opts)) {
            Err(Error::NonFinite(m)) => assert!(m.contains("generation stopped"), "{m}"),
            Err(e) => panic!("another error: {e}"),
            Ok(t) => panic!("a non-finite state came back as a trace: {:?}", &t.logits[..3]),
        }
    }
}
