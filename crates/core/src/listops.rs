//! ListOps, the NRGPT paper's nested-operation task, as bhoov/nrgpt's
//! `listops/data` defines it, one character per token: an expression over the
//! digits 0-9, then its chain of thought (the leftmost innermost operation
//! replaced by its value, one step at a time, steps joined by `=`), then the
//! answer digit and the end of the example.
//!
//! `S(34X(12))=S(342)=9\n` is the reference's
//! `add_10,(,3,4,max_10,(,1,2,),),=,add_10,(,3,4,2,),=,9,END`. Both the
//! trainer (data, scoring) and the page (validation, "generate one") use
//! this module, so they cannot disagree on what an expression means.

use crate::rng::Rng64;

/// Ends an example (the reference's `END` token).
pub const END: char = '\n';
/// Joins the chain-of-thought steps (the reference's `=` token).
pub const STEP: char = '=';
/// Every character a ListOps model reads or writes: the vocabulary of its checkpoint.
pub const ALPHABET: &str = "\n()0123456789=MNSX";
/// Characters a typed expression may contain besides these, ignored (the
/// reference's token separator is a comma).
const SEPARATORS: [char; 3] = [' ', ',', '\t'];

/// An operation over digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Min,
    Max,
    /// The upper median: element n/2 of the sorted arguments (the reference's `median`).
    Med,
    /// Sum modulo 10 (the reference's `add_10`).
    SumMod,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Min, Op::Max, Op::Med, Op::SumMod];

    /// The operation's one-character token.
    pub fn symbol(self) -> char {
        match self {
            Op::Min => 'N',
            Op::Max => 'X',
            Op::Med => 'M',
            Op::SumMod => 'S',
        }
    }

    pub fn from_symbol(c: char) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.symbol() == c)
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Min => "MIN",
            Op::Max => "MAX",
            Op::Med => "MED",
            Op::SumMod => "SUM_MOD",
        }
    }

    pub fn from_name(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name().eq_ignore_ascii_case(s))
    }

    /// The operation on its arguments' values (at least one argument).
    pub fn apply(self, args: &[u8]) -> u8 {
        let mut v = args.to_vec();
        v.sort_unstable();
        match self {
            Op::Min => v[0],
            Op::Max => v[v.len() - 1],
            // sorted[n // 2], as the reference's median
            Op::Med => v[v.len() / 2],
            Op::SumMod => (v.iter().map(|&x| x as u32).sum::<u32>() % 10) as u8,
        }
    }
}

/// A ListOps expression: a digit, or an operation over sub-expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Digit(u8),
    Apply(Op, Vec<Expr>),
}

impl Expr {
    pub fn value(&self) -> u8 {
        match self {
            Expr::Digit(d) => *d,
            Expr::Apply(op, args) => op.apply(&args.iter().map(Expr::value).collect::<Vec<_>>()),
        }
    }

    /// The expression in tokens, e.g. `S(34X(12))`.
    pub fn text(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }

    fn write(&self, s: &mut String) {
        match self {
            Expr::Digit(d) => s.push(char::from(b'0' + d)),
            Expr::Apply(op, args) => {
                s.push(op.symbol());
                s.push('(');
                args.iter().for_each(|a| a.write(s));
                s.push(')');
            }
        }
    }

    /// Nesting depth: 0 for a digit, 1 for an operation over digits.
    pub fn depth(&self) -> usize {
        match self {
            Expr::Digit(_) => 0,
            Expr::Apply(_, args) => 1 + args.iter().map(Expr::depth).max().unwrap_or(0),
        }
    }

    /// Replaces the reference's "deepest function node" (from the root, the
    /// first argument that is an operation, again and again) by its value.
    /// Returns false on a digit.
    fn simplify_once(&mut self) -> bool {
        let Expr::Apply(_, args) = self else { return false };
        match args.iter_mut().find(|a| matches!(a, Expr::Apply(..))) {
            Some(inner) => inner.simplify_once(),
            None => {
                *self = Expr::Digit(self.value());
                true
            }
        }
    }

    /// The whole example: the expression, each simplification step, the
    /// answer, each after `=`, then [`END`] (the reference's `get_CoT`).
    pub fn example(&self) -> String {
        let mut e = self.clone();
        let mut s = e.text();
        while e.simplify_once() {
            s.push(STEP);
            s.push_str(&e.text());
        }
        s.push(END);
        s
    }

    /// What a model is given: the expression and the first `=`.
    pub fn prompt(&self) -> String {
        format!("{}{STEP}", self.text())
    }
}

/// The answer a model's continuation of [`Expr::prompt`] gives: the digit
/// before its first [`END`] (the reference's scoring), if it wrote one.
pub fn answer_of(continuation: &str) -> Option<u8> {
    let body = &continuation[..continuation.find(END)?];
    body.chars().last().and_then(|c| c.to_digit(10)).map(|d| d as u8)
}

/// The shape of random expressions (the reference's `create_tree` arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct TreeSpec {
    /// Nesting depth at most this (the root is depth 1).
    pub max_depth: usize,
    pub min_args: usize,
    pub max_args: usize,
    /// Chance that an argument above the last level is an operation, not a digit.
    pub op_prob: f64,
    pub ops: Vec<Op>,
}

impl Default for TreeSpec {
    /// The reference's data file (LOPS00): add_10, max_10, median_10;
    /// depth 2; 2 or 3 arguments; operation probability 0.25.
    fn default() -> Self {
        Self { max_depth: 2, min_args: 2, max_args: 3, op_prob: 0.25, ops: vec![Op::SumMod, Op::Max, Op::Med] }
    }
}

impl TreeSpec {
    /// A random expression: an operation at the root, and each argument an
    /// operation with probability `op_prob` while depth allows, else a digit.
    pub fn sample(&self, rng: &mut Rng64) -> Expr {
        self.node(1, rng)
    }

    fn node(&self, depth: usize, rng: &mut Rng64) -> Expr {
        let op = self.ops[rng.below(self.ops.len())];
        let n = self.min_args + rng.below(self.max_args - self.min_args + 1);
        let args = (0..n)
            .map(|_| if depth < self.max_depth && rng.uniform() < self.op_prob { self.node(depth + 1, rng) } else { Expr::Digit(rng.below(10) as u8) })
            .collect();
        Expr::Apply(op, args)
    }

    /// Every field in range, named if not.
    pub fn validate(&self) -> Result<(), ParseError> {
        let bad = |field: &'static str, rule: &str| Err(ParseError::Spec { field, rule: rule.to_string() });
        if self.ops.is_empty() {
            return bad("ops", "at least one operation");
        }
        if !(1..=MAX_DEPTH).contains(&self.max_depth) {
            return bad("max_depth", &format!("between 1 and {MAX_DEPTH}"));
        }
        if self.min_args == 0 || self.min_args > self.max_args || self.max_args > MAX_ARGS {
            return bad("min_args/max_args", &format!("1 <= min_args <= max_args <= {MAX_ARGS}"));
        }
        if !(0.0..=1.0).contains(&self.op_prob) {
            return bad("op_prob", "between 0 and 1");
        }
        Ok(())
    }
}

/// Deepest nesting [`parse`] and [`TreeSpec`] accept.
pub const MAX_DEPTH: usize = 8;
/// Most arguments of one operation [`parse`] and [`TreeSpec`] accept.
pub const MAX_ARGS: usize = 9;

/// What is wrong with a typed expression or a tree spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("the expression is empty")]
    Empty,
    #[error("character {ch:?} at position {pos} is not a digit, an operation ({ops}), '(' or ')'", ops = op_list())]
    Unknown { ch: char, pos: usize },
    #[error("an expression starts with an operation ({ops}), not {found}", ops = op_list())]
    NoOperation { found: String },
    #[error("the operation {op} at position {pos} is not followed by '('")]
    NoParen { op: char, pos: usize },
    #[error("the operation {op} at position {pos} has no arguments")]
    NoArgs { op: char, pos: usize },
    #[error("the operation {op} at position {pos} has {n} arguments; at most {MAX_ARGS}")]
    TooManyArgs { op: char, pos: usize, n: usize },
    #[error("'(' at position {pos} is never closed")]
    Unclosed { pos: usize },
    #[error("{found} at position {pos} comes after the whole expression ended")]
    Trailing { found: String, pos: usize },
    #[error("{found} at position {pos}: expected a digit, an operation or ')'")]
    Unexpected { found: String, pos: usize },
    #[error("nested {depth} deep; at most {MAX_DEPTH}")]
    TooDeep { depth: usize },
    #[error("tree spec: `{field}` must be {rule}")]
    Spec { field: &'static str, rule: String },
}

fn op_list() -> String {
    Op::ALL.iter().map(|o| format!("{} = {}", o.symbol(), o.name())).collect::<Vec<_>>().join(", ")
}

/// Reads an expression such as `S(3 4 X(1,2))`: spaces and commas between
/// tokens are ignored; any other character must be a token.
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    let toks: Vec<(usize, char)> = text.chars().enumerate().filter(|(_, c)| !SEPARATORS.contains(c)).collect();
    if let Some(&(pos, ch)) = toks.iter().find(|(_, c)| !ALPHABET.contains(*c) || *c == END || *c == STEP) {
        return Err(ParseError::Unknown { ch, pos });
    }
    let Some(&(_, first)) = toks.first() else { return Err(ParseError::Empty) };
    if Op::from_symbol(first).is_none() {
        return Err(ParseError::NoOperation { found: describe(first) });
    }
    let mut at = 0;
    let e = node(&toks, &mut at, 1)?;
    if let Some(&(pos, ch)) = toks.get(at) {
        return Err(ParseError::Trailing { found: describe(ch), pos });
    }
    Ok(e)
}

fn describe(c: char) -> String {
    match c {
        '(' | ')' => format!("'{c}'"),
        d if d.is_ascii_digit() => format!("the digit {d}"),
        o => format!("the operation {o}"),
    }
}

/// The expression starting at token `at` (a digit or an operation), at nesting `depth`.
fn node(toks: &[(usize, char)], at: &mut usize, depth: usize) -> Result<Expr, ParseError> {
    let (pos, c) = toks[*at];
    *at += 1;
    if let Some(d) = c.to_digit(10) {
        return Ok(Expr::Digit(d as u8));
    }
    let op = Op::from_symbol(c).ok_or_else(|| ParseError::Unexpected { found: describe(c), pos })?;
    if depth > MAX_DEPTH {
        return Err(ParseError::TooDeep { depth });
    }
    match toks.get(*at) {
        Some(&(_, '(')) => *at += 1,
        _ => return Err(ParseError::NoParen { op: c, pos }),
    }
    let open = toks[*at - 1].0;
    let mut args = Vec::new();
    loop {
        match toks.get(*at) {
            None => return Err(ParseError::Unclosed { pos: open }),
            Some(&(_, ')')) => {
                *at += 1;
                break;
            }
            Some(&(p, '(')) => return Err(ParseError::Unexpected { found: "'('".into(), pos: p }),
            Some(_) => args.push(node(toks, at, depth + 1)?),
        }
    }
    if args.is_empty() {
        return Err(ParseError::NoArgs { op: c, pos });
    }
    if args.len() > MAX_ARGS {
        return Err(ParseError::TooManyArgs { op: c, pos, n: args.len() });
    }
    Ok(Expr::Apply(op, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_example_and_its_chain() {
        // the reference's docstring: max_10(median_10(0,3,1),8,6) = max_10(1,8,6) = 8
        let e = parse("X(M(031)86)").unwrap();
        assert_eq!(e.value(), 8);
        assert_eq!(e.example(), "X(M(031)86)=X(186)=8\n");
        let e = parse("S(3, 4, X(1 2))").unwrap();
        assert_eq!(e.example(), "S(34X(12))=S(342)=9\n");
        // the leftmost innermost operation goes first
        assert_eq!(parse("N(X(12)M(5 9 7))").unwrap().example(), "N(X(12)M(597))=N(2M(597))=N(27)=2\n");
        assert_eq!(answer_of("S(342)=9\nX"), Some(9));
        assert_eq!(answer_of("S(342)=9"), None);
    }

    #[test]
    fn median_is_the_upper_one_and_sum_wraps() {
        assert_eq!(Op::Med.apply(&[4, 1]), 4);
        assert_eq!(Op::Med.apply(&[9, 1, 5]), 5);
        assert_eq!(Op::SumMod.apply(&[9, 8, 7]), 4);
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        let msg = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(parse(""), Err(ParseError::Empty));
        assert!(msg("S(3a)").contains("'a' at position 3"), "{}", msg("S(3a)"));
        assert!(msg("7").contains("starts with an operation"));
        assert!(msg("S34").contains("not followed by '('"));
        assert!(msg("S()").contains("no arguments"));
        assert!(msg("S(34").contains("never closed"));
        assert!(msg("S(34)5").contains("after the whole expression"));
        assert!(msg("S(3=4)").contains("'='"));
        assert!(msg("S((3))").contains("expected a digit"));
        assert!(msg(&"S(".repeat(20)).contains("nested"));
    }

    #[test]
    fn random_expressions_round_trip_and_respect_the_spec() {
        let spec = TreeSpec::default();
        spec.validate().unwrap();
        let mut rng = Rng64::new(7);
        for _ in 0..500 {
            let e = spec.sample(&mut rng);
            assert!(e.depth() <= 2);
            assert_eq!(parse(&e.text()).unwrap(), e);
            let ex = e.example();
            assert!(ex.starts_with(&e.prompt()));
            assert_eq!(answer_of(&ex), Some(e.value()));
            assert!(ex.chars().all(|c| ALPHABET.contains(c)));
        }
    }
}
