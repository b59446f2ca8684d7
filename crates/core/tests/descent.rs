//! The NRGPT descent: the stable step size lowers every token's energy, and
//! the whole model is causal.

mod models;

use candle_core::{Device, Tensor};
use models::{ids, random_model, rel_err, tiny_config, to_vec};
use nrgpt_core::model::Weights;
use nrgpt_core::{Arch, BlockNorm, EtaKind, ForwardOpts, Model, ModelConfig, NormKind};

/// A random NRGPT with eta = c * diag(gamma), c small, gamma random positive/negative
/// (with the bare block norm: gain 1, so eta = c I, and a random bias).
fn stable_model(arch: Arch, norm: NormKind, c: f64, steps: usize) -> (Model, ModelConfig) {
    stable_model_with(arch, norm, c, steps, |_| {})
}

fn stable_model_with(arch: Arch, norm: NormKind, c: f64, steps: usize, opts: impl Fn(&mut ModelConfig)) -> (Model, ModelConfig) {
    let mut cfg = tiny_config(arch);
    cfg.norm = norm;
    cfg.steps = steps;
    cfg.eta = EtaKind::Stable;
    opts(&mut cfg);
    let (_, mut w): (Model, Weights) = random_model(&cfg, 11);
    w.insert("block.eta.log_c".into(), Tensor::new(&[c.ln()], &Device::Cpu).unwrap());
    let affine = if cfg.block_norm == BlockNorm::Bare { "block.norm.bias" } else { "block.norm.gamma" };
    w.insert(affine.into(), models::randn(&[cfg.d_model], 1.0, &mut nrgpt_core::rng::Rng64::new(5)));
    (Model::new(&cfg, &w).unwrap(), cfg)
}

/// Token A's energy after its own step, with the tokens before it held where
/// they were, never exceeds its energy before the step (Prop 2.1, discrete).
#[test]
fn own_step_never_raises_a_tokens_energy() {
    own_step_descends(|_| {});
}

/// The same guarantee with the reference's options: beta 1 and the mask with
/// the diagonal (the exact gradient keeps it: with the earlier tokens fixed,
/// E_A is still a function of g_A alone), and the bare block norm (stable
/// step c I, the fixed gain).
#[test]
fn own_step_descends_with_the_diagonal_and_the_bare_norm() {
    own_step_descends(|c| (c.attn_beta, c.attn_diag) = (Some(1.0), true));
    own_step_descends(|c| c.block_norm = BlockNorm::Bare);
    own_step_descends(|c| (c.attn_beta, c.attn_diag, c.block_norm) = (Some(1.0), true, BlockNorm::Bare));
}

fn own_step_descends(opts: impl Fn(&mut ModelConfig) + Copy) {
    for arch in [Arch::NrgptFf2w, Arch::NrgptFf1] {
        for norm in [NormKind::LayerNorm, NormKind::RmsNorm] {
            let (model, _) = stable_model_with(arch, norm, 0.01, 1, opts);
            let block = model.nrgpt_block().unwrap();
            let seq = [1u32, 4, 2, 9, 4, 7, 0, 3];
            let mut x = model.embed(&ids(&seq)).unwrap();
            let mut decreases = 0;
            for _t in 0..20 {
                let out = block.step(&x, true, None, None).unwrap();
                let before = to_vec(&out.energy.unwrap());
                for (a, &before_a) in before.iter().enumerate().take(seq.len()) {
                    // tokens < A from x(t), token A from x(t+1)
                    let mixed = Tensor::cat(&[x.narrow(1, 0, a).unwrap(), out.x_next.narrow(1, a, 1).unwrap()], 1).unwrap();
                    let g = block.normed(&mixed).unwrap();
                    let after = to_vec(&block.energy_grad(&g, true).unwrap().energy.unwrap())[a];
                    assert!(after <= before_a + 1e-12, "{arch:?} {norm:?} token {a}: {before_a} -> {after}");
                    if after < before_a - 1e-9 {
                        decreases += 1;
                    }
                }
                x = out.x_next;
            }
            assert!(decreases > 100, "{arch:?} {norm:?}: energies barely moved ({decreases} decreases)");
        }
    }
}

/// Token A descending with the tokens before it settled (held at the end of a
/// long parallel descent): its energy is non-increasing at every step of the
/// whole trajectory, and falls clearly.
#[test]
fn energy_is_monotone_once_earlier_tokens_settle() {
    for norm in [NormKind::LayerNorm, NormKind::RmsNorm] {
        let (model, _) = stable_model(Arch::NrgptFf2w, norm, 0.05, 300);
        let block = model.nrgpt_block().unwrap();
        let seq = [3u32, 1, 4, 1, 5, 9];
        let settled = model.forward(&ids(&seq), ForwardOpts { record: true, ..Default::default() }).unwrap();
        let ctx = settled.states.last().unwrap().clone();
        let x0 = model.embed(&ids(&seq)).unwrap();
        for a in 1..seq.len() {
            let mut xa = x0.narrow(1, a, 1).unwrap();
            let mut energies = Vec::new();
            for _ in 0..200 {
                let x = Tensor::cat(&[ctx.narrow(1, 0, a).unwrap(), xa.clone()], 1).unwrap();
                let out = block.step(&x, true, None, None).unwrap();
                energies.push(to_vec(&out.energy.unwrap())[a]);
                xa = out.x_next.narrow(1, a, 1).unwrap();
            }
            for (t, w) in energies.windows(2).enumerate() {
                assert!(w[1] <= w[0] + 1e-12, "{norm:?} token {a} step {t}: {} -> {}", w[0], w[1]);
            }
            let (first, last) = (energies[0], *energies.last().unwrap());
            assert!(last < first - 0.1, "{norm:?} token {a}: energy only fell from {first} to {last}");
        }
    }
}

/// Changing token k changes no logits or energies at positions < k (and does change position k).
#[test]
fn every_model_is_causal() {
    for arch in [Arch::NrgptFf2w, Arch::NrgptFf1, Arch::Gpt, Arch::GptRec] {
        // only NRGPT has an eta step (a free one elsewhere is refused by the reader)
        let etas: &[EtaKind] = if arch.is_nrgpt() { &[EtaKind::Stable, EtaKind::Free] } else { &[EtaKind::Stable] };
        for &eta in etas {
            let mut cfg = tiny_config(arch);
            cfg.eta = eta;
            let (model, _) = random_model(&cfg, 21);
            let a = [1u32, 2, 3, 4, 5, 6, 7, 8];
            let k = 5;
            let mut b = a;
            b[k] = 10;
            let run = |s: &[u32]| model.forward(&ids(s), ForwardOpts { record: true, ..Default::default() }).unwrap();
            let (fa, fb) = (run(&a), run(&b));
            let v = cfg.vocab_size;
            let (la, lb) = (to_vec(&fa.logits), to_vec(&fb.logits));
            assert_eq!(la[..k * v], lb[..k * v], "{arch:?} {eta:?}: logits before {k} changed");
            assert!(rel_err(&la[k * v..], &lb[k * v..]) > 1e-6, "{arch:?}: position {k} ignored its token");
            if let (Some(ea), Some(eb)) = (fa.energies, fb.energies) {
                let (ea, eb) = (to_vec(&ea), to_vec(&eb));
                let n = a.len();
                for t in 0..=cfg.steps {
                    assert_eq!(ea[t * n..t * n + k], eb[t * n..t * n + k], "{arch:?}: energies before {k} changed at step {t}");
                }
            }
        }
    }
}

/// The full block gradient (attention + ff_scale * FF) matches finite
/// differences of the block's per-token energy.
#[test]
fn block_energy_gradient_matches_finite_differences() {
    let cfg = tiny_config(Arch::NrgptFf2w);
    let (_, mut w) = random_model(&cfg, 4);
    w.insert("block.ff_scale".into(), Tensor::new(&[0.7f64], &Device::Cpu).unwrap());
    let model = Model::new(&cfg, &w).unwrap();
    let block = model.nrgpt_block().unwrap();
    let g = models::randn(&[1, 4, cfg.d_model], 1.0, &mut nrgpt_core::rng::Rng64::new(9));
    let grad = to_vec(&block.energy_grad(&g, false).unwrap().grad);
    let base = to_vec(&g);
    let h = 1e-5;
    let numeric: Vec<f64> = (0..base.len())
        .map(|i| {
            let tok = i / cfg.d_model;
            let e = |delta: f64| {
                let mut v = base.clone();
                v[i] += delta;
                let t = Tensor::from_vec(v, (1, 4, cfg.d_model), &Device::Cpu).unwrap();
                to_vec(&block.energy_grad(&t, true).unwrap().energy.unwrap())[tok]
            };
            (e(h) - e(-h)) / (2.0 * h)
        })
        .collect();
    let err = rel_err(&grad, &numeric);
    assert!(err < 1e-6, "block gradient relative error {err:e}");
}
