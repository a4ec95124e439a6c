// pgkb lab: the only script. Pages work without it; it draws Mermaid diagrams in passages when they are opened.
// Mermaid (vendored, 5 MB) is loaded only the first time a passage with a diagram is shown. A diagram
// Mermaid cannot parse keeps its source visible, with Mermaid's message above it.
"use strict";

let mermaidLoading = null;

function loadMermaid() {
  if (!mermaidLoading) {
    mermaidLoading = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "/static/vendor/mermaid/mermaid.min.js";
      script.onload = () => {
        window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "neutral" });
        resolve(window.mermaid);
      };
      script.onerror = () => reject(new Error("could not load /static/vendor/mermaid/mermaid.min.js"));
      document.head.appendChild(script);
    });
  }
  return mermaidLoading;
}

let diagramCount = 0;

async function drawDiagrams(container) {
  const blocks = container.querySelectorAll("pre.mermaid-source:not([data-drawn])");
  if (!blocks.length) return;
  let mermaid;
  try {
    mermaid = await loadMermaid();
  } catch (error) {
    blocks.forEach((block) => failed(block, error.message));
    return;
  }
  for (const block of blocks) {
    block.setAttribute("data-drawn", "pending");
    const id = "mermaid-diagram-" + ++diagramCount;
    try {
      const { svg } = await mermaid.render(id, block.textContent);
      const figure = document.createElement("div");
      figure.className = "mermaid-diagram";
      figure.innerHTML = svg;
      block.replaceWith(figure);
    } catch (error) {
      document.getElementById("d" + id)?.remove(); // Mermaid leaves its error drawing behind
      failed(block, (error && error.message) || String(error));
    }
  }
}

function failed(block, message) {
  block.setAttribute("data-drawn", "failed");
  const note = document.createElement("p");
  note.className = "mermaid-failed";
  note.textContent = "Mermaid could not draw this diagram; its source is shown. " + message.split("\n")[0];
  block.before(note);
}

document.addEventListener(
  "toggle",
  (event) => {
    const details = event.target;
    if (details instanceof HTMLDetailsElement && details.open) drawDiagrams(details);
  },
  true,
);

// Judging in place: a judge button's post is sent with fetch, asking for JSON, with the passages the page
// shows; the server records the judgment without asking the question again and the card changes where it
// is. Without this script the same button posts the form and the page is shown again.
function shownPassages() {
  const names = [...document.querySelectorAll("article.result[data-source]")].map(
    (card) => card.dataset.namespace + "/" + card.dataset.source,
  );
  return [...new Set(names)];
}

function markJudged(holder, answer) {
  holder.querySelectorAll("button[name=judge]").forEach((button) => {
    const chosen = button.dataset.judgment === answer.judgment;
    button.classList.toggle("chosen", chosen);
    button.setAttribute("aria-pressed", chosen ? "true" : "false");
  });
  const label = holder.querySelector(".label");
  const waiting = answer.status === "suggested" ? " (a suggestion until an admin accepts it)" : "";
  if (holder.matches(".no-answer")) {
    holder.dataset.judgeNoAnswer = answer.judgment;
    label.textContent = "You judged that nothing in " + answer.namespace + " answers this question" + waiting + ".";
  } else {
    holder.dataset.judge = answer.judgment;
    label.textContent = "you judged this document " + answer.judgment + " for this question" + waiting;
  }
  holder.classList.remove("judge-failed");
}

// A question can take seconds (the first one of a new connection loads the embedding model): after a
// moment the form says it is asking, so a slow answer is not taken for a dead page.
function showAsking(form) {
  const note = document.createElement("p");
  note.className = "notice asking";
  note.setAttribute("role", "status");
  note.dataset.asking = "";
  note.textContent = "Asking the database… the first question of a new connection loads the embedding model and can take several seconds.";
  setTimeout(() => form.after(note), 400);
}

document.addEventListener("submit", async (event) => {
  const button = event.submitter;
  if (!button || button.name !== "judge") {
    if (event.target.matches("form.query")) showAsking(event.target);
    return;
  }
  event.preventDefault();
  const holder = button.closest(".judge");
  const body = new URLSearchParams(new FormData(event.target, button));
  body.set("shown", JSON.stringify(shownPassages()));
  holder.setAttribute("aria-busy", "true");
  try {
    const response = await fetch(button.formAction, {
      method: "POST",
      body,
      headers: { Accept: "application/json" },
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || answer.detail || response.statusText);
    markJudged(holder, answer);
  } catch (error) {
    holder.classList.add("judge-failed");
    holder.querySelector(".label").textContent = "Not recorded: " + error.message;
  } finally {
    holder.removeAttribute("aria-busy");
  }
});

// Keys on the query and compare pages: j / k the next / previous passage, 1 relevant, 2 not relevant,
// 3 forbidden (the passage in focus), 0 nothing here answers, n the next question waiting for a judgment.
const JUDGE_KEYS = { 1: "relevant", 2: "not relevant", 3: "forbidden" };

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
  if (event.target.closest && event.target.closest("input, textarea, select, [contenteditable]")) return;
  const cards = [...document.querySelectorAll("article.result")];
  const current = cards.indexOf(document.activeElement && document.activeElement.closest("article.result"));
  let button = null;
  if (event.key === "j" || event.key === "k") {
    if (!cards.length) return;
    const next = current < 0 ? 0 : current + (event.key === "j" ? 1 : -1);
    const card = cards[Math.max(0, Math.min(cards.length - 1, next))];
    card.focus();
    card.scrollIntoView({ block: "nearest" });
  } else if (JUDGE_KEYS[event.key] && current >= 0) {
    button = cards[current].querySelector(`button[name=judge][data-judgment="${JUDGE_KEYS[event.key]}"]`);
  } else if (event.key === "0") {
    button = document.querySelector("button[name=judge][data-judgment='no answer']");
  } else if (event.key === "n") {
    const next = document.querySelector("a[data-next-unjudged]");
    if (next) window.location.assign(next.href);
  } else {
    return;
  }
  event.preventDefault();
  if (button) button.click();
});
