//! The value parsers behind every trainer option: integer ranges and float
//! domains checked by clap, so no flag can reach the code as a zero batch,
//! a NaN temperature or a length that cannot be allocated.

use clap::builder::RangedU64ValueParser;
use serde::de::DeserializeOwned;

/// Most characters `sample` generates in one call (the page's limit too).
pub const MAX_SAMPLE_LEN: usize = 100_000;

/// An integer option in `lo..=hi`.
pub fn count(lo: u64, hi: usize) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(lo..=hi as u64)
}

/// One of a config enum's kebab-case names, as the checkpoint stores it
/// (serde's error lists the names it expects).
pub fn kebab<T: DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|e| e.to_string())
}

fn float(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("`{s}` is not a number ({e})"))?;
    if x.is_finite() {
        Ok(x)
    } else {
        Err(format!("`{s}` is not finite"))
    }
}

/// A finite number > 0 (learning rates, clipping norm).
pub fn positive(s: &str) -> Result<f64, String> {
    float(s).and_then(|x| if x > 0.0 { Ok(x) } else { Err(format!("{x} must be > 0")) })
}

/// A finite number >= 0 (weight decay, noise std).
pub fn non_negative(s: &str) -> Result<f64, String> {
    float(s).and_then(|x| if x >= 0.0 { Ok(x) } else { Err(format!("{x} must be >= 0")) })
}

/// A dropout probability in [0, 1).
pub fn dropout(s: &str) -> Result<f64, String> {
    float(s).and_then(|x| if (0.0..1.0).contains(&x) { Ok(x) } else { Err(format!("{x} must be in [0, 1)")) })
}

/// A sampling temperature in [0, 100] (0: greedy).
pub fn temperature(s: &str) -> Result<f32, String> {
    float(s).and_then(|x| if (0.0..=100.0).contains(&x) { Ok(x as f32) } else { Err(format!("{x} must be in [0, 100]")) })
}

/// A nucleus mass in (0, 1].
pub fn top_p(s: &str) -> Result<f32, String> {
    float(s).and_then(|x| if x > 0.0 && x <= 1.0 { Ok(x as f32) } else { Err(format!("{x} must be in (0, 1]")) })
}

/// A finite f32 >= 0 (a tolerance).
pub fn non_negative_f32(s: &str) -> Result<f32, String> {
    non_negative(s).map(|x| x as f32)
}
