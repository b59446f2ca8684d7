//! "How it works": the page's words for what the pictures show, for a
//! reader who has never met an energy model.

use leptos::prelude::*;

const NRGPT_PAPER: &str = "https://arxiv.org/abs/2512.16762";
const EBT_PAPER: &str = "https://arxiv.org/abs/2507.02092";

/// A panel, closed until asked, that explains energy, descent, T, the
/// tolerance, basins and rises, then the EBT's thinking, with the two papers.
pub fn how_it_works() -> impl IntoView {
    view! {
        <details id="how" class="panel how">
            <summary>"How it works, in plain words"</summary>
            <div class="how-body">
                <section>
                    <h3>"An energy, and why it goes down"</h3>
                    <p>"Before writing a character, the model holds a hidden state: a list of a few hundred numbers. \
                        The model gives every state a score, its "<em>"energy"</em>": low when the state fits the text so far, high when it does not. \
                        Instead of passing the state through a fixed stack of layers, the model nudges it downhill on that score, a little at a time, like a ball rolling into a valley. \
                        After the last nudge it reads the state out as a probability for each next character and draws one."</p>
                    <p>"The energy numbers themselves (say −161 or −909) have no unit you would know; what tells the story is how far a character falls from where it started, so the chart shows "<strong>"E(t) − E(0)"</strong>"."</p>
                </section>
                <section>
                    <h3>"T, the tolerance and basins"</h3>
                    <ul>
                        <li><strong>"T"</strong>" is the number of nudges (descent steps). One shared block is applied T times, so T is the model's depth. The weights learned the T they were trained with; another T usually writes worse text."</li>
                        <li>"The "<strong>"early-exit tolerance"</strong>" stops a character's descent once its energy changes by less than that amount: easy characters stop early, hard ones use every step (colour the text by steps used to see which)."</li>
                        <li>"A "<strong>"basin"</strong>" is a valley the state rolls into. The path plot shows the state seen from above; grey dots are where recent characters ended, so characters that settle in the same valley tend to be the same letter."</li>
                        <li>"Watch mode shows the same thing in the text: each new character first appears as its starting state's best guess, changes as the state descends, and firms up when it settles."</li>
                    </ul>
                </section>
                <section>
                    <h3>"Why a curve sometimes rises"</h3>
                    <p>"For a fixed context, each step of a character can only lower its energy (the step size is tied to the norm's gain, which makes the descent provably stable). \
                        But all characters descend together: at step t a character reads the earlier characters as they are at step t, so the landscape it stands on moves while it walks. \
                        When that lifts it, the chart marks the rise with a hollow ring and says so, rather than hiding it."</p>
                </section>
                <section>
                    <h3>"The EBT: thinking about the answer itself"</h3>
                    <p>"The Energy-Based Transformer scores a guess at the next character, not a hidden state. Each guess starts as noise and descends that score for S steps ("
                        <em>"thinking longer"</em>" = more steps); with N guesses the one that ends lowest is kept ("<em>"self-verification"</em>"). Its chart draws every guess's energy per step, the kept one thick."</p>
                </section>
                <p class="papers">"The papers: "
                    <a href=NRGPT_PAPER target="_blank" rel="noopener">"NRGPT: an energy-based alternative to GPT (arXiv 2512.16762)"</a>
                    " and "
                    <a href=EBT_PAPER target="_blank" rel="noopener">"Energy-Based Transformers are scalable learners and thinkers (arXiv 2507.02092)"</a>
                    "."</p>
            </div>
        </details>
    }
}
