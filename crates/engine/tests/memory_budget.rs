//! The memory budget (`crates/core/src/bounds/memory.rs`) is an upper bound
//! of what the code allocates, and the reader refuses every file past it.
//!
//! A counting global allocator measures the peak bytes live while a random
//! small config is loaded and decoded (the engine's CPU decoders, the
//! reference session of the GPT baselines, an EBT's oracle session) or run
//! through the reference forward; each peak must stay below its estimate.
//! Then random configs anywhere inside the field bounds go to the reader
//! as a header without tensors: it refuses exactly those whose decoding
//! estimate is past the budget, before reading any tensor.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use nrgpt_core::bounds::memory::{self, Figure, HERE, NATIVE, PAGE};
use nrgpt_core::bounds::{checked_params, MAX_PARAMS};
use nrgpt_core::ebt_session::EbtSession;
use nrgpt_core::format::header::model_meta;
use nrgpt_core::format::{Integrity, PackedCheckpoint, Scheme, FORMAT_F32};
use nrgpt_core::model::init_weights;
use nrgpt_core::rng::Rng64;
use nrgpt_core::session::{EbtThinkOpts, Session, StepOpts};
use nrgpt_core::{Activation, Arch, BlockNorm, Checkpoint, EtaKind, ForwardOpts, GptBlock, ModelConfig, NormKind, Vocab};
use nrgpt_engine::{Decoder, DecoderOpts};

struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size() as u64, Ordering::SeqCst) + layout.size() as u64;
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size() as u64, Ordering::SeqCst);
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size() as u64, Ordering::SeqCst) + layout.size() as u64;
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        p
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new) };
        if !q.is_null() {
            // both blocks may be live during the move
            let now = LIVE.fetch_add(new as u64, Ordering::SeqCst) + new as u64;
            PEAK.fetch_max(now, Ordering::SeqCst);
            LIVE.fetch_sub(layout.size() as u64, Ordering::SeqCst);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One measurement at a time: the counters are global.
static ONE: Mutex<()> = Mutex::new(());

/// An estimate without its fixed part: a measurement runs after the
/// process's one-time allocations (see `peak_of`), so the arrays alone must bound it.
fn arrays(e: &memory::Estimate) -> u64 {
    e.terms.iter().filter(|t| t.what != memory::RUNTIME).map(|t| t.bytes()).sum()
}

/// Peak bytes allocated above what was live before `f`, on its second run:
/// the first makes the process's one-time, kept allocations (thread pools,
/// the matrix products' per-thread buffers), which the estimate's fixed
/// term stands for.
fn peak_of(f: impl Fn()) -> u64 {
    f();
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f();
    PEAK.load(Ordering::SeqCst) - base
}

const CHARS: &str = "abcdefghijklmnopqrstuvwxyz .,;:!?'\n-ABCDE";

/// A random config of `arch` small enough to run, with every option the arch allows drawn too.
fn small_config(arch: Arch, rng: &mut Rng64) -> ModelConfig {
    let mut pick = |lo: usize, hi: usize| lo + rng.below(hi - lo + 1);
    let mut c = ModelConfig::new(arch, pick(2, CHARS.len()), pick(1, 48), pick(1, 6), pick(1, 4), pick(1, 96));
    c.head_dim = pick(1, 16);
    c.ff_mult = pick(1, 4);
    c.layers = pick(1, 3);
    c.norm = if pick(0, 1) == 0 { NormKind::LayerNorm } else { NormKind::RmsNorm };
    c.activation = if pick(0, 1) == 0 { Activation::Gelu } else { Activation::Relu };
    if arch.is_nrgpt() {
        c.eta = if pick(0, 1) == 0 { EtaKind::Stable } else { EtaKind::Free };
        c.attn_diag = pick(0, 1) == 1;
        c.block_norm = if pick(0, 1) == 0 { BlockNorm::Gain } else { BlockNorm::Bare };
    }
    if matches!(arch, Arch::Gpt | Arch::GptRec) && pick(0, 1) == 1 {
        c.gpt_block = GptBlock::Parallel;
    }
    c.validate().unwrap();
    c
}

fn file(cfg: &ModelConfig, seed: u64, scheme: Scheme) -> Vec<u8> {
    let weights = init_weights(cfg, seed, DType::F32, &Device::Cpu).unwrap();
    let vocab = Vocab::from_chars(CHARS.chars().take(cfg.vocab_size).collect()).unwrap();
    let ck = Checkpoint { config: cfg.clone(), vocab, weights, extra: BTreeMap::new(), meta: BTreeMap::new(), integrity: Integrity::Verified };
    ck.to_quant_bytes(scheme).unwrap()
}

const ARCHS: [Arch; 5] = [Arch::NrgptFf2w, Arch::NrgptFf1, Arch::Gpt, Arch::GptRec, Arch::Ebt];
const SCHEMES: [Scheme; 3] = [Scheme::F32, Scheme::Int8, Scheme::Int4];

/// Cases per test in the suite; `NRGPT_BUDGET_CASES` runs more.
fn cases() -> usize {
    std::env::var("NRGPT_BUDGET_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(60)
}

#[test]
fn decoding_allocates_less_than_its_estimate() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng64::new(0xB0D6E7);
    let mut worst = 0f64;
    for i in 0..cases() {
        let arch = ARCHS[i % ARCHS.len()];
        let cfg = small_config(arch, &mut rng);
        let bytes = file(&cfg, i as u64, SCHEMES[i % SCHEMES.len()]);
        // the whole window and a slide past it
        let tokens: Vec<u32> = (0..cfg.block_size + 3).map(|t| (t * 7 % cfg.vocab_size) as u32).collect();
        let opts = StepOpts { steps: None, early_exit: None, ebt: EbtThinkOpts { samples: 1, ..Default::default() } };
        let used = peak_of(|| {
            if arch == Arch::Gpt || arch == Arch::GptRec {
                let mut s = Session::from_bytes(&bytes).unwrap();
                for &t in &tokens {
                    s.push(t, &opts).unwrap();
                }
            } else {
                let mut d = pollster::block_on(Decoder::new(&bytes, DecoderOpts { force_cpu: true, ..Default::default() })).unwrap();
                for &t in &tokens {
                    pollster::block_on(d.push(t, &opts)).unwrap();
                }
            }
        });
        let est = arrays(&memory::decode(&cfg));
        worst = worst.max(used as f64 / est as f64);
        assert!(used <= est, "case {i}: decoding {cfg:?} allocated {used} bytes, estimated {est}");
    }
    println!("decoding: the largest peak was {:.0}% of its estimate", 100.0 * worst);
}

#[test]
fn the_reference_forward_allocates_less_than_its_estimate() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng64::new(0xF0D);
    let mut worst = 0f64;
    for i in 0..cases() {
        let arch = ARCHS[i % 4]; // the EBT thinks instead (below)
        let cfg = small_config(arch, &mut rng);
        let bytes = file(&cfg, i as u64, Scheme::F32);
        let (b, n) = (1 + rng.below(6), 1 + rng.below(cfg.block_size));
        let ids: Vec<u32> = (0..b * n).map(|t| (t * 5 % cfg.vocab_size) as u32).collect();
        let used = peak_of(|| {
            let ck = Checkpoint::from_bytes(&bytes, DType::F32, &Device::Cpu).unwrap();
            let x = Tensor::from_vec(ids.clone(), (b, n), &Device::Cpu).unwrap();
            let f = ck.model().unwrap().forward(&x, ForwardOpts { record: cfg.arch.is_nrgpt(), ..Default::default() }).unwrap();
            drop(f);
        });
        let est = arrays(&memory::forward(&cfg, Figure::new("batch", b), Figure::new("context", n)));
        worst = worst.max(used as f64 / est as f64);
        assert!(used <= est, "case {i}: a {b} x {n} forward of {cfg:?} allocated {used} bytes, estimated {est}");
    }
    println!("forward: the largest peak was {:.0}% of its estimate", 100.0 * worst);
}

#[test]
fn an_ebt_session_allocates_less_than_its_estimate() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng64::new(0xEB7);
    let mut worst = 0f64;
    for i in 0..cases() / 3 {
        let cfg = small_config(Arch::Ebt, &mut rng);
        let bytes = file(&cfg, i as u64, Scheme::F32);
        let samples = 1 + rng.below(4);
        let steps = 1 + rng.below(4);
        let tokens: Vec<u32> = (0..cfg.block_size + 2).map(|t| (t * 3 % cfg.vocab_size) as u32).collect();
        let opts = StepOpts { steps: Some(steps), early_exit: None, ebt: EbtThinkOpts { samples, ..Default::default() } };
        let used = peak_of(|| {
            let ck = Checkpoint::from_bytes(&bytes, DType::F32, &Device::Cpu).unwrap();
            let mut s = EbtSession::new(&ck).unwrap();
            for &t in &tokens {
                s.push(t, &opts).unwrap();
            }
        });
        let est = arrays(&memory::think(&cfg, Figure::new("batch", 1), Figure::new("block_size", cfg.block_size), steps, samples));
        worst = worst.max(used as f64 / est as f64);
        assert!(used <= est, "case {i}: an EBT session of {cfg:?} allocated {used} bytes, estimated {est}");
    }
    println!("EBT session: the largest peak was {:.0}% of its estimate", 100.0 * worst);
}

/// A config anywhere inside the field bounds, sizes drawn log-uniformly.
fn any_config(rng: &mut Rng64) -> ModelConfig {
    let arch = [Arch::NrgptFf2w, Arch::NrgptFf1, Arch::Gpt, Arch::GptRec, Arch::Ebt][rng.below(5)];
    let mut log = |hi: u32| (1usize << rng.below(hi as usize + 1)) + rng.below(3);
    let mut c = ModelConfig::new(arch, log(16).min(1 << 16), log(13).min(8192), log(10).min(1024), log(10).min(1024), log(16).min(1 << 16));
    c.head_dim = log(13).min(8192);
    c.ff_mult = log(6).min(64);
    c.layers = log(8).min(256);
    c
}

#[test]
fn the_reader_refuses_exactly_the_files_past_the_budget() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng64::new(0x5EED);
    let (mut refused, mut tried) = (0, 0);
    while tried < 20 * cases() {
        let cfg = any_config(&mut rng);
        if checked_params(&cfg).is_none_or(|p| p > MAX_PARAMS) {
            continue;
        }
        tried += 1;
        // the header alone: the reader must decide before it reads a tensor
        let vocab =
            Vocab::from_chars((0..cfg.vocab_size as u32).map(|i| char::from_u32(if i < 0xD000 { 0x100 + i } else { 0x10000 + i }).unwrap()).collect()).unwrap();
        let md = model_meta(FORMAT_F32, &cfg, &vocab).unwrap();
        let bytes = safetensors::serialize(Vec::<(String, safetensors::tensor::TensorView)>::new(), Some(md)).unwrap();
        let err = PackedCheckpoint::from_bytes(&bytes).unwrap_err().to_string();
        let est = memory::decode(&cfg);
        if est.bytes() > HERE.bytes {
            refused += 1;
            assert!(err.contains("past the native memory budget") && err.contains("driven by"), "{err}");
        } else {
            assert!(err.contains("missing weight"), "an in-budget config was refused for: {err}");
        }
        // what the page would say, from the same estimate
        assert_eq!(est.check(PAGE).is_err(), est.bytes() > PAGE.bytes);
        assert_eq!(est.check(NATIVE).is_err(), est.bytes() > NATIVE.bytes);
    }
    assert!(refused > 0 && refused < tried, "the draw should land on both sides: {refused} of {tried} refused");
    println!("reader: {refused} of {tried} in-range configs refused by the budget");
}
