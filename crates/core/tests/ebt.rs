//! The EBT oracle (crates/core/src/ebt.rs): its analytic dE/dz against finite
//! differences, its training loss's parameter gradients (candle's one
//! backward pass through the analytic dE/dz) against finite differences,
//! causality, and thinking lowering the energy.

mod models;

use candle_core::{DType, Device, Tensor, Var};
use models::{randn, rel_err, to_vec};
use nrgpt_core::ebt::{Ebt, ThinkPlan};
use nrgpt_core::model::{init_weights, Weights};
use nrgpt_core::rng::Rng64;
use nrgpt_core::{Activation, Arch, EbtInput, EbtUpdate, ModelConfig, NormKind};

fn config(act: Activation, norm: NormKind) -> ModelConfig {
    let mut c = ModelConfig::new(Arch::Ebt, 11, 16, 2, 2, 8);
    c.layers = 2;
    c.ff_mult = 2;
    c.activation = act;
    c.norm = norm;
    c
}

/// Weights large enough (std 0.3) for the energy to have real structure, in f64.
fn weights(cfg: &ModelConfig, seed: u64) -> Weights {
    let mut w = init_weights(cfg, seed, DType::F64, &Device::Cpu).unwrap();
    let mut rng = Rng64::new(seed ^ 0x5EED);
    for (name, t) in w.iter_mut() {
        if t.rank() == 2 {
            *t = randn(t.dims(), 0.3, &mut rng);
        } else if name.ends_with(".b1") || name.ends_with(".b2") || name.ends_with("ln1") || name.ends_with("ln2") {
            *t = (randn(t.dims(), 0.2, &mut rng) + if name.contains("ln") { 1.0 } else { 0.0 }).unwrap();
        }
    }
    w.insert("ebt.log_a".into(), Tensor::new(&[0.5f64.ln()], &Device::Cpu).unwrap());
    w
}

fn ids(b: usize, n: usize, v: usize, seed: u64) -> Tensor {
    let mut rng = Rng64::new(seed);
    let t: Vec<u32> = (0..b * n).map(|_| (rng.uniform() * v as f64) as u32 % v as u32).collect();
    Tensor::from_vec(t, (b, n), &Device::Cpu).unwrap()
}

#[test]
fn energy_gradient_matches_finite_differences() {
    for (act, norm) in [(Activation::Gelu, NormKind::LayerNorm), (Activation::Relu, NormKind::RmsNorm)] {
        let cfg = config(act, norm);
        let ebt = Ebt::new(&cfg, &weights(&cfg, 3)).unwrap();
        let (b, n, v) = (2, 5, cfg.vocab_size);
        let ctx = ebt.context(&ids(b, n, v, 1)).unwrap();
        let z = randn(&[b, n, v], 1.5, &mut Rng64::new(7));
        let grad = to_vec(&ebt.energy_grad(&ctx, &z, true).unwrap().grad.unwrap());
        let base = to_vec(&z);
        let h = 1e-5;
        let energy_at = |i: usize, delta: f64| {
            let mut x = base.clone();
            x[i] += delta;
            to_vec(&ebt.energy_grad(&ctx, &Tensor::from_vec(x, (b, n, v), &Device::Cpu).unwrap(), false).unwrap().energy)
        };
        let mut numeric = Vec::with_capacity(base.len());
        for i in 0..base.len() {
            let (plus, minus) = (energy_at(i, h), energy_at(i, -h));
            let pos = i / v;
            // each position's energy reads its own candidate only
            for (j, (p, m)) in plus.iter().zip(&minus).enumerate() {
                if j != pos {
                    assert!((p - m).abs() < 1e-12, "E at {j} moved with z at {pos}");
                }
            }
            numeric.push((plus[pos] - minus[pos]) / (2.0 * h));
        }
        let err = rel_err(&grad, &numeric);
        eprintln!("{act:?} {norm:?}: dE/dz relative error {err:.2e}");
        assert!(err < 1e-6, "{act:?} {norm:?}: dE/dz relative error {err:e}");
    }
}

/// The probabilities' step takes dE/dy, whose image under the softmax
/// Jacobian is the logits' dE/dz (checked by finite differences above).
#[test]
fn the_probabilities_gradient_is_the_logits_gradient_before_the_softmax() {
    let mut cfg = config(Activation::Gelu, NormKind::LayerNorm);
    let w = weights(&cfg, 3);
    let (b, n, v) = (2, 5, cfg.vocab_size);
    let x = ids(b, n, v, 1);
    let z = randn(&[b, n, v], 1.5, &mut Rng64::new(7));
    let grad_of = |cfg: &ModelConfig| {
        let ebt = Ebt::new(cfg, &w).unwrap();
        to_vec(&ebt.energy_grad(&ebt.context(&x).unwrap(), &z, true).unwrap().grad.unwrap())
    };
    let gz = grad_of(&cfg);
    cfg.ebt_update = EbtUpdate::Probs;
    let gy = grad_of(&cfg);
    let y = to_vec(&nrgpt_core::ops::softmax_lse(&z).unwrap().0);
    let mut want = Vec::with_capacity(gz.len());
    for (yr, gr) in y.chunks(v).zip(gy.chunks(v)) {
        let dot: f64 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
        want.extend(yr.iter().zip(gr).map(|(y, g)| y * (g - dot)));
    }
    let err = rel_err(&gz, &want);
    assert!(err < 1e-12, "J^T dE/dy differs from dE/dz by {err:e}");
    assert!(rel_err(&gy, &gz) > 0.5, "the two gradients coincide: the check would be vacuous");
}

/// The loss differentiates through the step's gradient: second-order terms
/// (GELU'', the softmax Jacobian, the norms' second derivatives) must all be
/// right, for either update. z is detached between steps, so the two-step
/// loss's gradient is that of `(L1(z0) + L1(z1)) / 2` (or `L1(z1)` alone
/// with the last step's loss) with z1 held at its unperturbed value.
#[test]
fn training_loss_gradients_match_finite_differences() {
    for update in [EbtUpdate::Logits, EbtUpdate::Probs] {
        for final_only in [false, true] {
            training_loss_gradients_match(update, final_only);
        }
    }
}

fn training_loss_gradients_match(update: EbtUpdate, final_only: bool) {
    let mut cfg = config(Activation::Gelu, NormKind::LayerNorm);
    cfg.ebt_update = update;
    // the probabilities' step with its own input map (the reference's S2 pair)
    cfg.ebt_input = if update == EbtUpdate::Probs { EbtInput::Own } else { EbtInput::Tied };
    let w = weights(&cfg, 5);
    let (b, n, v) = (2, 4, cfg.vocab_size);
    let (x, y) = (ids(b, n, v, 2), ids(b, n, v, 3));
    let z0 = randn(&[b, n, v], 1.0, &mut Rng64::new(8));
    let base = Ebt::new(&cfg, &w).unwrap();
    // the regularisers too: a per-token step size and Langevin noise before each step
    let scale = randn(&[b, n, 1], 0.3, &mut Rng64::new(9)).exp().unwrap();
    let noise: Vec<Tensor> = (0..2).map(|s| randn(&[b, n, v], 0.1, &mut Rng64::new(20 + s))).collect();
    let plan = |z0: &Tensor, steps: usize, from: usize| ThinkPlan {
        z0: z0.clone(),
        steps,
        step_scale: Some(scale.clone()),
        langevin: noise[from..from + steps].to_vec(),
        final_only,
        soften: 0.0,
        energy_loss: Default::default(),
    };
    let a = (base.step_size().unwrap().broadcast_mul(&scale)).unwrap();
    let zn0 = (&z0 + &noise[0]).unwrap();
    let g0 = base.energy_grad(&base.context(&x).unwrap(), &zn0, true).unwrap().grad.unwrap();
    let z1 = base.step(&zn0, &g0, &a).unwrap();
    let detached_loss = |w: &Weights| {
        let m = Ebt::new(&cfg, w).unwrap();
        let last = m.train_loss(&x, &y, &plan(&z1, 1, 1)).unwrap().0;
        if final_only {
            return last;
        }
        ((m.train_loss(&x, &y, &plan(&z0, 1, 0)).unwrap().0 + last).unwrap() / 2.0).unwrap()
    };
    let loss_of = |w: &Weights| Ebt::new(&cfg, w).unwrap().train_loss(&x, &y, &plan(&z0, 2, 0)).unwrap().0;
    assert!((to_vec(&loss_of(&w))[0] - to_vec(&detached_loss(&w))[0]).abs() < 1e-12);
    let vars: Vec<(String, Var)> = w.iter().map(|(k, t)| (k.clone(), Var::from_tensor(t).unwrap())).collect();
    let wv: Weights = vars.iter().map(|(k, var)| (k.clone(), var.as_tensor().clone())).collect();
    let grads = loss_of(&wv).backward().unwrap();
    let mut rng = Rng64::new(11);
    let h = 1e-5;
    for (name, var) in &vars {
        let base = to_vec(var.as_tensor());
        // no gradient at all: the loss does not depend on it (the energy's bias, say); the FD must agree
        let g = grads.get(var.as_tensor()).map(to_vec).unwrap_or_else(|| vec![0.0; base.len()]);
        // a few entries of each parameter
        let picks: Vec<usize> = (0..3.min(base.len())).map(|_| (rng.uniform() * base.len() as f64) as usize % base.len()).collect();
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for &i in &picks {
            let at = |delta: f64| {
                let mut ww = w.clone();
                let mut t = base.clone();
                t[i] += delta;
                ww.insert(name.clone(), Tensor::from_vec(t, var.as_tensor().dims(), &Device::Cpu).unwrap());
                to_vec(&detached_loss(&ww))[0]
            };
            got.push(g[i]);
            want.push((at(h) - at(-h)) / (2.0 * h));
        }
        let err = rel_err(&got, &want);
        let scale = want.iter().map(|x| x.abs()).fold(0.0, f64::max);
        assert!(err < 1e-5 || scale < 1e-9, "{update:?} final only {final_only}: {name}: gradient relative error {err:e} ({got:?} vs {want:?})");
    }
}

#[test]
fn a_prediction_reads_only_the_past() {
    let cfg = config(Activation::Gelu, NormKind::LayerNorm);
    let ebt = Ebt::new(&cfg, &weights(&cfg, 9)).unwrap();
    let (n, v) = (6, cfg.vocab_size);
    let a: Vec<u32> = vec![1, 2, 3, 4, 5, 6];
    let mut b = a.clone();
    b[4] = 9; // change position 4: energies at 0..4 must not move
    let z = randn(&[1, n, v], 1.0, &mut Rng64::new(4));
    let energy = |t: &[u32]| {
        let ctx = ebt.context(&Tensor::from_slice(t, (1, n), &Device::Cpu).unwrap()).unwrap();
        to_vec(&ebt.energy_grad(&ctx, &z, false).unwrap().energy)
    };
    let (ea, eb) = (energy(&a), energy(&b));
    for pos in 0..4 {
        assert_eq!(ea[pos], eb[pos], "position {pos} saw the future");
    }
    assert_ne!(ea[4], eb[4], "position 4 must read its own token");
}

#[test]
fn a_small_thinking_step_lowers_every_energy() {
    let cfg = config(Activation::Gelu, NormKind::LayerNorm);
    let mut w = weights(&cfg, 13);
    w.insert("ebt.log_a".into(), Tensor::new(&[1e-2f64.ln()], &Device::Cpu).unwrap());
    let ebt = Ebt::new(&cfg, &w).unwrap();
    let ctx = ebt.context(&ids(2, 6, cfg.vocab_size, 5)).unwrap();
    let z0 = randn(&[2, 6, cfg.vocab_size], 1.0, &mut Rng64::new(6));
    let th = ebt.think(&ctx, &z0, 3, 1.0).unwrap();
    assert_eq!(th.energies.len(), 4);
    for s in 0..3 {
        let (e0, e1) = (to_vec(&th.energies[s]), to_vec(&th.energies[s + 1]));
        for (i, (a, b)) in e0.iter().zip(&e1).enumerate() {
            assert!(b < a, "step {s}, position {i}: energy rose from {a} to {b}");
        }
    }
}
