//! Scoring a ListOps model as the reference does: given the expression and
//! the first `=`, the model writes its chain of thought; its answer is the
//! digit before the end of the example. We decode greedily (the reference
//! samples from the softmax; a trained model gives the same either way).

use anyhow::{bail, Result};
use candle_core::{DType, Tensor};
use nrgpt_core::listops::{answer_of, Expr, END};
use nrgpt_core::sample::argmax;
use nrgpt_core::{ForwardOpts, Model, Vocab};

/// Expressions continued together (one forward per generated character).
const BATCH: usize = 128;

/// The greedy continuation of each prompt, up to and including [`END`], or
/// until the model's window is full. Prompts must be shorter than the window.
pub fn continue_greedily(model: &Model, vocab: &Vocab, prompts: &[String]) -> Result<Vec<String>> {
    let block = model.cfg.block_size;
    let end = vocab.id(END).ok_or_else(|| anyhow::anyhow!("the checkpoint's vocabulary has no end-of-example character"))?;
    let mut out = Vec::with_capacity(prompts.len());
    for chunk in prompts.chunks(BATCH) {
        let mut seqs: Vec<Vec<u32>> = chunk.iter().map(|p| vocab.encode(p)).collect::<nrgpt_core::Result<_>>()?;
        if let Some(p) = seqs.iter().position(|s| s.is_empty() || s.len() >= block) {
            bail!("the prompt {:?} has {} characters: a model with a window of {block} needs 1 to {}", chunk[p], seqs[p].len(), block - 1);
        }
        let starts: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let mut open: Vec<usize> = (0..seqs.len()).collect();
        while !open.is_empty() {
            // right-padded: with a causal mask, padding after a sequence cannot change its predictions
            let n = open.iter().map(|&i| seqs[i].len()).max().unwrap_or(1);
            let mut ids = vec![end; open.len() * n];
            for (row, &i) in open.iter().enumerate() {
                ids[row * n..row * n + seqs[i].len()].copy_from_slice(&seqs[i]);
            }
            let x = Tensor::from_vec(ids, (open.len(), n), model.device())?;
            let logits = model.forward(&x, ForwardOpts::default())?.logits.to_dtype(DType::F32)?;
            for (row, &i) in open.iter().enumerate() {
                let last: Vec<f32> = logits.get(row)?.get(seqs[i].len() - 1)?.to_vec1()?;
                seqs[i].push(argmax(&last) as u32);
            }
            open.retain(|&i| seqs[i].last() != Some(&end) && seqs[i].len() < block);
        }
        out.extend(seqs.iter().zip(&starts).map(|(s, &k)| vocab.decode(&s[k..])));
    }
    Ok(out)
}

/// Fraction of `tests` whose greedy chain of thought ends in the right digit.
pub fn accuracy(model: &Model, vocab: &Vocab, tests: &[Expr]) -> Result<f64> {
    if tests.is_empty() {
        bail!("no test expressions to score");
    }
    let prompts: Vec<String> = tests.iter().map(Expr::prompt).collect();
    let outs = continue_greedily(model, vocab, &prompts)?;
    let right = tests.iter().zip(&outs).filter(|(e, o)| answer_of(o) == Some(e.value())).count();
    Ok(right as f64 / tests.len() as f64)
}
