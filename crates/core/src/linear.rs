//! `y = x W^T + b` for inputs of any rank, the one matmul shape every layer uses.

use candle_core::{Result, Tensor};

/// `x`: (.., in), `w`: (out, in), `b`: (out). Flattens the leading dims so the
/// CPU backend runs one large gemm instead of a batched one.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let dims = x.dims();
    let (lead, inp) = dims.split_at(dims.len() - 1);
    let rows: usize = lead.iter().product();
    let y = x.reshape((rows, inp[0]))?.matmul(&w.t()?)?;
    let y = match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out = lead.to_vec();
    out.push(w.dim(0)?);
    y.reshape(out)
}
