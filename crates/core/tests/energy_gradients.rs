//! Every analytic energy gradient against central finite differences of its
//! energy, in f64 (relative error < 1e-6).

mod models;

use candle_core::{Device, Tensor};
use models::{randn, rel_err, to_vec};
use nrgpt_core::energy::{AttnEnergy, FfEnergy};
use nrgpt_core::norm::{norm, norm_vjp};
use nrgpt_core::rng::Rng64;
use nrgpt_core::{Activation, NormKind};

const H: f64 = 1e-5;
const TOL: f64 = 1e-6;

/// Central differences of token A's energy w.r.t. its own g_A, for every
/// (batch, token, coordinate), next to the analytic gradient.
fn check_token_energy(name: &str, g: &Tensor, f: impl Fn(&Tensor) -> (Tensor, Tensor)) {
    let e = token_energy_err(name, g, to_vec(&f(g).0), f);
    assert!(e < TOL, "{name}: relative error {e:e}");
}

/// Relative error of `analytic` against central differences of each
/// token's energy w.r.t. its own g_A (energy from `f(g).1`).
fn token_energy_err(name: &str, g: &Tensor, analytic: Vec<f64>, f: impl Fn(&Tensor) -> (Tensor, Tensor)) -> f64 {
    let (b, n, d) = g.dims3().unwrap();
    let base = to_vec(g);
    let mut numeric = vec![0.0; base.len()];
    for i in 0..base.len() {
        let token = i / d; // flat index over (b, n)
        let at = |delta: f64| {
            let mut v = base.clone();
            v[i] += delta;
            let gp = Tensor::from_vec(v, (b, n, d), &Device::Cpu).unwrap();
            to_vec(&f(&gp).1)[token]
        };
        numeric[i] = (at(H) - at(-H)) / (2.0 * H);
    }
    assert!(numeric.iter().any(|x| x.abs() > 1e-3), "{name}: gradient is trivially zero");
    rel_err(&analytic, &numeric)
}

/// Random attention energy, beta = 1/sqrt(head_dim) (ours), strict mask.
fn attn(n_head: usize, head_dim: usize, d: usize, rng: &mut Rng64) -> AttnEnergy {
    AttnEnergy {
        wq: randn(&[n_head * head_dim, d], 0.5, rng),
        wk: randn(&[n_head * head_dim, d], 0.5, rng),
        alpha: randn(&[n_head], 1.0, rng),
        n_head,
        beta: 1.0 / (head_dim as f64).sqrt(),
        diag: false,
    }
}

fn attn_check(name: &str, a: &AttnEnergy, g: &Tensor) {
    check_token_energy(name, g, |g| {
        let r = a.energy_grad(g, true).unwrap();
        (r.grad, r.energy.unwrap())
    });
}

/// A fixed beta (the reference's 1, and a sharper 2.5) and the mask with
/// the diagonal, alone and together, on several heads and a full-rank J
/// (head_dim = D).
#[test]
fn attention_energy_beta_and_diagonal() {
    let mut rng = Rng64::new(7);
    for (heads, dh, d) in [(3, 4, 8), (2, 6, 6)] {
        for (beta, diag) in [(Some(1.0), false), (None, true), (Some(1.0), true), (Some(2.5), true)] {
            let mut a = attn(heads, dh, d, &mut rng);
            a.beta = beta.unwrap_or(a.beta);
            a.diag = diag;
            let g = randn(&[2, 5, d], 1.0, &mut rng);
            attn_check(&format!("E_AT {heads} heads dh {dh} beta {} diag {diag}", a.beta), &a, &g);
        }
    }
}

/// With the diagonal the first token has an energy of its own,
/// -sum_h alpha_h g_1^T J_h g_1, and a gradient.
#[test]
fn attention_with_diagonal_first_token_sees_itself() {
    let mut rng = Rng64::new(8);
    let mut a = attn(2, 3, 6, &mut rng);
    (a.beta, a.diag) = (1.0, true);
    let g = randn(&[1, 3, 6], 1.0, &mut rng);
    let r = a.energy_grad(&g, true).unwrap();
    let (gv, wq, wk, al) = (to_vec(&g), to_vec(&a.wq), to_vec(&a.wk), to_vec(&a.alpha));
    // -sum_h alpha_h (Wk_h g_1) . (Wq_h g_1)
    let mut want = 0.0;
    for h in 0..2 {
        let dot = |w: &[f64], i: usize| (0..6).map(|j| w[(h * 3 + i) * 6 + j] * gv[j]).sum::<f64>();
        want -= al[h] * (0..3).map(|i| dot(&wk, i) * dot(&wq, i)).sum::<f64>();
    }
    let got = to_vec(&r.energy.unwrap())[0];
    assert!((got - want).abs() < 1e-12 * want.abs().max(1.0), "E_1 = {got}, want {want}");
    assert!(to_vec(&r.grad)[..6].iter().any(|&x| x.abs() > 1e-3));
}

/// The reference's update with the diagonal, `- sum_h alpha_h J_h^T sum_{B<=A} p_AB g_B`
/// (no self term), written here independently in scalar f64, is *not* the
/// gradient of E_A: the finite-difference check that ours passes fails it.
#[test]
fn attention_diagonal_without_the_self_term_fails_the_check() {
    let mut rng = Rng64::new(9);
    let (heads, dh, d, n) = (2, 4, 6, 5);
    let mut a = attn(heads, dh, d, &mut rng);
    (a.beta, a.diag) = (1.0, true);
    let g = randn(&[1, n, d], 1.0, &mut rng);
    let (gv, wq, wk, al) = (to_vec(&g), to_vec(&a.wq), to_vec(&a.wk), to_vec(&a.alpha));
    let proj = |w: &[f64], row: usize| -> Vec<f64> { (0..heads * dh).map(|i| (0..d).map(|j| w[i * d + j] * gv[row * d + j]).sum()).collect() };
    let mut partial = vec![0.0; n * d];
    for t in 0..n {
        let q = proj(&wq, t);
        let keys: Vec<Vec<f64>> = (0..=t).map(|b| proj(&wk, b)).collect();
        for (h, &alpha) in al.iter().enumerate().take(heads) {
            let s: Vec<f64> = keys.iter().map(|k| a.beta * (h * dh..(h + 1) * dh).map(|i| k[i] * q[i]).sum::<f64>()).collect();
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for (b, sb) in s.iter().enumerate() {
                let p = (sb - m).exp() / z;
                // - alpha_h p_AB Wq_h^T k_B
                for j in 0..d {
                    partial[t * d + j] -= alpha * p * (h * dh..(h + 1) * dh).map(|i| wq[i * d + j] * keys[b][i]).sum::<f64>();
                }
            }
        }
    }
    let e = token_energy_err("reference's partial gradient", &g, partial, |g| {
        let r = a.energy_grad(g, true).unwrap();
        (r.grad, r.energy.unwrap())
    });
    eprintln!("the partial gradient's relative error: {e:.3e}");
    assert!(e > 1e-2, "the self term should matter: relative error {e:e}");
}

#[test]
fn attention_energy_one_head() {
    let mut rng = Rng64::new(1);
    let a = attn(1, 6, 6, &mut rng);
    let g = randn(&[2, 5, 6], 1.0, &mut rng);
    check_token_energy("E_AT 1 head", &g, |g| {
        let r = a.energy_grad(g, true).unwrap();
        (r.grad, r.energy.unwrap())
    });
}

#[test]
fn attention_energy_several_heads() {
    let mut rng = Rng64::new(2);
    let a = attn(3, 4, 8, &mut rng);
    let g = randn(&[2, 6, 8], 1.0, &mut rng);
    check_token_energy("E_AT 3 heads", &g, |g| {
        let r = a.energy_grad(g, true).unwrap();
        (r.grad, r.energy.unwrap())
    });
}

#[test]
fn attention_first_token_has_zero_energy_and_gradient() {
    let mut rng = Rng64::new(3);
    let a = attn(2, 3, 6, &mut rng);
    let g = randn(&[1, 4, 6], 1.0, &mut rng);
    let r = a.energy_grad(&g, true).unwrap();
    assert!(to_vec(&r.grad)[..6].iter().all(|&x| x == 0.0));
    assert_eq!(to_vec(&r.energy.unwrap())[0], 0.0);
}

fn ff_check(name: &str, ff: FfEnergy, act: Activation, rng: &mut Rng64) {
    let g = randn(&[2, 3, 6], 1.0, rng);
    check_token_energy(name, &g, |g| {
        let r = ff.energy_grad(act, g, true).unwrap();
        (r.grad, r.energy.unwrap())
    });
}

#[test]
fn ff1_energy_gelu_and_relu() {
    let mut rng = Rng64::new(4);
    for act in [Activation::Gelu, Activation::Relu] {
        let ff = FfEnergy::Ff1 { w: randn(&[10, 6], 0.5, &mut rng), b: randn(&[10], 0.5, &mut rng) };
        ff_check(&format!("FF1 {act:?}"), ff, act, &mut rng);
    }
}

#[test]
fn ff2w_energy_gelu_and_relu() {
    let mut rng = Rng64::new(5);
    for act in [Activation::Gelu, Activation::Relu] {
        let ff = FfEnergy::Ff2w {
            w1: randn(&[10, 6], 0.5, &mut rng),
            b1: randn(&[10], 0.5, &mut rng),
            w2: randn(&[6, 10], 0.5, &mut rng),
            b2: randn(&[6], 0.5, &mut rng),
        };
        ff_check(&format!("FF2W {act:?}"), ff, act, &mut rng);
    }
}

/// J_N^T v against finite differences of v . N(x), for both norms.
#[test]
fn norm_vjp_matches_finite_differences() {
    let mut rng = Rng64::new(6);
    for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
        let (rows, d) = (3, 7);
        let x = randn(&[rows, d], 1.0, &mut rng);
        let gamma = randn(&[d], 1.0, &mut rng);
        let v = randn(&[rows, d], 1.0, &mut rng);
        let n = norm(kind, &x, &gamma, 1e-5).unwrap();
        let analytic = to_vec(&norm_vjp(kind, &n, &gamma, &v).unwrap());
        let (xb, vb) = (to_vec(&x), to_vec(&v));
        let f = |xs: Vec<f64>| -> f64 {
            let t = Tensor::from_vec(xs, (rows, d), &Device::Cpu).unwrap();
            let g = to_vec(&norm(kind, &t, &gamma, 1e-5).unwrap().g);
            g.iter().zip(&vb).map(|(a, b)| a * b).sum()
        };
        let numeric: Vec<f64> = (0..xb.len())
            .map(|i| {
                let (mut p, mut m) = (xb.clone(), xb.clone());
                p[i] += H;
                m[i] -= H;
                (f(p) - f(m)) / (2.0 * H)
            })
            .collect();
        let e = rel_err(&analytic, &numeric);
        assert!(e < TOL, "{kind:?} VJP relative error {e:e}");
    }
}
