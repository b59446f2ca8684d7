//! The ListOps commands of the `trainer` CLI: `listops-sweep` (the
//! learning-transition sweep) and `listops-answer` (one expression through a
//! checkpoint: the native reference the page's ListOps tab is tested against).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use nrgpt_core::listops::{answer_of, parse, Op, TreeSpec};
use nrgpt_core::{Arch, GptBlock};
use serde::Serialize;

use crate::cli_values::{count, kebab, positive};
use crate::files::{read_checkpoint, write_atomic};
use crate::listops_data::DataSpec;
use crate::listops_plot::accuracy_svg;
use crate::listops_score::continue_greedily;
use crate::listops_sweep::{markdown, transitions, SweepSpec};

#[derive(Args)]
pub struct SweepArgs {
    /// Folder for table.md, accuracy.svg, results.json and one run folder per model.
    #[arg(long)]
    pub out: PathBuf,
    /// A small budget (2 widths, 300 iterations, 5,000 examples) for tests: under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Models, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "nrgpt-ff1,nrgpt-ff2w,gpt-rec")]
    pub models: Vec<Arch>,
    /// d_model of each size, comma-separated (default 16,32,48,64; --quick: 8,24).
    #[arg(long, value_delimiter = ',', value_parser = count(1, 512))]
    pub widths: Option<Vec<usize>>,
    /// Training iterations per model (default 3000; --quick: 300).
    #[arg(long, value_parser = count(1, 1 << 30))]
    pub iters: Option<usize>,
    #[arg(long, default_value_t = 3e-3, value_parser = positive)]
    pub lr: f64,
    #[arg(long, default_value_t = 32, value_parser = count(1, 4096))]
    pub batch: usize,
    /// Window in characters (every example fits in 64).
    #[arg(long, default_value_t = 64, value_parser = count(8, 512))]
    pub block: usize,
    /// Recursion steps T (the reference's n_layer).
    #[arg(long, default_value_t = 5, value_parser = count(1, 64))]
    pub steps: usize,
    /// NRGPT's options: reference (full-rank J, beta 1, free eta from N(0, 0.02), bare norm) | ours (the defaults of `trainer train`).
    #[arg(long, default_value = "reference", value_parser = ["reference", "ours"])]
    pub nrgpt: String,
    /// The recurrent GPT's block: parallel (the reference's GPT_Rec_parallel) | sequential (ours: MLP after attention).
    #[arg(long, default_value = "parallel", value_parser = kebab::<GptBlock>)]
    pub gpt_block: GptBlock,
    /// Operations, comma-separated (MIN, MAX, MED, SUM_MOD; the reference's data: SUM_MOD,MAX,MED).
    #[arg(long, value_delimiter = ',', default_value = "SUM_MOD,MAX,MED", value_parser = parse_op)]
    pub ops: Vec<Op>,
    /// Deepest nesting of the generated expressions.
    #[arg(long, default_value_t = 2, value_parser = count(1, 8))]
    pub depth: usize,
    /// Most arguments per operation (at least 2; the held-out triples need 3).
    #[arg(long, default_value_t = 3, value_parser = count(2, 9))]
    pub max_args: usize,
    /// Training examples (default 50,000 as the reference; --quick: 5,000).
    #[arg(long, value_parser = count(20, 10_000_000))]
    pub train_examples: Option<usize>,
    /// Held-out expressions scored per model (default 500; --quick: 200).
    #[arg(long, value_parser = count(1, 100_000))]
    pub scored: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_op(s: &str) -> Result<Op, String> {
    Op::from_name(s).ok_or_else(|| format!("`{s}`: expected MIN, MAX, MED or SUM_MOD"))
}

impl SweepArgs {
    pub fn spec(&self) -> SweepSpec {
        let q = |quick: usize, full: usize| if self.quick { quick } else { full };
        let mut data = DataSpec::reference(self.seed);
        data.tree = TreeSpec { max_depth: self.depth, max_args: self.max_args, ops: self.ops.clone(), ..TreeSpec::default() };
        data.train = self.train_examples.unwrap_or(q(5_000, 50_000));
        let scored = self.scored.unwrap_or(q(200, 500));
        data.test = scored;
        SweepSpec {
            models: self.models.clone(),
            widths: self.widths.clone().unwrap_or_else(|| if self.quick { vec![8, 24] } else { vec![16, 32, 48, 64] }),
            steps: self.steps,
            reference_nrgpt: self.nrgpt == "reference",
            gpt_block: self.gpt_block,
            block: self.block,
            batch: self.batch,
            iters: self.iters.unwrap_or(q(300, 3000)),
            lr: self.lr,
            data,
            scored,
            seed: self.seed,
        }
    }
}

/// Runs the sweep, writes its files and prints the tables (or, with `json`, one JSON object).
pub fn sweep(a: &SweepArgs, command: &str, json: bool) -> Result<()> {
    let spec = a.spec();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let (points, chance) = spec.run(&a.out, &mut |p| {
        eprintln!("{} d={} ({} params): accuracy {:.3}, val loss {:.4}, {:.0} s", p.model, p.d_model, p.params, p.accuracy, p.val_loss, p.seconds)
    })?;
    let trans = transitions(&spec.models, &points);
    let table = markdown(&points, &trans, chance);
    let caption = vec![
        command.to_string(),
        format!(
            "{} iterations of {} x {} characters, lr {}, T = {}; {} held-out expressions scored",
            spec.iters, spec.batch, spec.block, spec.lr, spec.steps, spec.scored
        ),
    ];
    write_atomic(&a.out.join("table.md"), format!("{table}\n{}\n", caption.join("\n")).as_bytes())?;
    write_atomic(&a.out.join("accuracy.svg"), accuracy_svg(&points, &trans, &caption).as_bytes())?;
    let report = serde_json::json!({ "command": command, "chance": chance, "points": points, "transitions": trans });
    write_atomic(&a.out.join("results.json"), serde_json::to_string_pretty(&report)?.as_bytes())?;
    if json {
        println!("{report}");
    } else {
        println!("{table}");
    }
    Ok(())
}

#[derive(Args)]
pub struct AnswerArgs {
    #[arg(long)]
    pub ckpt: PathBuf,
    /// e.g. "S(3 4 X(1 2))" (S = SUM_MOD, X = MAX, N = MIN, M = MED; spaces and commas ignored).
    #[arg(long)]
    pub expr: String,
}

#[derive(Serialize)]
struct AnswerReport {
    /// The expression as the model reads it.
    expression: String,
    /// What the model wrote after the expression and `=`: its chain of thought and answer.
    continuation: String,
    answer: Option<u8>,
    truth: u8,
}

/// An expression as a message shows it: whole when short, else its start
/// and its length (a 40 KB expression must not fill the terminal).
fn quoted(expr: &str) -> String {
    const SHOWN: usize = 80;
    match expr.char_indices().nth(SHOWN) {
        None => format!("{expr:?}"),
        Some((cut, _)) => format!("{:?}... ({} characters)", &expr[..cut], expr.chars().count()),
    }
}

/// Answers one expression with a checkpoint, greedily.
pub fn answer(a: &AnswerArgs, json: bool) -> Result<()> {
    let expr = parse(&a.expr).with_context(|| format!("the expression {}", quoted(&a.expr)))?;
    let ck = read_checkpoint(&a.ckpt)?;
    let cont = continue_greedily(&ck.model()?, &ck.vocab, &[expr.prompt()])?.remove(0);
    let r = AnswerReport { expression: expr.text(), answer: answer_of(&cont), truth: expr.value(), continuation: cont };
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        let shown = r.answer.map(|d| d.to_string()).unwrap_or_else(|| "none".into());
        println!("{}={} -> answer {shown} (true value {})", r.expression, r.continuation.trim_end(), r.truth);
    }
    Ok(())
}
