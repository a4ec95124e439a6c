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
