//! The pictures of one character's descent: its energy curve E(t), its 2-D
//! trajectory into the basin, and the top-5 candidates at every step. Pure
//! views of a `Token` and the step being shown (replay animates that step).

use std::sync::Arc;

use leptos::prelude::*;

use super::protocol::Token;

/// Visible form of a character (space and newline would be invisible).
pub fn show_char(c: char) -> String {
    match c {
        ' ' => "␣".into(),
        '\n' => "⏎".into(),
        '\t' => "⇥".into(),
        c => c.to_string(),
    }
}

pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
    let z: f32 = e.iter().sum();
    e.into_iter().map(|x| x / z).collect()
}

/// The k most likely characters (index, probability), best first.
pub fn top_k(probs: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut idx: Vec<usize> = (0..probs.len()).collect();
    idx.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    idx.into_iter().take(k).map(|i| (i, probs[i])).collect()
}

pub fn fmt_value(x: f32) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

pub const EW: f32 = 320.0;
pub const EH: f32 = 170.0;
pub const PAD: (f32, f32, f32, f32) = (48.0, 12.0, 14.0, 28.0); // left, right, top, bottom

/// An energy plot's frame: the two axes, with the energy range `lo..hi`
/// written at the ends of the vertical one; `pb` is the bottom margin.
pub fn energy_frame(lo: f32, hi: f32, pb: f32) -> impl IntoView {
    let (pl, pr, pt, _) = PAD;
    view! {
        <line class="axis" x1=pl y1=pt x2=pl y2=EH - pb />
        <line class="axis" x1=pl y1=EH - pb x2=EW - pr y2=EH - pb />
        <text class="tick" x=pl - 6.0 y=pt + 4.0 text-anchor="end">{fmt_value(hi)}</text>
        <text class="tick" x=pl - 6.0 y=EH - pb text-anchor="end">{fmt_value(lo)}</text>
    }
}

/// Whether E rose from step t-1 to t by more than f32 round-off. A
/// character's own step never raises its energy for a fixed context, but in
/// the incremental engine the context's keys descend too, so its landscape
/// moves under it and a rise can happen: the chart marks it, not hides it.
pub fn rose(e: &[f32], t: usize) -> bool {
    t > 0 && e[t] - e[t - 1] > 1e-5 * e[t - 1].abs().max(1.0)
}

/// E(t) - E(0) against the descent step t, one point per step (class
/// `e-point`, and `rise` where it went up). Raw energies (-161, -909) mean
/// little; how far a character fell from where it started does.
#[component]
pub fn EnergyChart(token: Signal<Option<Arc<Token>>>, step: Signal<usize>) -> impl IntoView {
    move || {
        let Some(tok) = token.get() else {
            // The hidden sample makes the browser resolve the charts' fonts now,
            // not in the middle of the first generated character (~200 ms there).
            return view! {
                <p class="placeholder">"Generate to see each character settle."
                    <span class="font-warmup" aria-hidden="true">
                        <span class="cand-char">"a␣⏎"</span><span class="cand-p">"1%"</span>
                        <svg class="chart" viewBox="0 0 10 10"><text class="tick">"0"</text><text class="traj-char">"a"</text></svg>
                    </span>
                </p>
            }
            .into_any();
        };
        let e = &tok.energies;
        if e.is_empty() {
            return view! { <p class="placeholder">"This architecture has no energy: only the candidates change per step."</p> }.into_any();
        }
        let shown = step.get().min(e.len() - 1);
        let e0 = e[0];
        let (lo, hi) = e.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| (a.min(x - e0), b.max(x - e0)));
        let e: Vec<f32> = e.iter().map(|x| x - e0).collect();
        let span = if hi - lo < 1e-6 { 1.0 } else { hi - lo };
        let (pl, pr, pt, pb) = PAD;
        let n = e.len();
        let x = |t: usize| pl + if n > 1 { t as f32 / (n - 1) as f32 } else { 0.5 } * (EW - pl - pr);
        let y = |v: f32| pt + (hi - v) / span * (EH - pt - pb);
        let path = |from: usize, to: usize| (from..=to).map(|t| format!("{}{:.1},{:.1}", if t == from { "M" } else { "L" }, x(t), y(e[t]))).collect::<String>();
        let done = path(0, shown);
        let rest = if shown + 1 < n { path(shown, n - 1) } else { String::new() };
        let points = (0..n)
            .map(|t| {
                let rise = rose(&e, t);
                let label = format!("t = {t}: E(t) - E(0) = {}{}", fmt_value(e[t]), if rise { " (rose: the context moved)" } else { "" });
                view! {
                    <circle class="e-point" class:future={t > shown} class:current={t == shown} class:rise=rise
                        data-step=t data-e=e[t].to_string() cx=format!("{:.1}", x(t)) cy=format!("{:.1}", y(e[t])) r="4.5">
                        <title>{label}</title>
                    </circle>
                }
            })
            .collect_view();
        let ticks = (0..n).map(|t| view! { <text class="tick" x=format!("{:.1}", x(t)) y=EH - 10.0 text-anchor="middle">{t}</text> }).collect_view();
        let label = format!("energy of {:?} relative to its start, step {shown} of {}", tok.ch, n - 1);
        let rises: Vec<usize> = (1..n).filter(|&t| rose(&e, t)).collect();
        let rise_note = (!rises.is_empty()).then(|| {
            let at = rises.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
            format!(
                "The energy rose at step {at}: the characters before this one were still settling, and this one reads their state at the same step, so its landscape moved under it. For a fixed context each step only goes down."
            )
        });
        view! {
            <svg class="chart energy" viewBox=format!("0 0 {EW} {EH}") role="img" aria-label=label>
                {energy_frame(lo, hi, pb)}
                <text class="axis-label" x=pl + 4.0 y=EH - pb - 4.0>"E(t) − E(0)"</text>
                <text class="axis-label" x=EW - pr y=EH - 1.0 text-anchor="end">"step t"</text>
                {ticks}
                <path class="e-line future" d=rest />
                <path class="e-line" d=done />
                {points}
            </svg>
            {rise_note.map(|n| view! { <p class="rise-note">{n}</p> })}
        }
        .into_any()
    }
}

const TW: f32 = 220.0;

/// x_A(t) on the checkpoint's fixed plane: where the state starts and the
/// basin it settles in; faint dots are where recent characters ended.
#[component]
pub fn TrajectoryChart(token: Signal<Option<Arc<Token>>>, step: Signal<usize>, landscape: Signal<Vec<[f32; 2]>>) -> impl IntoView {
    move || {
        let tok = token.get()?;
        let p = &tok.proj;
        if p.is_empty() {
            return None;
        }
        let shown = step.get().min(p.len() - 1);
        let land = landscape.get();
        // scaled to this character's path: the basins of others may fall outside
        let (mut x0, mut x1, mut y0, mut y1) = (f32::INFINITY, f32::NEG_INFINITY, f32::INFINITY, f32::NEG_INFINITY);
        for q in p {
            x0 = x0.min(q[0]);
            x1 = x1.max(q[0]);
            y0 = y0.min(q[1]);
            y1 = y1.max(q[1]);
        }
        // One scale for both axes: distances in the plane stay true.
        let side = (x1 - x0).max(y1 - y0).max(1e-6);
        let (cx, cy, m) = ((x0 + x1) / 2.0, (y0 + y1) / 2.0, 22.0);
        let sx = |v: f32| TW / 2.0 + (v - cx) / side * (TW - 2.0 * m);
        let sy = |v: f32| TW / 2.0 - (v - cy) / side * (TW - 2.0 * m);
        let dots =
            land.iter().map(|q| view! { <circle class="basin-dot" cx=format!("{:.1}", sx(q[0])) cy=format!("{:.1}", sy(q[1])) r="2.5" /> }).collect_view();
        let line = |to: usize| (0..=to).map(|t| format!("{:.1},{:.1} ", sx(p[t][0]), sy(p[t][1]))).collect::<String>();
        let points = (0..p.len())
            .map(|t| {
                view! {
                    <circle class="traj-point" class:future={t > shown} class:current={t == shown} class:start={t == 0}
                        data-step=t cx=format!("{:.1}", sx(p[t][0])) cy=format!("{:.1}", sy(p[t][1]))
                        r=if t == shown { "6" } else { "4" }>
                        <title>{format!("t = {t}")}</title>
                    </circle>
                }
            })
            .collect_view();
        let end = p[shown];
        let label = format!("trajectory of {:?} on the readout plane", tok.ch);
        // a scale bar of a round length, at most a third of the plot
        let bar = nice_length(side / 3.0);
        let bar_px = bar / side * (TW - 2.0 * m);
        Some(view! {
            <svg class="chart traj" viewBox=format!("0 0 {TW} {TW}") role="img" aria-label=label>
                <line class="axis" x1="8" y1=TW - 8.0 x2=TW - 8.0 y2=TW - 8.0 />
                <line class="axis" x1="8" y1="8" x2="8" y2=TW - 8.0 />
                <text class="axis-label" x=TW - 10.0 y=TW - 12.0 text-anchor="end">"direction 1 →"</text>
                <text class="axis-label" x="12" y="18">"↑ direction 2"</text>
                <line class="scale-bar" x1=TW - 12.0 - bar_px y1="16" x2=TW - 12.0 y2="16" />
                <text class="tick scale-label" x=TW - 12.0 y="30" text-anchor="end">{format!("{:.*}", (-bar.log10().floor()).max(0.0) as usize, bar)}</text>
                {dots}
                <polyline class="traj-path future" points=line(p.len() - 1) />
                <polyline class="traj-path" points=line(shown) />
                {points}
                <text class="traj-char" x=format!("{:.1}", sx(end[0]) + 9.0) y=format!("{:.1}", sy(end[1]) - 7.0)>
                    {show_char(tok.ch)}
                </text>
            </svg>
        })
    }
}

/// The largest 1, 2 or 5 times a power of ten that is at most `x`.
fn nice_length(x: f32) -> f32 {
    let p = 10f32.powf(x.max(1e-9).log10().floor());
    [5.0, 2.0, 1.0].into_iter().map(|k| k * p).find(|&v| v <= x).unwrap_or(p)
}

/// The five most likely next characters at every step (softmax of the
/// step's logits: NRGPT's readout of x_A(t), an EBT's guess z(s)); the drawn
/// character is marked. `caption` says which of the two it is.
#[component]
pub fn CandidateTable(token: Signal<Option<Arc<Token>>>, step: Signal<usize>, vocab: Signal<Vec<char>>, caption: Signal<&'static str>) -> impl IntoView {
    move || {
        let tok = token.get()?;
        let shown = step.get();
        let vocab = vocab.get();
        let rows = tok
            .step_logits
            .iter()
            .enumerate()
            .map(|(t, logits)| {
                let cells = top_k(&softmax(logits), 5)
                    .into_iter()
                    .map(|(i, p)| {
                        let c = vocab.get(i).copied().unwrap_or('?');
                        let pct = format!("{:.0}%", p * 100.0);
                        view! {
                            <td class="cand" class:chosen=c == tok.ch>
                                <span class="cand-char">{show_char(c)}</span>
                                <span class="cand-bar" style:width=format!("{:.1}%", p * 100.0)></span>
                                <span class="cand-p">{pct}</span>
                            </td>
                        }
                    })
                    .collect_view();
                view! { <tr class:current={t == shown} class:future={t > shown}><th scope="row">{t}</th>{cells}</tr> }
            })
            .collect_view();
        Some(view! {
            <table class="cands">
                <colgroup><col class="col-t" /><col span="5" /></colgroup>
                <caption>{caption.get()}</caption>
                <thead><tr><th scope="col">"t"</th><th scope="col" colspan="5">"most likely next characters"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        })
    }
}
