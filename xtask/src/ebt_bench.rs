//! `cargo xtask bench --ebt`: the shipped EBT against its targets (issue 35),
//! from one `trainer eval` (whole val split) and one `trainer think` table
//! (the val split and the two held-back texts), written as BENCH.md's
//! section `ebt`. Each target's line says met or not met with its figure.

use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::bench::{bin, machine, replace_bench_section, today, trainer_json};
use crate::{root, say, EBT_MODEL};

/// The held-back texts: a play not in Tiny Shakespeare, and English prose.
const OOD: [&str; 2] = ["data/ood/hamlet.txt", "data/ood/alice.txt"];
const MAX_CHARS: usize = 8000;
/// Issue 35's targets.
const MAX_VAL: f64 = 1.70;
const MAX_BYTES: u64 = 1_000_000;
const MIN_THINKING_GAIN: f64 = 0.10;
const LONGER_SLACK: f64 = 0.01;
const MIN_CORRELATION: f64 = 0.3;

/// One text's row: loss at S = 1, S, 2S, 4S (one candidate), Best-of-4 at S, and r.
struct Row {
    text: String,
    one: f64,
    trained: f64,
    twice: f64,
    four: f64,
    best_of_4: f64,
    r: f64,
}

fn cell(table: &Value, steps: usize, samples: usize) -> Result<f64> {
    let cells = table["cells"].as_array().context("a think table without cells")?;
    cells
        .iter()
        .find(|c| c["steps"].as_u64() == Some(steps as u64) && c["samples"].as_u64() == Some(samples as u64))
        .and_then(|c| c["loss"].as_f64())
        .with_context(|| format!("the think table has no cell S = {steps}, N = {samples}"))
}

fn mark(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**not met**"
    }
}

pub fn ebt_bench() -> Result<()> {
    let trainer = bin(false, "trainer");
    say(&format!("the shipped EBT ({EBT_MODEL}): whole-split val, then thinking tables on val and {}", OOD.join(", ")));
    let eval = trainer_json(Command::new(root().join(&trainer)).args(["eval", "--ckpt", EBT_MODEL]))?;
    let (val, s) = (eval.f64("loss")?, eval.usize("steps")?);
    let bytes = std::fs::metadata(root().join(EBT_MODEL)).with_context(|| format!("reading {EBT_MODEL}"))?.len();
    let steps = format!("1,{},{},{}", s, 2 * s, 4 * s);
    let mut cmd = Command::new(root().join(&trainer));
    cmd.args(["think", "--ckpt", EBT_MODEL, "--steps", &steps, "--samples", "1,4", "--max-chars", &MAX_CHARS.to_string()]);
    for ood in OOD {
        cmd.args(["--ood", ood]);
    }
    let line = format!("trainer think --ckpt {EBT_MODEL} --ood {} --ood {} --steps {steps} --samples 1,4 --max-chars {MAX_CHARS}", OOD[0], OOD[1]);
    let think = trainer_json(&mut cmd)?;
    let rows = think
        .value()
        .as_array()
        .context("`trainer think --json` printed no list of tables")?
        .iter()
        .map(|t| {
            let table = &t["table"];
            Ok(Row {
                text: t["text"].as_str().unwrap_or("?").to_string(),
                one: cell(table, 1, 1)?,
                trained: cell(table, s, 1)?,
                twice: cell(table, 2 * s, 1)?,
                four: cell(table, 4 * s, 1)?,
                best_of_4: cell(table, s, 4)?,
                r: table["energy_loss_corr"].as_f64().context("no energy_loss_corr")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let md = markdown(&rows, s, val, bytes, &line);
    println!("{md}");
    replace_bench_section("ebt", &md)
}

fn markdown(rows: &[Row], s: usize, val: f64, bytes: u64, line: &str) -> String {
    let mut md = format!(
        "## The shipped EBT against its targets\n\nMeasured by `cargo xtask bench --ebt` on {}, {}. \
         `trainer eval --ckpt {EBT_MODEL}` (whole val split, trained S = {s}, N = 1), then `{line}` \
         (nats/char; the first {MAX_CHARS} characters of each text; Best-of-4 by the lowest final energy; \
         r: a character's final energy against its loss at S = {s}).\n\n\
         | text | S = 1 | S = {s} (trained) | S = {} | S = {} | Best-of-4, S = {s} | r |\n|---|---|---|---|---|---|---|\n",
        machine(),
        today(),
        2 * s,
        4 * s
    );
    for r in rows {
        md += &format!("| {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.3} |\n", r.text, r.one, r.trained, r.twice, r.four, r.best_of_4, r.r);
    }
    let gain = |r: &Row| r.one - r.trained;
    let rise = |r: &Row| r.twice.max(r.four) - r.trained;
    let bon = |r: &Row| r.trained - r.best_of_4;
    let list = |f: &dyn Fn(&Row) -> f64| rows.iter().map(|r| format!("{:.3}", f(r))).collect::<Vec<_>>().join(" / ");
    let (val_row, ood) = rows.split_first().expect("the val split's table comes first");
    md.push_str("\nTexts in the order above (val / Hamlet / Alice).\n\n");
    md += &format!("- val <= {MAX_VAL} from <= 1 MB: {} ({val:.4}, {bytes} bytes)\n", mark(val <= MAX_VAL && bytes <= MAX_BYTES));
    md += &format!("- the trained S beats S = 1 by >= {MIN_THINKING_GAIN}: {} ({})\n", mark(rows.iter().all(|r| gain(r) >= MIN_THINKING_GAIN)), list(&gain));
    md += &format!("- 2S and 4S stay within {LONGER_SLACK} of S: {} (worst rise {})\n", mark(rows.iter().all(|r| rise(r) <= LONGER_SLACK)), list(&rise));
    md += &format!("- Best-of-4 gains more out of distribution than on val: {} (gain {})\n", mark(ood.iter().all(|r| bon(r) > bon(val_row))), list(&bon));
    md += &format!("- energy tracks difficulty, r >= {MIN_CORRELATION}: {} ({})\n", mark(rows.iter().all(|r| r.r >= MIN_CORRELATION)), list(&|r| r.r));
    md
}
