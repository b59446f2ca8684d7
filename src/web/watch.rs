//! Watch mode: the text itself shows every character settling. A new
//! character first appears as the most likely glyph of its starting state
//! (faint when unsure), changes to each step's most likely glyph as the state
//! descends, and firms up when it reaches the character that was drawn; a
//! bar under it shrinks with the energy still to lose. Characters are paced
//! here, on the page, so the worker never waits for the animation.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;

use super::chart::{show_char, softmax, top_k};
use super::protocol::Token;

/// How fast characters settle on screen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Characters appear settled, as they arrive.
    Off,
    /// Each step is shown briefly; when the model writes faster than that,
    /// only the newest character animates, so the text never lags behind.
    RealTime,
    /// Every character, every step, slowly enough to follow; the model writes ahead.
    Slow,
}

impl Pace {
    /// Time each descent step stays on screen.
    fn step_ms(self) -> u32 {
        match self {
            Pace::Off => 0,
            Pace::RealTime => 35,
            Pace::Slow => 250,
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Pace::Off => "off",
            Pace::RealTime => "real-time",
            Pace::Slow => "slow",
        }
    }

    pub fn from_code(code: &str) -> Self {
        match code {
            "off" => Pace::Off,
            "slow" => Pace::Slow,
            _ => Pace::RealTime,
        }
    }
}

thread_local! {
    /// Characters received and not yet settling on screen.
    static QUEUE: RefCell<VecDeque<Arc<Token>>> = const { RefCell::new(VecDeque::new()) };
    static TIMER: Cell<Option<IntervalHandle>> = const { Cell::new(None) };
    /// The run's closing status, shown once the last character has settled.
    static HELD_STATUS: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The settling text: `tokens` holds the settled characters (the text's
/// signal), `settling` the one on its way and the step it shows.
#[derive(Clone, Copy)]
pub struct Watch {
    pub pace: RwSignal<Pace>,
    pub settling: RwSignal<Option<(Arc<Token>, usize)>>,
    tokens: RwSignal<Vec<Arc<Token>>>,
    status: RwSignal<String>,
}

impl Watch {
    pub fn new(tokens: RwSignal<Vec<Arc<Token>>>, status: RwSignal<String>) -> Self {
        Self { pace: RwSignal::new(Pace::RealTime), settling: RwSignal::new(None), tokens, status }
    }

    /// Whether characters are still settling on screen.
    pub fn busy(self) -> bool {
        self.settling.with(Option::is_some)
    }

    /// Takes newly received characters: settled at once, or queued to settle on screen.
    pub fn enqueue(self, new: Vec<Arc<Token>>) {
        if self.pace.get_untracked() == Pace::Off {
            return self.tokens.update(|v| v.extend(new));
        }
        QUEUE.with(|q| q.borrow_mut().extend(new));
        if TIMER.with(|t| t.get().is_some()) {
            return;
        }
        self.tick();
        let ms = self.pace.get_untracked().step_ms();
        let handle = set_interval_with_handle(move || self.tick(), Duration::from_millis(ms as u64));
        TIMER.with(|t| t.set(handle.ok()));
    }

    /// One step of the animation: the settling character's next step, or the next character.
    fn tick(self) {
        if let Some((tok, s)) = self.settling.get_untracked() {
            if s + 1 < tok.step_logits.len() {
                return self.settling.set(Some((tok, s + 1)));
            }
            self.tokens.update(|v| v.push(tok));
        }
        let skip = self.pace.get_untracked() == Pace::RealTime;
        let next = QUEUE.with(|q| {
            let mut q = q.borrow_mut();
            // behind the model: the older characters appear settled
            let n = q.len();
            let behind: Vec<_> = if skip && n > 1 { q.drain(..n - 1).collect() } else { Vec::new() };
            (behind, q.pop_front())
        });
        let (behind, next) = next;
        if !behind.is_empty() {
            self.tokens.update(|v| v.extend(behind));
        }
        match next {
            Some(t) => self.settling.set(Some((t, 0))),
            None => {
                self.settling.set(None);
                stop_timer();
                if let Some(s) = HELD_STATUS.with(|h| h.borrow_mut().take()) {
                    self.status.set(s);
                }
            }
        }
    }

    /// The run ended with `status`: in slow motion it shows once the text has
    /// caught up; otherwise the text settles at once.
    pub fn done(self, status: String) {
        if self.pace.get_untracked() == Pace::Slow && self.busy() {
            HELD_STATUS.with(|h| *h.borrow_mut() = Some(status));
        } else {
            self.finish();
            self.status.set(status);
        }
    }

    /// Settles everything received at once (Stop, or a change of pace).
    pub fn finish(self) {
        stop_timer();
        let rest: Vec<_> =
            self.settling.get_untracked().map(|(t, _)| t).into_iter().chain(QUEUE.with(|q| q.borrow_mut().drain(..).collect::<Vec<_>>())).collect();
        self.settling.set(None);
        if !rest.is_empty() {
            self.tokens.update(|v| v.extend(rest));
        }
        if let Some(s) = HELD_STATUS.with(|h| h.borrow_mut().take()) {
            self.status.set(s);
        }
    }

    /// Forgets everything (a new run or another model).
    pub fn clear(self) {
        stop_timer();
        QUEUE.with(|q| q.borrow_mut().clear());
        HELD_STATUS.with(|h| h.borrow_mut().take());
        self.settling.set(None);
    }
}

fn stop_timer() {
    TIMER.with(|t| {
        if let Some(h) = t.take() {
            h.clear()
        }
    });
}

/// The character on its way: the step's most likely glyph, as opaque as the
/// model is sure of it, over a bar as long as the energy it has still to lose.
pub fn settling_char(watch: Watch, vocab: Signal<Vec<char>>) -> impl IntoView {
    move || {
        let (tok, s) = watch.settling.get()?;
        let logits = tok.step_logits.get(s)?;
        let (i, p) = *top_k(&softmax(logits), 1).first()?;
        let glyph = vocab.with(|v| v.get(i).copied().unwrap_or('?'));
        let e = &tok.energies;
        let left = match (e.first(), e.get(s.min(e.len().saturating_sub(1)))) {
            (Some(&e0), Some(&es)) => {
                let lo = e.iter().copied().fold(f32::INFINITY, f32::min);
                if e0 - lo > 1e-6 {
                    ((es - lo) / (e0 - lo)).clamp(0.0, 1.0)
                } else {
                    0.0
                }
            }
            _ => 0.0,
        };
        let last = s + 1 == tok.step_logits.len();
        let label =
            format!("character {} settling: step {s} of {}, most likely {} ({:.0}%)", tok.index, tok.step_logits.len() - 1, show_char(glyph), p * 100.0);
        Some(view! {
            <span class="settling" class:firm=last data-i=tok.index data-step=s data-glyph=glyph.to_string() title=label
                style:--p=format!("{p:.3}") style:--left=format!("{left:.3}")>
                {if glyph == '\n' { "⏎\n".to_string() } else { glyph.to_string() }}
                <span class="settle-bar" aria-hidden="true"></span>
            </span>
        })
    }
}
