//! The fast backend against candle's autograd (the reference path the trainer
//! used before): on small configs of every model variant, the loss and the
//! gradient of every parameter must agree to ~1e-4 relative (f32 fast vs f64
//! candle), and a backward with one term left out must fail the same check.

use candle_core::{DType, Device, Tensor, Var};
use nrgpt_core::model::{cross_entropy, init_weights, Dropout, Weights};
use nrgpt_core::rng::Rng64;
use nrgpt_core::{Activation, Arch, BlockNorm, EtaInit, EtaKind, ForwardOpts, GptBlock, Model, ModelConfig, NormKind};
use trainer::fast::{mask_count, Fault, FastModel};

/// Relative tolerance on the loss and on each gradient (l2 norm of the error
/// over the l2 norm of the reference, per parameter tensor).
const TOL: f64 = 1e-4;

/// Over `SEQS_PER_CHUNK` (8), so the batch splits into chunks (5 + 5) whose gradients are summed.
const BATCH: usize = 10;

fn config(arch: Arch, act: Activation, norm: NormKind, eta: EtaKind) -> ModelConfig {
    let mut c = ModelConfig::new(arch, 11, 16, 2, 3, 8);
    c.activation = act;
    c.norm = norm;
    c.eta = eta;
    c
}

/// Weights far from the init (std 0.02 would make attention uniform and the
/// activations nearly linear, hiding the second-order terms): matrices with
/// std 0.3, embeddings std 1, scales and biases scattered around their init.
fn weights(cfg: &ModelConfig, seed: u64) -> Weights {
    let base = init_weights(cfg, seed, DType::F64, &Device::Cpu).unwrap();
    let mut rng = Rng64::new(seed ^ 0xABCD);
    base.into_iter()
        .map(|(name, t)| {
            let dims = t.dims().to_vec();
            let n: usize = dims.iter().product();
            let data: Vec<f64> = (0..n)
                .map(|_| {
                    let z = rng.normal();
                    match name.as_str() {
                        "tok_emb" | "pos_emb" => z,
                        "block.eta.log_c" => -1.0 + 0.1 * z,
                        "block.eta.w" => 0.3 * z,
                        n if n.ends_with("gamma") || n.ends_with("ln1") || n.ends_with("ln2") || n.ends_with("alpha") || n.ends_with("ff_scale") => {
                            1.0 + 0.3 * z
                        }
                        n if n.ends_with(".b") || n.ends_with(".b1") || n.ends_with(".b2") => 0.3 * z,
                        _ => 0.3 * z,
                    }
                })
                .collect();
            (name, Tensor::from_vec(data, dims, &Device::Cpu).unwrap())
        })
        .collect()
}

fn batch(cfg: &ModelConfig, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = Rng64::new(seed);
    let n = BATCH * cfg.block_size;
    let ids = (0..n).map(|_| rng.below(cfg.vocab_size) as u32).collect();
    let tgt = (0..n).map(|_| rng.below(cfg.vocab_size) as u32).collect();
    (ids, tgt)
}

fn masks(cfg: &ModelConfig, p: f64) -> Option<Vec<Vec<f32>>> {
    if p <= 0.0 {
        return None;
    }
    let mut d = Dropout { p, rng: Rng64::new(99) };
    let shape = [BATCH, cfg.block_size, cfg.d_model];
    Some((0..mask_count(cfg)).map(|_| d.mask(&shape, DType::F32, &Device::Cpu).unwrap().unwrap().flatten_all().unwrap().to_vec1().unwrap()).collect())
}

/// The attention-dropout masks (one per step, batch x heads x n x n), from the stream `reference` uses.
fn attn_masks(cfg: &ModelConfig, p: f64) -> Option<Vec<Vec<f32>>> {
    if p <= 0.0 {
        return None;
    }
    let mut d = Dropout { p, rng: Rng64::new(77) };
    let shape = [BATCH, cfg.n_head, cfg.block_size, cfg.block_size];
    Some((0..cfg.steps).map(|_| d.mask(&shape, DType::F32, &Device::Cpu).unwrap().unwrap().flatten_all().unwrap().to_vec1().unwrap()).collect())
}

/// candle autograd in f64: loss and every parameter's gradient.
fn reference(cfg: &ModelConfig, w: &Weights, ids: &[u32], tgt: &[u32], dropout: f64, attn: f64) -> (f64, Vec<(String, Vec<f64>)>) {
    let vars: Vec<(String, Var)> = w.iter().map(|(n, t)| (n.clone(), Var::from_tensor(t).unwrap())).collect();
    let model = Model::new(cfg, &vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect()).unwrap();
    let x = Tensor::from_slice(ids, (BATCH, cfg.block_size), &Device::Cpu).unwrap();
    let y = Tensor::from_slice(tgt, (BATCH, cfg.block_size), &Device::Cpu).unwrap();
    let mut drop = Dropout { p: dropout, rng: Rng64::new(99) };
    let mut attn_drop = Dropout { p: attn, rng: Rng64::new(77) };
    let logits = model.forward(&x, ForwardOpts { dropout: Some(&mut drop), attn_dropout: Some(&mut attn_drop), ..Default::default() }).unwrap().logits;
    let loss = cross_entropy(&logits, &y).unwrap();
    let grads = loss.backward().unwrap();
    let g = vars.iter().map(|(n, v)| (n.clone(), grads.get(v).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap())).collect();
    (loss.to_scalar::<f64>().unwrap(), g)
}

/// Largest relative error over the loss and every gradient, with its name.
fn compare(cfg: &ModelConfig, dropout: f64, attn: f64, threads: usize, fault: Option<Fault>) -> (f64, String) {
    let w = weights(cfg, 7);
    let (ids, tgt) = batch(cfg, 3);
    let (ref_loss, ref_grads) = reference(cfg, &w, &ids, &tgt, dropout, attn);
    let mut fast = FastModel::new(cfg, &w, BATCH, threads).unwrap();
    fast.fault = fault;
    let (mk, ak) = (masks(cfg, dropout), attn_masks(cfg, attn));
    let loss = fast.loss_and_grad_dropped(&ids, &tgt, mk.as_deref(), ak.as_deref()).unwrap();
    let fg = fast.grad_weights().unwrap();
    let mut worst = ((loss - ref_loss).abs() / ref_loss.abs(), "loss".to_string());
    assert_eq!(fg.len(), ref_grads.len(), "every parameter has a gradient");
    for (name, rg) in &ref_grads {
        let g: Vec<f32> = fg[name].flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(g.len(), rg.len());
        let err: f64 = g.iter().zip(rg).map(|(&a, &b)| (a as f64 - b).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = rg.iter().map(|b| b * b).sum::<f64>().sqrt();
        assert!(norm > 1e-6, "{name}: reference gradient is ~zero ({norm}); the check would be vacuous");
        let rel = err / norm;
        if rel > worst.0 || rel.is_nan() {
            worst = (rel, name.clone());
        }
    }
    (worst.0, worst.1)
}

fn check(cfg: &ModelConfig, dropout: f64) {
    check_with(cfg, dropout, 0.0);
}

/// `check` with attention dropout `attn` as well.
fn check_with(cfg: &ModelConfig, dropout: f64, attn: f64) {
    for threads in [1, 2] {
        let (err, name) = compare(cfg, dropout, attn, threads, None);
        eprintln!(
            "{} {:?} {:?} {:?} dropout {dropout} attention dropout {attn} threads {threads}: max relative error {err:.2e} ({name})",
            cfg.arch.name(),
            cfg.activation,
            cfg.norm,
            cfg.eta
        );
        assert!(err < TOL, "relative error {err:e} in {name} exceeds {TOL:e}");
    }
}

#[test]
fn ff2w_gelu_layernorm_stable() {
    check(&config(Arch::NrgptFf2w, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable), 0.0);
}

#[test]
fn ff2w_relu_layernorm_stable() {
    check(&config(Arch::NrgptFf2w, Activation::Relu, NormKind::LayerNorm, EtaKind::Stable), 0.0);
}

#[test]
fn ff1_gelu_and_relu() {
    check(&config(Arch::NrgptFf1, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable), 0.0);
    check(&config(Arch::NrgptFf1, Activation::Relu, NormKind::LayerNorm, EtaKind::Stable), 0.0);
}

#[test]
fn rmsnorm_free_eta_and_dropout() {
    check(&config(Arch::NrgptFf2w, Activation::Gelu, NormKind::RmsNorm, EtaKind::Stable), 0.0);
    check(&config(Arch::NrgptFf2w, Activation::Gelu, NormKind::LayerNorm, EtaKind::Free), 0.0);
    check(&config(Arch::NrgptFf1, Activation::Gelu, NormKind::RmsNorm, EtaKind::Free), 0.0);
    check(&config(Arch::NrgptFf2w, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable), 0.2);
}

/// The reference's attention options: a fixed beta, the mask with the
/// diagonal (exact self term), a free eta started at N(0, 0.02), the bare
/// block norm (gain 1, learnable bias), a full-rank J (head_dim = D); each
/// alone and all together.
#[test]
fn reference_options() {
    let base = config(Arch::NrgptFf2w, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable);
    let with = |f: &dyn Fn(&mut ModelConfig)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    check(&with(&|c| c.attn_beta = Some(1.0)), 0.0);
    check(&with(&|c| c.attn_diag = true), 0.0);
    check(&with(&|c| (c.eta, c.eta_init) = (EtaKind::Free, EtaInit::Normal)), 0.0);
    check(&with(&|c| c.block_norm = BlockNorm::Bare), 0.0);
    check(&with(&|c| (c.block_norm, c.norm) = (BlockNorm::Bare, NormKind::RmsNorm)), 0.0);
    let all = |c: &mut ModelConfig| {
        (c.attn_beta, c.attn_diag, c.eta, c.eta_init, c.head_dim, c.block_norm) = (Some(1.0), true, EtaKind::Free, EtaInit::Normal, c.d_model, BlockNorm::Bare)
    };
    check(&with(&all), 0.0);
    check(
        &with(&|c| {
            all(c);
            (c.norm, c.arch) = (NormKind::RmsNorm, Arch::NrgptFf1);
        }),
        0.2,
    );
}

/// Dropout on the attention probabilities (the reference's 0.1 on `wei`):
/// NRGPT's P' = P * mask in C and in the self term, and dP = dP' * mask; with
/// the strict mask and with the diagonal, alone and beside the residual
/// dropout; and the GPT baselines' o = P' v.
#[test]
fn attention_dropout() {
    let base = config(Arch::NrgptFf2w, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable);
    check_with(&base, 0.0, 0.3);
    let mut diag = base.clone();
    diag.attn_diag = true;
    check_with(&diag, 0.2, 0.3);
    check_with(&config(Arch::NrgptFf1, Activation::Relu, NormKind::RmsNorm, EtaKind::Free), 0.0, 0.3);
    // the masks act: the loss moves when they are on
    let w = weights(&base, 7);
    let (ids, tgt) = batch(&base, 3);
    let mut fast = FastModel::new(&base, &w, BATCH, 1).unwrap();
    let plain = fast.loss_and_grad(&ids, &tgt, None).unwrap();
    let dropped = fast.loss_and_grad_dropped(&ids, &tgt, None, attn_masks(&base, 0.3).as_deref()).unwrap();
    assert!((plain - dropped).abs() > 1e-5, "attention dropout changed nothing: {plain} vs {dropped}");
    // the GPT baselines drop their attention probabilities too (P' = P * mask in o = P' v)
    check_with(&config(Arch::Gpt, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable), 0.2, 0.3);
    let mut par = config(Arch::GptRec, Activation::Relu, NormKind::LayerNorm, EtaKind::Stable);
    par.gpt_block = GptBlock::Parallel;
    check_with(&par, 0.0, 0.3);
}

#[test]
fn gpt_and_gpt_rec() {
    check(&config(Arch::Gpt, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable), 0.0);
    check(&config(Arch::GptRec, Activation::Relu, NormKind::RmsNorm, EtaKind::Stable), 0.0);
    check(&config(Arch::Gpt, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable), 0.2);
    check(&config(Arch::GptRec, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable), 0.2);
    // the reference's GPT_Rec_parallel block: both branches read the layer's input
    for (arch, dropout) in [(Arch::GptRec, 0.0), (Arch::Gpt, 0.2)] {
        let mut c = config(arch, Activation::Relu, NormKind::LayerNorm, EtaKind::Stable);
        c.gpt_block = GptBlock::Parallel;
        check(&c, dropout);
    }
}

/// Thread count changes nothing, to the bit (chunks are fixed, summed in order).
#[test]
fn gradients_do_not_depend_on_the_thread_count() {
    let cfg = config(Arch::NrgptFf2w, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable);
    let w = weights(&cfg, 5);
    let (ids, tgt) = batch(&cfg, 4);
    let run = |threads| {
        let mut f = FastModel::new(&cfg, &w, BATCH, threads).unwrap();
        let loss = f.loss_and_grad(&ids, &tgt, None).unwrap();
        (loss, f.grads.clone())
    };
    let (l1, g1) = run(1);
    for threads in [2, 3] {
        let (l, g) = run(threads);
        assert_eq!(l.to_bits(), l1.to_bits());
        assert!(g == g1, "{threads} threads changed the gradients");
    }
}

/// The check has teeth: leaving out one term of the backward fails it by far.
#[test]
fn a_wrong_backward_fails_the_check() {
    let cfg = config(Arch::NrgptFf2w, Activation::Gelu, NormKind::LayerNorm, EtaKind::Stable);
    let mut diag = cfg.clone();
    diag.attn_diag = true;
    for (cfg, fault) in [(&cfg, Fault::NoSecondOrder), (&cfg, Fault::NoSoftmaxPath), (&diag, Fault::NoSelfQuery)] {
        let (err, name) = compare(cfg, 0.0, 0.0, 2, Some(fault));
        eprintln!("{fault:?}: max relative error {err:.2e} ({name})");
        assert!(err > 100.0 * TOL, "{fault:?} went unnoticed: error {err:e}");
    }
}

/// Through the CLI: `--backend fast` and `--backend candle` train the same
/// model on the same batches (losses agree to f32 round-off over a few
/// updates), for NRGPT and for the GPT baseline, with dropout and attention
/// dropout on.
#[test]
fn cli_backends_agree() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let run = |backend: &str, model: &str| {
        let out = std::env::temp_dir().join(format!("nrgpt-fast-{}-{backend}-{model}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_trainer"))
            .current_dir(&root)
            .args(["train", "--model", model, "--d-model", "32", "--heads", "2", "--steps", "2", "--block", "32", "--batch", "8"])
            .args(["--iters", "6", "--eval-every", "1000", "--eval-iters", "2", "--dropout", "0.1", "--quiet", "--backend", backend])
            .args(["--attn-dropout", "0.1"])
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        (o, out)
    };
    let losses = |dir: &std::path::Path| -> Vec<f64> {
        let log = std::fs::read_to_string(dir.join("log.csv")).unwrap();
        log.lines().skip(1).filter_map(|l| l.split(',').nth(2)?.parse().ok()).collect()
    };
    for model in ["nrgpt-ff2w", "gpt"] {
        let (fast, fast_dir) = run("fast", model);
        let (cand, cand_dir) = run("candle", model);
        assert!(fast.status.success(), "{}", String::from_utf8_lossy(&fast.stderr));
        assert!(cand.status.success(), "{}", String::from_utf8_lossy(&cand.stderr));
        assert!(String::from_utf8_lossy(&fast.stderr).contains("fast backend"));
        assert!(String::from_utf8_lossy(&cand.stderr).contains("candle backend"));
        let (a, b) = (losses(&fast_dir), losses(&cand_dir));
        assert_eq!(a.len(), 6);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-4 * y.abs(), "{model}: fast {x} vs candle {y}: {a:?} {b:?}");
        }
    }
}
