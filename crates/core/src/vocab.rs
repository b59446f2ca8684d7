//! The character vocabulary, read from an HF `tokenizer.json` (one token per
//! character, ids = sorted characters as nanoGPT's shakespeare_char).
//! The trainer writes that file with the `tokenizers` crate; reading it here
//! with serde keeps the wasm build light, and a trainer test proves both agree.

use std::collections::HashMap;

use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    chars: Vec<char>,
    index: HashMap<char, u32>,
}

impl Vocab {
    pub fn from_chars(chars: Vec<char>) -> Result<Self> {
        let mut index = HashMap::with_capacity(chars.len());
        for (i, &c) in chars.iter().enumerate() {
            if index.insert(c, i as u32).is_some() {
                return Err(Error::Vocab(format!("character {c:?} appears twice")));
            }
        }
        if chars.is_empty() {
            return Err(Error::Vocab("empty vocabulary".into()));
        }
        Ok(Self { chars, index })
    }

    /// Every distinct character of `text`, sorted.
    pub fn from_text(text: &str) -> Result<Self> {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Self::from_chars(chars)
    }

    /// Reads `model.vocab` (token -> id) of a tokenizer.json whose tokens are
    /// single characters with ids 0..n.
    pub fn from_tokenizer_json(json: &str) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| Error::Vocab(format!("the tokenizer file is not JSON: {e}")))?;
        let map = v
            .get("model")
            .and_then(|m| m.get("vocab"))
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::Vocab("tokenizer.json has no model.vocab object".into()))?;
        let mut chars = vec![None; map.len()];
        for (tok, id) in map {
            let id = id.as_u64().filter(|&i| (i as usize) < map.len()).ok_or_else(|| Error::Vocab(format!("token {tok:?} has a bad id {id}")))?;
            let mut it = tok.chars();
            let c = match (it.next(), it.next()) {
                (Some(c), None) => c,
                _ => return Err(Error::Vocab(format!("token {tok:?} is not one character"))),
            };
            chars[id as usize] = Some(c);
        }
        let chars = chars.into_iter().enumerate().map(|(i, c)| c.ok_or_else(|| Error::Vocab(format!("no token has id {i}")))).collect::<Result<Vec<_>>>()?;
        Self::from_chars(chars)
    }

    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    pub fn id(&self, c: char) -> Option<u32> {
        self.index.get(&c).copied()
    }

    /// Encodes `text`; a character outside the vocabulary is an error that names it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        text.chars().map(|c| self.id(c).ok_or_else(|| Error::Vocab(format!("character {c:?} is not in the model's vocabulary")))).collect()
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter().map(|&i| self.chars.get(i as usize).copied().unwrap_or('\u{FFFD}')).collect()
    }

    /// The vocabulary as a JSON string (stored in checkpoint metadata).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.chars.iter().collect::<String>()).expect("a string serialises")
    }

    pub fn from_json(json: &str) -> Result<Self> {
        let s: String = serde_json::from_str(json).map_err(|e| Error::Vocab(format!("metadata `vocab` must be a JSON string of the characters: {e}")))?;
        Self::from_chars(s.chars().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_unknown_char() {
        let v = Vocab::from_text("hello world").unwrap();
        assert_eq!(v.len(), 8);
        let ids = v.encode("low").unwrap();
        assert_eq!(v.decode(&ids), "low");
        let err = v.encode("lox").unwrap_err().to_string();
        assert!(err.contains("'x'"), "{err}");
        assert_eq!(Vocab::from_json(&v.to_json()).unwrap(), v);
    }

    #[test]
    fn tokenizer_json_errors_are_clear() {
        assert!(Vocab::from_tokenizer_json("{}").is_err());
        let err = Vocab::from_tokenizer_json("not json").unwrap_err().to_string();
        assert!(err.contains("tokenizer file is not JSON"), "{err}");
        let err = Vocab::from_json("abc").unwrap_err().to_string();
        assert!(err.contains("metadata `vocab`"), "{err}");
        let bad = r#"{"model":{"vocab":{"ab":0}}}"#;
        assert!(Vocab::from_tokenizer_json(bad).unwrap_err().to_string().contains("not one character"));
        let gap = r#"{"model":{"vocab":{"a":0,"b":2}}}"#;
        assert!(Vocab::from_tokenizer_json(gap).is_err());
        let ok = r#"{"model":{"vocab":{"b":1,"a":0}}}"#;
        assert_eq!(Vocab::from_tokenizer_json(ok).unwrap().chars(), &['a', 'b']);
    }
}
