//! Decode benchmark (not a test): ms/char and chars/s of the CPU engine, the
//! wgpu engine (lavapipe here, a real GPU elsewhere) and the full-recompute
//! CPU reference, at several context lengths, in one run.
//!
//! Then the shipped EBT: the CPU engine (cached real keys) against the
//! oracle session, which recomputes the window for every character.
//!
//! Then a long prompt's time to its first character: read character by
//! character (what the page did before) against reading only the window.
//!
//! `cargo run --release -p nrgpt-engine --example decode_bench [-- --quick]`

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::{DType, Device};
use nrgpt_engine::{Backend, Decoder, DecoderOpts};
use nrgpt_core::format::Integrity;
use nrgpt_core::model::init_weights;
use nrgpt_core::ebt_session::EbtSession;
use nrgpt_core::session::{EbtThinkOpts, Session, StepOpts};
use nrgpt_core::{Arch, Checkpoint, ModelConfig, Vocab};

fn checkpoint(block: usize) -> Vec<u8> {
    // the shipped default's shape, with a block long enough for the contexts
    let cfg = ModelConfig::new(Arch::NrgptFf2w, 65, 128, 4, 4, block);
    let w = init_weights(&cfg, 1, DType::F32, &Device::Cpu).unwrap();
    let chars: Vec<char> = (0..65u8).map(|i| (b'0' + i) as char).collect();
    let ck = Checkpoint {
        config: cfg,
        vocab: Vocab::from_chars(chars).unwrap(),
        weights: w,
        extra: BTreeMap::new(),
        meta: BTreeMap::new(),
        integrity: Integrity::Verified,
    };
    ck.to_bytes().unwrap()
}

/// Mean ms per character for `k` pushes ending at context length `ctx`.
fn time_engine(eng: &mut Decoder, ctx: usize, k: usize, opts: &StepOpts) -> f64 {
    eng.reset();
    let prompt: Vec<u32> = (0..(ctx - k) as u32).map(|i| i % 65).collect();
    pollster::block_on(eng.push_many(&prompt, opts)).unwrap();
    let t0 = Instant::now();
    for i in 0..k {
        pollster::block_on(eng.push(i as u32 % 65, opts)).unwrap();
    }
    t0.elapsed().as_secs_f64() * 1000.0 / k as f64
}

fn time_reference(s: &mut Session, ctx: usize, k: usize) -> f64 {
    let opts = StepOpts::default();
    s.reset();
    for i in 0..(ctx - k) as u32 {
        s.push(i % 65, &opts).unwrap();
    }
    let t0 = Instant::now();
    for i in 0..k {
        s.push(i as u32 % 65, &opts).unwrap();
    }
    t0.elapsed().as_secs_f64() * 1000.0 / k as f64
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let block = 256;
    let bytes = checkpoint(block);
    let mut cpu = pollster::block_on(Decoder::new(&bytes, DecoderOpts { force_cpu: true, ..Default::default() })).unwrap();
    let mut gpu = pollster::block_on(Decoder::new(&bytes, DecoderOpts::default())).unwrap();
    let mut reference = Session::from_bytes(&bytes).unwrap();
    let gpu_name = match gpu.backend() {
        Backend::Gpu { adapter } => adapter.clone(),
        Backend::Cpu { reason } => format!("none ({reason}): GPU column is the CPU engine"),
    };
    let k = if quick { 2 } else { 8 };
    println!("decode benchmark: nrgpt-ff2w d=128 heads=4 T=4, block {block}; wgpu adapter: {gpu_name}");
    println!("| context | CPU engine ms/char | wgpu ms/char | CPU reference (recompute) ms/char | wgpu / CPU engine | chars/s CPU engine | chars/s wgpu |");
    println!("|---|---|---|---|---|---|---|");
    let contexts: &[usize] = if quick { &[16] } else { &[16, 64, 128, 256] };
    for &ctx in contexts {
        let c = time_engine(&mut cpu, ctx, k, &StepOpts::default());
        let g = time_engine(&mut gpu, ctx, k, &StepOpts::default());
        let r = time_reference(&mut reference, ctx, k.min(4));
        println!("| {ctx} | {c:.2} | {g:.2} | {r:.2} | {:.2} | {:.0} | {:.0} |", g / c, 1000.0 / c, 1000.0 / g);
    }
    // every context was pushed in full once on the GPU engine
    let chars: usize = contexts.iter().sum();
    let dispatches = gpu.dispatches();
    let per_char = dispatches as f64 / chars as f64;
    println!("GPU dispatches: {dispatches} for {chars} characters = {per_char:.2} per character = {:.2} per recursion step (T=4)", per_char / 4.0);
    ebt(k, quick);
    long_prompt(quick);
}

/// Time to the first character of a 5,000-character prompt on the shipped
/// default (block 128), CPU engine: fed one character at a time, as the page
/// did before, against `push_many`, which computes only what the window keeps.
fn long_prompt(quick: bool) {
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../www/models/default.safetensors")).unwrap();
    let mut cpu = pollster::block_on(Decoder::new(&bytes, DecoderOpts { force_cpu: true, ..Default::default() })).unwrap();
    let n = if quick { 1_000 } else { 5_000 };
    let prompt: Vec<u32> = (0..n as u32).map(|i| (i * 7) % 65).collect();
    let opts = StepOpts::default();
    let t0 = Instant::now();
    let one_by_one = prompt.iter().map(|&t| pollster::block_on(cpu.push(t, &opts)).unwrap()).last().unwrap();
    let before = t0.elapsed().as_secs_f64();
    cpu.reset();
    let t0 = Instant::now();
    let at_once = pollster::block_on(cpu.push_many(&prompt, &opts)).unwrap();
    let after = t0.elapsed().as_secs_f64();
    let diff = one_by_one.logits.iter().zip(&at_once.logits).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    println!("{n}-character prompt, shipped default, CPU engine: first character after {before:.2} s fed one by one, {:.1} ms reading the window only ({:.0}x; logits differ by {diff:.1e})", after * 1000.0, before / after);
}

/// The shipped EBT at its trained S with Best-of-4: ms per character of the
/// CPU engine and of the oracle session, at several context lengths.
fn ebt(k: usize, quick: bool) {
    let k = k.min(4);
    let path = "www/models/ebt.safetensors";
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../www/models/ebt.safetensors")).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let opts = StepOpts { ebt: EbtThinkOpts { samples: 4, ..Default::default() }, ..Default::default() };
    let mut cpu = pollster::block_on(Decoder::new(&bytes, DecoderOpts { force_cpu: true, ..Default::default() })).unwrap();
    let mut oracle = EbtSession::new(&Checkpoint::from_bytes(&bytes, DType::F32, &Device::Cpu).unwrap()).unwrap();
    let cfg = cpu.config().clone();
    println!("\nEBT {path}: d={} layers={} S={} N=4, block {}", cfg.d_model, cfg.layers, cfg.steps, cfg.block_size);
    println!("| context | CPU engine ms/char | oracle session (recompute) ms/char |");
    println!("|---|---|---|");
    let contexts: &[usize] = if quick { &[16] } else { &[8, 16, 32, 64] };
    for &ctx in contexts {
        let c = time_engine(&mut cpu, ctx, k, &opts);
        oracle.reset();
        oracle.feed(&(0..(ctx - k) as u32).map(|i| i % 65).collect::<Vec<_>>()).unwrap();
        let t0 = Instant::now();
        (0..k as u32).for_each(|i| drop(oracle.push(i % 65, &opts).unwrap()));
        let r = t0.elapsed().as_secs_f64() * 1000.0 / k as f64;
        println!("| {ctx} | {c:.2} | {r:.2} |");
    }
}
