//! An EBT character's self-verification: every candidate's energy over its
//! thinking steps, with the one kept (lowest final energy) drawn on top and
//! named. A pure view of a `Token` and the step being shown, in the style of
//! chart.rs (same sizes and classes).

use std::sync::Arc;

use leptos::prelude::*;

use super::chart::{energy_frame, fmt_value, EH, EW, PAD};
use super::protocol::Token;

/// At most this many step labels on the x axis (S can be 32).
const MAX_TICKS: usize = 8;
/// Room under the plot for the step labels and, below them, the axis name.
const BOTTOM: f32 = 36.0;

#[component]
pub fn CandidateCurves(token: Signal<Option<Arc<Token>>>, step: Signal<usize>) -> impl IntoView {
    move || {
        let Some(tok) = token.get() else {
            return view! { <p class="placeholder">"Generate to see each character's candidates think."</p> }.into_any();
        };
        let cands = &tok.candidates;
        if cands.iter().all(|c| c.is_empty()) {
            return view! { <p class="placeholder">"This character has no candidates to show."</p> }.into_any();
        }
        let (n, chosen) = (cands.len(), tok.chosen);
        let points = cands.iter().map(Vec::len).max().unwrap_or(1);
        let (lo, hi) = cands.iter().flatten().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let span = if hi - lo < 1e-6 { 1.0 } else { hi - lo };
        let (pl, pr, pt, _) = PAD;
        let pb = BOTTOM;
        let x = move |s: usize| pl + if points > 1 { s as f32 / (points - 1) as f32 } else { 0.5 } * (EW - pl - pr);
        let y = move |v: f32| pt + (hi - v) / span * (EH - pt - pb);
        let shown = step.get().min(points - 1);
        // The kept candidate last, so it is drawn over the others.
        let order = (0..n).filter(move |&c| c != chosen).chain(std::iter::once(chosen));
        let curves = order
            .map(|c| {
                let e = &cands[c];
                let line = e.iter().enumerate().map(|(s, &v)| format!("{:.1},{:.1} ", x(s), y(v))).collect::<String>();
                let last = e.len().saturating_sub(1);
                let end = e.last().copied().unwrap_or(0.0);
                let title = format!(
                    "candidate {} of {n}: E = {} after {last} steps{}",
                    c + 1,
                    fmt_value(end),
                    if c == chosen { " (kept: lowest final energy)" } else { "" }
                );
                let here = e.get(shown).map(|&v| {
                    view! { <circle class="cand-here" cx=format!("{:.1}", x(shown)) cy=format!("{:.1}", y(v)) r="3.5" /> }
                });
                view! {
                    <g class="cand-curve" class:chosen={c == chosen} data-candidate=c>
                        <title>{title}</title>
                        <polyline class="cand-line" points=line />
                        <circle class="cand-end" cx=format!("{:.1}", x(last)) cy=format!("{:.1}", y(end)) r="3" />
                        {here}
                    </g>
                }
            })
            .collect_view();
        let every = (points - 1).div_ceil(MAX_TICKS).max(1);
        let ticks = (0..points)
            .filter(|s| s % every == 0 || *s == points - 1)
            .map(|s| view! { <text class="tick" x=format!("{:.1}", x(s)) y=EH - pb + 14.0 text-anchor="middle">{s}</text> })
            .collect_view();
        let label = format!("energy of {n} candidates for {:?} over {} thinking steps; candidate {} kept", tok.ch, points - 1, chosen + 1);
        let kept = cands[chosen].last().copied().unwrap_or(0.0);
        let legend = if n == 1 {
            "One candidate: nothing to verify (pick 4 or 16 candidates for Best-of-N).".to_string()
        } else {
            format!("kept: candidate {} of {n}, the lowest final energy (E = {})", chosen + 1, fmt_value(kept))
        };
        view! {
            <svg class="chart cand-curves" viewBox=format!("0 0 {EW} {EH}") role="img" aria-label=label>
                {energy_frame(lo, hi, pb)}
                <text class="axis-label" x="12" y=(pt + EH - pb) / 2.0 text-anchor="middle"
                    transform=format!("rotate(-90 12 {:.1})", (pt + EH - pb) / 2.0)>"energy E"</text>
                <text class="axis-label" x=(pl + EW - pr) / 2.0 y=EH - 3.0 text-anchor="middle">"thinking step s"</text>
                {ticks}
                <line class="step-marker" x1=format!("{:.1}", x(shown)) y1=pt x2=format!("{:.1}", x(shown)) y2=EH - pb />
                {curves}
            </svg>
            <p class="cand-legend">
                <span class="key"><span class="swatch chosen" aria-hidden="true"></span><span id="cand-kept">{legend}</span></span>
                {(n > 1).then(|| view! {
                    <span class="key"><span class="swatch" aria-hidden="true"></span>{format!("the other {}", n - 1)}</span>
                })}
            </p>
        }
        .into_any()
    }
}
