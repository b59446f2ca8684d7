//! The ListOps data set as bhoov/nrgpt's `prepare_train_test_data` builds it:
//! a random set of digit triples is held out, an example containing one of
//! them (three consecutive tokens) goes to the test set, every other one to
//! training; the training examples form one stream whose last 10% is the
//! validation split.

use std::collections::HashSet;

use anyhow::{bail, Result};
use nrgpt_core::listops::{Expr, TreeSpec, ALPHABET};
use nrgpt_core::rng::Rng64;
use nrgpt_core::Vocab;

use crate::data::Corpus;

/// How many examples of which shape.
#[derive(Debug, Clone)]
pub struct DataSpec {
    pub tree: TreeSpec,
    pub train: usize,
    pub test: usize,
    /// Held-out triples: this fraction of the 10^3 ordered digit triples
    /// (drawn with distinct digits, as the reference's `random.sample`).
    pub exclusion_rate: f64,
    pub seed: u64,
}

impl DataSpec {
    /// The reference's data file: 50,000 training and 2,000 test examples, 5% of triples held out.
    pub fn reference(seed: u64) -> Self {
        Self { tree: TreeSpec::default(), train: 50_000, test: 2_000, exclusion_rate: 0.05, seed }
    }
}

pub struct ListOpsData {
    pub vocab: Vocab,
    /// Token streams of the training examples (first 90%) and validation (last 10%).
    pub corpus: Corpus,
    /// Held-out expressions: each contains a triple no training example has.
    pub test: Vec<Expr>,
    pub held_out: Vec<[u8; 3]>,
}

/// The vocabulary every ListOps checkpoint carries.
pub fn vocab() -> Result<Vocab> {
    Ok(Vocab::from_text(ALPHABET)?)
}

/// Draws the data set; the same spec gives the same data.
pub fn generate(spec: &DataSpec) -> Result<ListOpsData> {
    spec.tree.validate()?;
    if spec.train < 20 || spec.test == 0 {
        bail!("a ListOps data set needs at least 20 training and 1 test example (got {} and {})", spec.train, spec.test);
    }
    let mut rng = Rng64::new(spec.seed);
    let n_held = (1000.0 * spec.exclusion_rate) as usize;
    let held: HashSet<[u8; 3]> = (0..n_held).map(|_| distinct_triple(&mut rng)).collect();
    let held_chars: HashSet<[char; 3]> = held.iter().map(|t| t.map(|d| char::from(b'0' + d))).collect();
    let vocab = vocab()?;
    let (mut train, mut test) = (Vec::new(), Vec::new());
    let mut count_train = 0;
    // the reference tries 100x the examples it needs
    for _ in 0..(spec.train + spec.test) * 100 {
        if count_train >= spec.train && test.len() >= spec.test {
            break;
        }
        let e = spec.tree.sample(&mut rng);
        let ex = e.example();
        let chars: Vec<char> = ex.chars().collect();
        if chars.windows(3).any(|w| held_chars.contains(&[w[0], w[1], w[2]])) {
            if test.len() < spec.test {
                test.push(e);
            }
        } else if count_train < spec.train {
            count_train += 1;
            train.extend(vocab.encode(&ex)?);
        }
    }
    if count_train < spec.train || test.is_empty() {
        bail!("drew only {count_train} training and {} test examples: the tree spec rarely or always holds a held-out triple", test.len());
    }
    // the reference's train_test_split of the token stream
    let n = train.len() * 9 / 10;
    let corpus = Corpus {
        val: train[n..].to_vec(),
        train: {
            train.truncate(n);
            train
        },
    };
    let mut held_out: Vec<[u8; 3]> = held.into_iter().collect();
    held_out.sort_unstable();
    Ok(ListOpsData { vocab, corpus, test, held_out })
}

/// Accuracy of always answering the most common value of `tests`: what a
/// model that ignores the expression reaches (chance, for this test set).
pub fn majority_baseline(tests: &[Expr]) -> f64 {
    let mut counts = [0usize; 10];
    tests.iter().for_each(|e| counts[e.value() as usize] += 1);
    counts.iter().max().copied().unwrap_or(0) as f64 / tests.len().max(1) as f64
}

/// Three different digits in random order.
fn distinct_triple(rng: &mut Rng64) -> [u8; 3] {
    let mut pool: Vec<u8> = (0..10).collect();
    let mut t = [0u8; 3];
    for slot in &mut t {
        *slot = pool.remove(rng.below(pool.len()));
    }
    t
}
