//! The engine against the CPU reference: exact incremental decoding (CPU
//! twin) equals full recomputation, and the WGSL kernel on a real wgpu adapter
//! (Mesa lavapipe here) matches the reference for every NRGPT variant.

#[path = "../../core/tests/models/mod.rs"]
mod models;

use std::collections::BTreeMap;

use candle_core::{DType, Device};
use models::randn;
use nrgpt_engine::{Backend, Decoder, DecoderOpts, GpuDevice, Trace};
use nrgpt_core::format::Integrity;
use nrgpt_core::model::init_weights;
use nrgpt_core::rng::Rng64;
use nrgpt_core::session::{Session, StepOpts};
use nrgpt_core::{Activation, Arch, BlockNorm, Checkpoint, EtaInit, EtaKind, ModelConfig, NormKind, Vocab};

fn variants() -> Vec<ModelConfig> {
    let mut out = Vec::new();
    for (arch, eta, norm, act) in [
        (Arch::NrgptFf2w, EtaKind::Stable, NormKind::LayerNorm, Activation::Gelu),
        (Arch::NrgptFf2w, EtaKind::Free, NormKind::RmsNorm, Activation::Relu),
        (Arch::NrgptFf1, EtaKind::Stable, NormKind::RmsNorm, Activation::Gelu),
        (Arch::NrgptFf1, EtaKind::Free, NormKind::LayerNorm, Activation::Relu),
    ] {
        let mut c = ModelConfig::new(arch, 20, 32, 2, 3, 48);
        c.eta = eta;
        c.norm = norm;
        c.activation = act;
        c.ff_mult = 2;
        out.push(c);
    }
    // the reference's attention: a fixed beta, the mask with the diagonal
    // (exact self term), full-rank J (head_dim = d_model), free eta
    let mut c = out[0].clone();
    (c.attn_beta, c.attn_diag, c.head_dim, c.eta, c.eta_init) = (Some(0.5), true, c.d_model, EtaKind::Free, EtaInit::Normal);
    out.push(c);
    // the diagonal and the bare block norm (gain 1, bias), on the other feed-forward energy and norm
    let mut c = out[2].clone();
    (c.attn_diag, c.block_norm) = (true, BlockNorm::Bare);
    out.push(c);
    out
}

/// A random checkpoint with weights big enough for attention and energies to matter.
fn random_checkpoint(cfg: &ModelConfig, seed: u64) -> Vec<u8> {
    let mut w = init_weights(cfg, seed, DType::F32, &Device::Cpu).unwrap();
    let mut rng = Rng64::new(seed + 1);
    for (name, t) in w.iter_mut() {
        let std = match name.as_str() {
            "tok_emb" | "pos_emb" => 0.5,
            n if n.ends_with("wq") || n.ends_with("wk") => 0.3,
            n if n.contains("ff.w") => 0.15,
            "block.eta.log_c" => continue,
            "block.norm.bias" => 0.5,
            _ => continue,
        };
        *t = randn(t.dims(), std, &mut rng).to_dtype(DType::F32).unwrap();
    }
    if let Some(c) = w.get_mut("block.eta.log_c") {
        *c = candle_core::Tensor::new(&[(0.3f32).ln()], &Device::Cpu).unwrap();
    }
    let chars: Vec<char> = "abcdefghij klmnopqr\n".chars().collect();
    let ck = Checkpoint {
        config: cfg.clone(),
        vocab: Vocab::from_chars(chars).unwrap(),
        weights: w,
        extra: BTreeMap::new(),
        meta: BTreeMap::new(),
        integrity: Integrity::Verified,
    };
    ck.to_bytes().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn seq(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng64::new(seed);
    (0..n).map(|_| r.below(vocab) as u32).collect()
}

fn engine(bytes: &[u8], force_cpu: bool) -> Decoder {
    pollster::block_on(Decoder::new(bytes, DecoderOpts { force_cpu, ..Default::default() })).unwrap()
}

/// Compares two traces: logits and per-step energies within `tol`.
fn assert_traces_close(what: &str, a: &Trace, b: &Trace, tol: f32) {
    let d = max_diff(&a.logits, &b.logits);
    assert!(d < tol, "{what}: logits differ by {d}");
    let e = max_diff(&a.energies, &b.energies);
    let scale = b.energies.iter().fold(1.0f32, |m, x| m.max(x.abs()));
    assert!(e / scale < tol, "{what}: energies differ by {e} (scale {scale})");
    assert_eq!(a.steps_used, b.steps_used, "{what}: steps used");
    assert_eq!(a.step_logits.len(), b.step_logits.len());
    for (t, (x, y)) in a.step_logits.iter().zip(&b.step_logits).enumerate() {
        assert!(max_diff(x, y) < tol, "{what}: step {t} logits differ");
    }
}

/// Cached incremental decoding (CPU twin) equals recomputing the window, for
/// every token of a sequence that also crosses a window slide.
#[test]
fn incremental_decoding_equals_full_recomputation() {
    for (i, cfg) in variants().iter().enumerate() {
        let bytes = random_checkpoint(cfg, 100 + i as u64);
        let mut reference = Session::from_bytes(&bytes).unwrap();
        let mut eng = engine(&bytes, true);
        assert!(matches!(eng.backend(), Backend::Cpu { .. }));
        for (k, &tok) in seq(80, cfg.vocab_size, 7).iter().enumerate() {
            let want = reference.push(tok, &StepOpts::default()).unwrap();
            let got = pollster::block_on(eng.push(tok, &StepOpts::default())).unwrap();
            assert_traces_close(&format!("{:?} {:?} diag {} token {k}", cfg.arch, cfg.eta, cfg.attn_diag), &got, &want, 1e-4);
        }
    }
}

fn gpu_engine(bytes: &[u8]) -> Decoder {
    let eng = engine(bytes, false);
    match eng.backend() {
        Backend::Gpu { adapter } => eprintln!("adapter: {adapter}"),
        Backend::Cpu { reason } => {
            panic!("no wgpu adapter ({reason}); install Mesa lavapipe (`apt-get install mesa-vulkan-drivers`) — `cargo xtask test` does this")
        }
    }
    eng
}

/// WGSL vs the CPU reference on a 64-char prompt: logits < 1e-3 and the same
/// per-step energies; then 256 forced-decoding steps agree on the top-1 character.
#[test]
fn wgsl_matches_cpu_reference_for_every_variant() {
    for (i, cfg) in variants().iter().enumerate() {
        let bytes = random_checkpoint(cfg, 200 + i as u64);
        check_gpu_against_reference(&format!("{:?}/{:?}/diag {}/{:?}", cfg.arch, cfg.eta, cfg.attn_diag, cfg.block_norm), &bytes, cfg.vocab_size);
    }
}

pub fn check_gpu_against_reference(what: &str, bytes: &[u8], vocab: usize) {
    let mut reference = Session::from_bytes(bytes).unwrap();
    let mut gpu = gpu_engine(bytes);
    let prompt = seq(64, vocab, 3);
    let opts = StepOpts::default();
    // the prompt one character at a time: every position's logits and energies
    for (k, &tok) in prompt.iter().enumerate() {
        let want = reference.push(tok, &opts).unwrap();
        let got = pollster::block_on(gpu.push(tok, &opts)).unwrap();
        assert_traces_close(&format!("{what} prompt {k}"), &got, &want, 1e-3);
    }
    // forced decoding: feed the reference's argmax, compare the GPU's argmax
    let argmax = |l: &[f32]| nrgpt_core::sample::argmax(l) as u32;
    let mut tok = argmax(&reference.push(0, &opts).unwrap().logits);
    pollster::block_on(gpu.push(0, &opts)).unwrap();
    let mut agree = 0;
    for _ in 0..256 {
        let want = reference.push(tok, &opts).unwrap();
        let got = pollster::block_on(gpu.push(tok, &opts)).unwrap();
        if argmax(&want.logits) == argmax(&got.logits) {
            agree += 1;
        }
        tok = argmax(&want.logits);
    }
    assert_eq!(agree, 256, "{what}: top-1 agreed on {agree}/256 forced steps");
}

/// With early exit the GPU and the CPU twin stop at the same steps, and hard
/// characters use more steps than easy ones at least somewhere.
#[test]
fn early_exit_agrees_between_gpu_and_cpu() {
    let cfg = &variants()[0];
    let bytes = random_checkpoint(cfg, 300);
    let mut cpu = engine(&bytes, true);
    let mut gpu = gpu_engine(&bytes);
    let opts = StepOpts { steps: Some(12), early_exit: Some(0.05), ..Default::default() };
    let mut used = Vec::new();
    for (k, &tok) in seq(40, cfg.vocab_size, 9).iter().enumerate() {
        let a = pollster::block_on(cpu.push(tok, &opts)).unwrap();
        let b = pollster::block_on(gpu.push(tok, &opts)).unwrap();
        assert_traces_close(&format!("early exit token {k}"), &b, &a, 1e-3);
        used.push(a.steps_used);
    }
    assert!(used.iter().any(|&u| u < 12), "no character exited early: {used:?}");
}

/// Each character is one dispatch covering all T recursion steps, whatever
/// T; a prompt goes in one submission and gives the same result as feeding
/// it character by character.
#[test]
fn one_dispatch_per_character_and_prompt_prefill_agrees() {
    let cfg = &variants()[1];
    let bytes = random_checkpoint(cfg, 400);
    let prompt = seq(40, cfg.vocab_size, 11);
    let opts = StepOpts::default();
    let mut a = gpu_engine(&bytes);
    let ta = pollster::block_on(a.push_many(&prompt, &opts)).unwrap();
    assert_eq!(a.dispatches(), prompt.len() as u64, "the prompt took {} dispatches", a.dispatches());
    let mut b = gpu_engine(&bytes);
    let mut tb = Trace::default();
    for &t in &prompt {
        tb = pollster::block_on(b.push(t, &opts)).unwrap();
    }
    assert_traces_close("prefill vs one by one", &ta, &tb, 1e-4);
    for k in 0..5 {
        pollster::block_on(a.push(k, &opts)).unwrap();
    }
    assert_eq!(a.dispatches(), prompt.len() as u64 + 5);
    // one dispatch covers all T recursion steps: the count does not grow with T
    for steps in [1, 3, 9] {
        let mut e = gpu_engine(&bytes);
        let opts = StepOpts { steps: Some(steps), ..Default::default() };
        for k in 0..6 {
            pollster::block_on(e.push(k, &opts)).unwrap();
        }
        assert_eq!(e.dispatches(), 6, "T = {steps}: {} dispatches for 6 characters", e.dispatches());
    }
}

/// Quantized checkpoints: the kernel decodes the packed int8/int4 codes (and
/// f16 widened to f32) on the GPU and matches the CPU reference run on the
/// dequantized weights, within the same bounds as f32.
#[test]
fn wgsl_matches_cpu_reference_for_every_quantization() {
    use nrgpt_core::format::Scheme;
    let cfg = &variants()[0];
    let f32_bytes = random_checkpoint(cfg, 500);
    let ck = Checkpoint::from_bytes(&f32_bytes, DType::F32, &Device::Cpu).unwrap();
    for scheme in [Scheme::Int8, Scheme::Int4, Scheme::F16] {
        let bytes = ck.to_quant_bytes(scheme).unwrap();
        check_gpu_against_reference(&format!("{scheme:?}"), &bytes, cfg.vocab_size);
    }
}

/// The shipped default checkpoint (int8) runs on the GPU exactly as on the CPU reference.
#[test]
fn shipped_default_matches_on_gpu() {
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../www/models/default.safetensors")).unwrap();
    let vocab = Checkpoint::from_bytes(&bytes, DType::F32, &Device::Cpu).unwrap().vocab.len();
    check_gpu_against_reference("shipped default", &bytes, vocab);
}

/// Changing T between calls recomputes the cached window under the new T,
/// through `push` and through `push_many` alike.
#[test]
fn changing_steps_mid_sequence_recomputes_the_window() {
    let cfg = &variants()[2];
    let bytes = random_checkpoint(cfg, 600);
    let toks = seq(20, cfg.vocab_size, 13);
    let t5 = StepOpts { steps: Some(5), early_exit: None, ..Default::default() };
    let mut reference = Session::from_bytes(&bytes).unwrap();
    let mut want = Trace::default();
    for &t in &toks {
        want = reference.push(t, &t5).unwrap();
    }
    for many in [false, true] {
        let mut eng = engine(&bytes, true);
        pollster::block_on(eng.push_many(&toks[..12], &StepOpts::default())).unwrap();
        let got = if many {
            pollster::block_on(eng.push_many(&toks[12..], &t5)).unwrap()
        } else {
            toks[12..].iter().map(|&t| pollster::block_on(eng.push(t, &t5)).unwrap()).last().unwrap()
        };
        assert_traces_close(&format!("steps change (push_many: {many})"), &got, &want, 1e-4);
    }
}

/// A prompt many windows long costs only what the window will hold (the
/// shared `window_after` rule), and the state it leaves equals feeding it
/// character by character, in the engine (GPU and CPU) and in the reference.
#[test]
fn a_long_prompt_costs_one_window() {
    let cfg = &variants()[0];
    let bytes = random_checkpoint(cfg, 700);
    let block = cfg.block_size;
    let prompt = seq(10 * block + 7, cfg.vocab_size, 17);
    let opts = StepOpts::default();
    let mut one_by_one = Session::from_bytes(&bytes).unwrap();
    let want = prompt.iter().map(|&t| one_by_one.push(t, &opts).unwrap()).last().unwrap();
    let got = Session::from_bytes(&bytes).unwrap().push_many(&prompt, &opts).unwrap();
    assert_traces_close("reference push_many", &got, &want, 1e-5);
    for chunk in [prompt.len(), 32] {
        let mut gpu = gpu_engine(&bytes);
        let mut cpu = engine(&bytes, true);
        let (mut g, mut c) = (Trace::default(), Trace::default());
        for part in prompt.chunks(chunk) {
            g = pollster::block_on(gpu.push_many(part, &opts)).unwrap();
            c = pollster::block_on(cpu.push_many(part, &opts)).unwrap();
        }
        assert_traces_close(&format!("CPU engine, chunks of {chunk}"), &c, &want, 1e-4);
        assert_traces_close(&format!("GPU engine, chunks of {chunk}"), &g, &want, 1e-3);
        if chunk == prompt.len() {
            // in one piece only the final window is computed
            assert!(gpu.dispatches() as usize <= block, "{} dispatches for a {}-character prompt", gpu.dispatches(), prompt.len());
        }
    }
}

/// Two sequences (two models) on one shared device, fed in
/// turns, give each the traces it gives on a device of its own: a page with
/// several widgets needs one device, and they do not disturb each other.
#[test]
fn decoders_sharing_one_device_keep_their_own_sequences() {
    let gpu = pollster::block_on(GpuDevice::open()).expect("a wgpu adapter (lavapipe: `apt-get install mesa-vulkan-drivers`)");
    let (cfg_a, cfg_b) = (&variants()[0], &variants()[1]);
    let (bytes_a, bytes_b) = (random_checkpoint(cfg_a, 500), random_checkpoint(cfg_b, 501));
    let on = |bytes: &[u8], gpu: Option<GpuDevice>| pollster::block_on(Decoder::new(bytes, DecoderOpts { gpu, ..Default::default() })).unwrap();
    let (mut a, mut b) = (on(&bytes_a, Some(gpu.clone())), on(&bytes_b, Some(gpu.clone())));
    let (mut alone_a, mut alone_b) = (on(&bytes_a, None), on(&bytes_b, None));
    for d in [&a, &b] {
        assert!(matches!(d.backend(), Backend::Gpu { .. }), "{:?}", d.backend());
    }
    let opts = StepOpts::default();
    let (sa, sb) = (seq(30, cfg_a.vocab_size, 3), seq(30, cfg_b.vocab_size, 4));
    for k in 0..30 {
        let ta = pollster::block_on(a.push(sa[k], &opts)).unwrap();
        let tb = pollster::block_on(b.push(sb[k], &opts)).unwrap();
        assert_traces_close(&format!("a, token {k}"), &ta, &pollster::block_on(alone_a.push(sa[k], &opts)).unwrap(), 1e-5);
        assert_traces_close(&format!("b, token {k}"), &tb, &pollster::block_on(alone_b.push(sb[k], &opts)).unwrap(), 1e-5);
    }
}
