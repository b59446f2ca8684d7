//! The limits every loaded file must respect, in one place for the trainer,
//! the engine and the page: ranges for each config field, a cap on the
//! parameter count (counted with checked arithmetic, so a hostile config
//! cannot wrap it), and the values a weight or an optimizer moment may hold.
//! A file from disk or the network is untrusted; everything past these
//! checks (the layout's products, the decoders' slicing) relies on them.
//! What a config in range would allocate is bounded in [`memory`].

pub mod memory;

use crate::layout::{Body, WeightLayout};
use crate::{Arch, BlockNorm, EtaInit, EtaKind, Error, GptBlock, ModelConfig, Result};

/// Largest vocabulary (a character model; ids are u32).
pub const MAX_VOCAB: usize = 1 << 16;
pub const MAX_D_MODEL: usize = 8192;
pub const MAX_HEADS: usize = 1024;
pub const MAX_HEAD_DIM: usize = 8192;
/// Recursion steps, layers or thinking steps: bounds the work per character.
pub const MAX_STEPS: usize = 1024;
pub const MAX_LAYERS: usize = 256;
pub const MAX_BLOCK: usize = 1 << 16;
pub const MAX_FF_MULT: usize = 64;
/// 2^28 parameters: 1 GiB as f32, within a 32-bit (wasm) address space.
pub const MAX_PARAMS: u64 = 1 << 28;
/// Largest |weight|: trained models stay below 3; 1e3 leaves room for
/// unusual runs while a flipped exponent bit (1e30 and up) is caught.
pub const MAX_ABS_WEIGHT: f32 = 1e3;
/// Largest |log| of the parameters used as `e^x` (eta's log c, EBT's log a):
/// e^12 is already a step of 1.6e5.
pub const MAX_ABS_LOG: f32 = 12.0;
/// Largest |first moment| and second moment of AdamW: gradients are
/// clipped to a norm near 1, so these are generous.
pub const MAX_ABS_MOMENT: f32 = 1e4;
pub const MAX_SECOND_MOMENT: f32 = 1e8;

fn field_err(field: &'static str, value: impl std::fmt::Display, rule: String) -> Error {
    Error::ConfigField { field, value: value.to_string(), rule }
}

fn in_range(field: &'static str, value: usize, lo: usize, hi: usize) -> Result<()> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(field_err(field, value, format!("must be in {lo}..={hi}")))
    }
}

/// Checks every field of `cfg` against its range and the parameter count
/// against [`MAX_PARAMS`].
pub fn check_config(cfg: &ModelConfig) -> Result<()> {
    in_range("vocab_size", cfg.vocab_size, 1, MAX_VOCAB)?;
    in_range("d_model", cfg.d_model, 1, MAX_D_MODEL)?;
    in_range("n_head", cfg.n_head, 1, MAX_HEADS)?;
    in_range("head_dim", cfg.head_dim, 1, MAX_HEAD_DIM)?;
    in_range("steps", cfg.steps, 1, MAX_STEPS)?;
    in_range("layers", cfg.layers, 1, MAX_LAYERS)?;
    in_range("block_size", cfg.block_size, 1, MAX_BLOCK)?;
    in_range("ff_mult", cfg.ff_mult, 1, MAX_FF_MULT)?;
    if !(cfg.ebt_noise >= 0.0 && cfg.ebt_noise <= 1e3) {
        return Err(field_err("ebt_noise", cfg.ebt_noise, "must be finite, in 0..=1000".into()));
    }
    if !(cfg.ebt_clamp >= 0.0 && cfg.ebt_clamp <= 1e3) || (cfg.ebt_clamp > 0.0 && cfg.arch != Arch::Ebt) {
        return Err(field_err("ebt_clamp", cfg.ebt_clamp, "must be finite, in 0..=1000, and only on an EBT".into()));
    }
    if !(cfg.eps > 0.0 && cfg.eps <= 1.0) {
        return Err(field_err("eps", cfg.eps, "must be in (0, 1]".into()));
    }
    check_nrgpt_options(cfg)?;
    match checked_params(cfg) {
        Some(n) if n <= MAX_PARAMS => Ok(()),
        n => {
            let got = n.map_or("more than 2^64".to_string(), |n| n.to_string());
            Err(field_err("parameters", got, format!("the config's parameter count must be at most {MAX_PARAMS}")))
        }
    }
}

/// Largest attention inverse temperature: scores `beta g_B^T J g_A` of
/// normalised states; beyond this the softmax is a hard max at any init.
pub const MAX_ATTN_BETA: f64 = 1e3;

/// The NRGPT-only options: in range, and set only where they mean
/// something (an option a model would ignore is refused, not dropped).
fn check_nrgpt_options(cfg: &ModelConfig) -> Result<()> {
    if let Some(beta) = cfg.attn_beta {
        if !(beta > 0.0 && beta <= MAX_ATTN_BETA) {
            return Err(field_err("attn_beta", beta, format!("must be finite, in (0, {MAX_ATTN_BETA}]")));
        }
    }
    let nrgpt = cfg.arch.is_nrgpt();
    if !nrgpt && cfg.attn_beta.is_some() {
        return Err(field_err("attn_beta", cfg.arch.name(), "must be unset: only NRGPT's attention energy has it".into()));
    }
    if !nrgpt && cfg.attn_diag {
        return Err(field_err("attn_diag", cfg.arch.name(), "must be false: only NRGPT's attention energy has it".into()));
    }
    if !nrgpt && cfg.block_norm != BlockNorm::Gain {
        return Err(field_err("block_norm", cfg.block_norm.name(), "must be gain: only NRGPT has a block norm to make bare".into()));
    }
    if cfg.gpt_block != GptBlock::Sequential && !matches!(cfg.arch, Arch::Gpt | Arch::GptRec) {
        return Err(field_err(
            "gpt_block",
            cfg.gpt_block.name(),
            format!("must be sequential: only the GPT baselines have a parallel block, not {}", cfg.arch.name()),
        ));
    }
    if !nrgpt && cfg.eta == EtaKind::Free {
        return Err(field_err("eta", cfg.eta.name(), format!("must be stable: only NRGPT has an eta step, not {}", cfg.arch.name())));
    }
    if cfg.eta_init != EtaInit::Identity && !(nrgpt && cfg.eta == EtaKind::Free) {
        return Err(field_err("eta_init", cfg.eta_init.name(), "must be identity unless the model is an NRGPT with a free eta".into()));
    }
    Ok(())
}

/// The parameter count of `cfg`'s layout in checked u64 arithmetic (`None`
/// on overflow). It mirrors [`crate::layout::WeightLayout::new`], which may
/// only be built once this count is in bounds; a test holds the two equal.
pub fn checked_params(cfg: &ModelConfig) -> Option<u64> {
    let n = |x: usize| x as u64;
    let mul = |a: u64, b: u64| a.checked_mul(b);
    let (v, d) = (n(cfg.vocab_size), n(cfg.d_model));
    let m = mul(n(cfg.ff_mult), d)?;
    let hd = mul(n(cfg.n_head), n(cfg.head_dim))?;
    let head_out = if cfg.arch == Arch::Ebt { 1 } else { v };
    let ends = [mul(v, d)?, mul(n(cfg.block_size), d)?, d, mul(head_out, d)?, head_out];
    let gpt_layer = || -> Option<u64> { sum(&[d, mul(3, mul(hd, d)?)?, mul(d, hd)?, d, mul(m, d)?, m, mul(d, m)?, d]) };
    let body = match cfg.arch {
        Arch::NrgptFf2w | Arch::NrgptFf1 => {
            let ff2 = if cfg.arch == Arch::NrgptFf2w { sum(&[mul(d, m)?, d])? } else { 0 };
            let eta = if cfg.eta == EtaKind::Stable { 1 } else { mul(d, d)? };
            // the block norm: a gain or a bias, d either way
            sum(&[d, mul(2, mul(hd, d)?)?, n(cfg.n_head), mul(m, d)?, m, ff2, 1, eta])?
        }
        Arch::Gpt => mul(n(cfg.steps), gpt_layer()?)?,
        Arch::GptRec => gpt_layer()?,
        Arch::Ebt => mul(n(cfg.layers), gpt_layer()?)?.checked_add(1)?,
    };
    sum(&ends)?.checked_add(body)
}

fn sum(xs: &[u64]) -> Option<u64> {
    xs.iter().try_fold(0u64, |acc, &x| acc.checked_add(x))
}

/// What a stored tensor's values may be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRule {
    /// Finite with |x| <= the bound.
    Abs(f32),
    /// Finite, 0 <= x <= the bound (AdamW's second moment, quantization scales).
    NonNegative(f32),
}

impl std::fmt::Display for ValueRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueRule::Abs(b) => write!(f, "values must be finite with |x| <= {b:e}"),
            ValueRule::NonNegative(b) => write!(f, "values must be finite, in 0..={b:e}"),
        }
    }
}

impl ValueRule {
    fn holds(self, x: f32) -> bool {
        match self {
            ValueRule::Abs(b) => x.abs() <= b,
            ValueRule::NonNegative(b) => (0.0..=b).contains(&x),
        }
    }
}

/// The rule for parameter `i` of `layout`: the ones used as `e^x` are
/// held tighter than the rest.
pub fn weight_rule(layout: &WeightLayout, i: usize) -> ValueRule {
    let exponentiated = match &layout.body {
        Body::Nrgpt(ix) => ix.log_c == Some(i),
        Body::Ebt(ix) => ix.log_a == i,
        Body::Gpt(_) => false,
    };
    ValueRule::Abs(if exponentiated { MAX_ABS_LOG } else { MAX_ABS_WEIGHT })
}

/// Every value of tensor `name` obeys `rule` (NaN fails every comparison).
pub fn check_values(name: &str, values: &[f32], rule: ValueRule) -> Result<()> {
    match values.iter().position(|&x| !rule.holds(x)) {
        None => Ok(()),
        Some(index) => Err(Error::TensorValue { name: name.to_string(), index, value: values[index], rule: rule.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_count_equals_the_layout_for_every_arch() {
        for arch in [Arch::NrgptFf2w, Arch::NrgptFf1, Arch::Gpt, Arch::GptRec, Arch::Ebt] {
            for (eta, bare) in [(EtaKind::Stable, false), (EtaKind::Free, false), (EtaKind::Stable, arch.is_nrgpt())] {
                let mut cfg = ModelConfig::new(arch, 65, 48, 3, 3, 20);
                if bare {
                    cfg.block_norm = crate::BlockNorm::Bare;
                }
                cfg.head_dim = 7;
                cfg.ff_mult = 2;
                cfg.layers = 2;
                cfg.eta = eta;
                let want = WeightLayout::new(&cfg).num_params() as u64;
                assert_eq!(checked_params(&cfg), Some(want), "{arch:?} {eta:?}");
            }
        }
    }

    #[test]
    fn each_field_out_of_range_is_named() {
        let base = ModelConfig::new(Arch::NrgptFf2w, 65, 32, 2, 2, 16);
        type Edit = Box<dyn Fn(&mut ModelConfig)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("vocab_size", Box::new(|c| c.vocab_size = 0)),
            ("d_model", Box::new(|c| c.d_model = usize::MAX - 3)),
            ("n_head", Box::new(|c| c.n_head = 0)),
            ("head_dim", Box::new(|c| c.head_dim = usize::MAX / 2 + 1)),
            ("steps", Box::new(|c| c.steps = 1_000_000_000)),
            ("layers", Box::new(|c| c.layers = 0)),
            ("block_size", Box::new(|c| c.block_size = 1 << 40)),
            ("ff_mult", Box::new(|c| c.ff_mult = usize::MAX / 4)),
            ("ebt_noise", Box::new(|c| c.ebt_noise = f64::NAN)),
            ("ebt_clamp", Box::new(|c| c.ebt_clamp = -1.0)),
            ("ebt_clamp", Box::new(|c| c.ebt_clamp = 0.5)),
            ("eps", Box::new(|c| c.eps = f64::INFINITY)),
            ("attn_beta", Box::new(|c| c.attn_beta = Some(0.0))),
            ("attn_beta", Box::new(|c| c.attn_beta = Some(f64::NAN))),
            ("attn_beta", Box::new(|c| (c.arch, c.attn_beta) = (Arch::Gpt, Some(1.0)))),
            ("attn_diag", Box::new(|c| (c.arch, c.attn_diag) = (Arch::Ebt, true))),
            // a stable step has no matrix to initialise
            ("eta_init", Box::new(|c| c.eta_init = EtaInit::Normal)),
            // a free eta on a model with no eta step would be ignored
            ("eta", Box::new(|c| (c.arch, c.eta) = (Arch::Ebt, EtaKind::Free))),
            ("eta", Box::new(|c| (c.arch, c.eta) = (Arch::Gpt, EtaKind::Free))),
            ("block_norm", Box::new(|c| (c.arch, c.block_norm) = (Arch::GptRec, BlockNorm::Bare))),
            ("gpt_block", Box::new(|c| c.gpt_block = GptBlock::Parallel)),
            ("gpt_block", Box::new(|c| (c.arch, c.gpt_block) = (Arch::Ebt, GptBlock::Parallel))),
            // each field in range, the product over the cap
            ("parameters", Box::new(|c| (c.d_model, c.ff_mult, c.head_dim, c.n_head) = (8192, 64, 8192, 1024))),
        ];
        for (field, set) in cases {
            let mut cfg = base.clone();
            set(&mut cfg);
            let err = check_config(&cfg).unwrap_err().to_string();
            assert!(err.contains(&format!("`{field}`")) && err.contains("must be"), "{field}: {err}");
        }
        check_config(&base).unwrap();
    }

    #[test]
    fn value_rules_reject_nan_inf_and_large() {
        check_values("w", &[0.0, -999.0, 1e3], ValueRule::Abs(MAX_ABS_WEIGHT)).unwrap();
        for bad in [f32::NAN, f32::INFINITY, -3e38, 1001.0] {
            let err = check_values("head.b", &[0.5, bad], ValueRule::Abs(MAX_ABS_WEIGHT)).unwrap_err().to_string();
            assert!(err.contains("`head.b`") && err.contains("element 1") && err.contains("finite"), "{err}");
        }
        assert!(check_values("opt.v.x", &[-1e-9], ValueRule::NonNegative(1.0)).is_err());
        assert!(check_values("opt.v.x", &[f32::NAN], ValueRule::NonNegative(1.0)).is_err());
    }
}
