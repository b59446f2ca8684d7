//! Every analytic energy gradient against central finite differences of its
//! energy, in f64 (relative error < 1e-6).

mod common;

use candle_core::{Device, Tensor};
use common::{randn, rel_err, to_vec};
use nrgpt_core::energy::{AttnEnergy, FfEnergy};
use nrgpt_core::norm::{norm, norm_vjp};
use nrgpt_core::rng::Rng64;
use nrgpt_core::{Activation, NormKind};

const H: f64 = 1e-5;
const TOL: f64 = 1e-6;

/// Central differences of token A's energy w.r.t. its own g_A, for every
/// (batch, token, coordinate), next to the analytic gradient.
fn check_token_energy(name: &str, g: &Tensor, f: impl Fn(&Tensor) -> (Tensor, Tensor)) {
    let (b, n, d) = g.dims3().unwrap();
    let (grad, _) = f(g);
    let analytic = to_vec(&grad);
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
    let e = rel_err(&analytic, &numeric);
    assert!(e < TOL, "{name}: relative error {e:e}");
    assert!(numeric.iter().any(|x| x.abs() > 1e-3), "{name}: gradient is trivially zero");
}

fn attn(n_head: usize, head_dim: usize, d: usize, rng: &mut Rng64) -> AttnEnergy {
    AttnEnergy {
        wq: randn(&[n_head * head_dim, d], 0.5, rng),
        wk: randn(&[n_head * head_dim, d], 0.5, rng),
        alpha: randn(&[n_head], 1.0, rng),
        n_head,
    }
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
