// The attention explorer's front end (an anywidget ES module; see transformer_lib/explorer.py).
// It draws everything from the widget's state (`data`, `kind`, `layer`, `head`), so it works
// with a kernel and without one: on the static website the state comes from the notebook.
// No dependencies and no network: plain DOM, SVG and canvas.

// viridis (matplotlib), 17 stops from 0 to 1
const VIRIDIS = ["#440154", "#48186a", "#472d7b", "#424086", "#3b528b", "#33638d", "#2c728e", "#26828e",
  "#21918c", "#1fa088", "#28ae80", "#3fbc73", "#5ec962", "#84d44b", "#addc30", "#d8e219", "#fde725"];
const STOPS = VIRIDIS.map((h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)));

function rgb(v) {
  const x = Math.min(Math.max(Number(v) || 0, 0), 1) * (STOPS.length - 1);
  const i = Math.min(Math.floor(x), STOPS.length - 2);
  const t = x - i;
  return STOPS[i].map((c, j) => Math.round(c + t * (STOPS[i + 1][j] - c)));
}
const colour = (v) => `rgb(${rgb(v).join(",")})`;
const inkOn = (v) => (v > 0.55 ? "#000" : "#fff"); // text colour readable on viridis(v)

const SVG = "http://www.w3.org/2000/svg";
function h(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

// How a token is written: whitespace made visible, long ones shortened (the full one is in labels).
function show(token, max = 14) {
  let t = String(token);
  if (t === "") t = "∅";
  else if (/^\s+$/.test(t)) t = t.replace(/ /g, "␣").replace(/\n/g, "⏎").replace(/\t/g, "⇥");
  return t.length > max ? t.slice(0, max - 1) + "…" : t;
}
const quoted = (tokens, i) => `${i} “${show(tokens[i], 40)}”`;

// The state stores each matrix as one string per row (".25 .5 0 1"); parsed once per data.
const PARSED = new WeakMap();
function parsed(data) {
  if (!PARSED.has(data)) {
    const rows = (m) => m.map((r) => r.split(" ").map(Number));
    PARSED.set(data, (data.kinds || []).map((k) => ({ ...k,
      weights: k.weights.map((layer) => layer.map(rows)), mean: k.mean.map(rows) })));
  }
  return PARSED.get(data);
}

// ---- the second way to compute: the model in the reader's browser ---------------------------
// On the book's website there is no kernel. Where the site ships the model an explorer shows,
// the build (book/_ext/static_widgets.py) puts `_browser` into the explorer's saved state: the
// model's vocabulary and limits, where its manifest and ONNX files are (exported by
// scripts/export_onnx.py), where the site's own copy of onnxruntime-web is, and how much the
// first run downloads. Nothing is fetched until the reader runs the model. The runs below do
// what transformer_lib does in Python (decoding.greedy_decode, lm.generate, record_attention;
// transformer_lib/book/explorer_browser.py is the same loop, tested against PyTorch), and give
// the view the same `data` that explorer_state.build_state writes.

const BROWSER_MAX_TOKENS = 64; // query and key positions kept in a browser run's maps
const LOAD_SECONDS = 120; // give up loading the runtime and the model after this
const RUN_SECONDS = 60; // and a run after this
const LOADED = new Map(); // manifest URL -> promise of {ort, manifest, sessions}, one per page
const LABELS = { encoder: "Encoder self-attention", decoder: "Decoder self-attention", cross: "Cross-attention" };

const megabytes = (n) => `${(Number(n) / 1e6).toFixed(1)} MB`;
const absolute = (url) => new URL(url, document.baseURI).href;

function withTimeout(promise, seconds, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${seconds} s`)), seconds * 1000);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// The reader's text as ids of the model's vocabulary, or a message saying what is wrong with it.
function readText(text, cfg) {
  const chars = Array.from(text); // characters, not UTF-16 units
  const what = cfg.kind === "causal-lm" ? "the start of a sentence" : "a date";
  if (!text.trim()) return { error: `Type ${what} first.` };
  if (chars.length > cfg.max_chars) {
    return { error: `That is ${chars.length} characters; the model reads at most ${cfg.max_chars} here.` };
  }
  const index = new Map(cfg.tokens.map((t, i) => [t, i]).filter(([, i]) => i >= 4)); // no specials
  const unknown = [...new Set(chars.filter((c) => !index.has(c)))];
  if (unknown.length) {
    const list = unknown.map((c) => `“${show(c, 4)}”`).join(", ");
    return { error: `The model has never seen ${unknown.length > 1 ? "these characters" : "this character"}: ` +
      `${list}. It reads only the characters of its training data.` };
  }
  return { chars, ids: chars.map((c) => index.get(c)) };
}

async function fetchJSON(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url} answered ${response.status}`);
  return response.json();
}

function loadModel(cfg) {
  const url = absolute(cfg.manifest);
  if (!LOADED.has(url)) {
    const loading = (async () => {
      const runtime = absolute(cfg.runtime);
      const ort = await import(runtime);
      ort.env.wasm.wasmPaths = runtime.replace(/[^/]*$/, ""); // the site's copy, never a CDN
      ort.env.wasm.numThreads = 1; // no worker threads: a plain static host cannot enable them
      ort.env.logLevel = "error";
      const manifest = await fetchJSON(url);
      const sessions = {};
      for (const [part, file] of Object.entries(manifest.files)) {
        sessions[part] = await ort.InferenceSession.create(new URL(file.path, url).href,
          { executionProviders: ["wasm"] });
      }
      return { ort, manifest, sessions };
    })();
    LOADED.set(url, loading);
    loading.catch(() => LOADED.delete(url)); // a failed load can be tried again
  }
  return LOADED.get(url);
}

// vocab.Vocab.decode: skip <pad> and <bos>, stop at <eos>, write <unk> as "?".
function decode(ids, tokens) {
  let text = "";
  for (const i of ids) {
    if (i === 2) break;
    if (i > 1) text += i === 3 ? "?" : tokens[i];
  }
  return text;
}

const ids64 = (ort, ids) => new ort.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), [1, ids.length]);

// The most probable next token, never <pad> or <bos> (what decoding does in Python).
function argmax(values, skip = []) {
  let best = -1;
  for (let v = 0; v < values.length; v++) {
    if (!skip.includes(v) && (best < 0 || values[v] > values[best])) best = v;
  }
  return best;
}

// A (1, h, q, k) weights tensor -> h matrices of q rows of k numbers.
function heads(tensor) {
  const [, h, q, k] = tensor.dims;
  const data = tensor.data;
  return Array.from({ length: h }, (_, hd) => Array.from({ length: q }, (_, i) =>
    Array.from(data.subarray((hd * q + i) * k, (hd * q + i + 1) * k))));
}

// explorer_state.build_state in short: rows as strings of numbers rounded to 3 places.
function number(v) {
  const text = String(Math.round(v * 1000) / 1000);
  return text.startsWith("0.") ? text.slice(1) : text;
}
function kindState(id, layers, queries, keys, notes) {
  const nq = Math.min(queries.length, BROWSER_MAX_TOKENS), nk = Math.min(keys.length, BROWSER_MAX_TOKENS);
  const rows = (m) => m.slice(0, nq).map((row) => row.slice(0, nk).map(number).join(" "));
  const mean = (hs) => hs[0].map((row, i) => row.map((_, j) => hs.reduce((s, m) => s + m[i][j], 0) / hs.length));
  if (queries.length > nq || keys.length > nk) {
    notes.push(`Only the first ${BROWSER_MAX_TOKENS} positions of ${Math.max(queries.length, keys.length)} are shown.`);
  }
  return { id, label: LABELS[id], queries: queries.slice(0, nq), keys: keys.slice(0, nk), n_layers: layers.length,
    n_heads: layers[0].length, total_heads: layers[0].length, weights: layers.map((hs) => hs.map(rows)),
    mean: layers.map((hs) => rows(mean(hs))) };
}

async function runDates({ ort, manifest: m, sessions }, read) {
  const src = ids64(ort, read.ids);
  const encoded = await sessions.encoder.run({ src });
  const out = [m.bos_id];
  for (let step = 0; step < m.max_out; step++) {
    const { logits } = await sessions.decoder_step.run({ tgt: ids64(ort, out), memory: encoded.memory, src },
      ["logits"]);
    const next = argmax(logits.data, [m.pad_id, m.bos_id]);
    if (next === m.eos_id) break;
    out.push(next);
  }
  // one more pass over <bos> and the answer gives every attention weight of the decoder
  const last = await sessions.decoder_step.run({ tgt: ids64(ort, out), memory: encoded.memory, src });
  const answer = decode(out, m.tgt_tokens);
  const tgt = ["<bos>", ...Array.from(answer)];
  const per = (result, name) => Array.from({ length: m.n_layers }, (_, l) => heads(result[`${name}_${l}`]));
  const notes = [];
  const kinds = [
    kindState("encoder", per(encoded, "encoder_attention"), read.chars, read.chars, notes),
    kindState("decoder", per(last, "decoder_attention"), tgt, tgt, notes),
    kindState("cross", per(last, "cross_attention"), tgt, read.chars, notes),
  ];
  return { answer, text: `The model's answer: ${answer}`, kinds, notes };
}

async function runLM({ ort, manifest: m, sessions }, read) {
  const ids = [...read.ids];
  for (let step = 0; step < m.continue; step++) {
    const { logits } = await sessions.lm.run({ ids: ids64(ort, ids) }, ["logits"]);
    const vocab = m.tokens.length;
    ids.push(argmax(logits.data.subarray((ids.length - 1) * vocab, ids.length * vocab)));
  }
  const result = await sessions.lm.run({ ids: ids64(ort, ids) });
  const answer = decode(ids.slice(read.ids.length), m.tokens);
  const tokens = ids.map((i) => m.tokens[i]);
  const notes = [];
  const layers = Array.from({ length: m.n_layers }, (_, l) => heads(result[`attention_${l}`]));
  return { answer, text: `Greedy continuation: “${read.chars.join("")}” + “${answer}”`,
    kinds: [kindState("decoder", layers, tokens, tokens, notes)], notes };
}

function render({ model, el }) {
  const uid = "tlx" + Math.random().toString(36).slice(2, 10);
  const ui = { active: null, col: null, cell: [0, 0], built: null };
  const get = () => {
    const data = model.get("data") || {};
    const kinds = parsed(data);
    const k = kinds.find((x) => x.id === model.get("kind")) || kinds[0];
    if (!k) return null;
    const layer = Math.min(Math.max(model.get("layer") | 0, 0), k.n_layers - 1);
    const hd = model.get("head") | 0;
    // head -1 is the mean of the heads; with a single head it is that head
    const head = k.total_heads === 1 ? 0 : hd >= -1 && hd < k.n_heads ? hd : -1;
    const matrix = head < 0 ? k.mean[layer] : k.weights[layer][head];
    return { data, kinds, k, layer, head, matrix, decimals: data.decimals ?? 3 };
  };
  const fmt = (v, s) => Number(v).toFixed(s.decimals);
  const headName = (s, head) => (head < 0 ? `mean of ${s.k.total_heads} heads` : `head ${head}`);

  function choose(kind, layer, head) {
    model.set("kind", kind);
    model.set("layer", layer);
    model.set("head", head);
    model.save_changes(); // a no-op without a kernel (static website)
  }

  // ---- skeleton ----------------------------------------------------------------------------
  const title = h("div", { class: "tlx-title", id: `${uid}-title` });
  const kindSel = h("select", { class: "tlx-kind", "aria-label": "Attention kind" });
  const layerSel = h("select", { class: "tlx-layer", "aria-label": "Layer" });
  const headSel = h("select", { class: "tlx-head", "aria-label": "Head" });
  const controls = h("div", { class: "tlx-controls" },
    h("label", {}, "Attention ", kindSel), h("label", {}, "Layer ", layerSel), h("label", {}, "Head ", headSel));
  const textBox = h("input", { type: "text", class: "tlx-text-input", "aria-label": "Your own input" });
  const status = h("span", { class: "tlx-status", role: "status" });
  const runButton = h("button", { type: "submit", text: "Run" });
  const form = h("form", { class: "tlx-input", hidden: true }, textBox, runButton, status);
  const liveNote = h("p", { class: "tlx-live-note", hidden: true }); // where the browser's model comes from
  const answerLine = h("p", { class: "tlx-answer", hidden: true, "aria-live": "polite" });
  const caption = h("p", { class: "tlx-caption", id: `${uid}-caption` });
  const table = h("table", { class: "tlx-heat", role: "grid", "aria-labelledby": `${uid}-caption` });
  const heatPanel = h("div", { class: "tlx-panel tlx-heat-panel" },
    h("div", { class: "tlx-axis tlx-axis-x", "aria-hidden": "true", text: "keys (attended to) →" }),
    h("div", { class: "tlx-heat-row" },
      h("div", { class: "tlx-axis tlx-axis-y", "aria-hidden": "true", text: "queries (attending) →" }), table));
  // the svg itself is no tab stop (Chromium makes it one); its query tokens are
  const svg = h("svg:svg", { class: "tlx-lines", role: "group", tabindex: -1,
    "aria-label": "Lines from each query token to the key tokens it attends to" });
  const linesPanel = h("div", { class: "tlx-panel tlx-lines-panel" }, svg);
  const readout = h("div", { class: "tlx-readout", "aria-live": "polite" });
  const legend = h("div", { class: "tlx-legend", role: "img",
    "aria-label": "Colour scale viridis: dark purple is weight 0, green 0.5, yellow 1" },
  h("span", { class: "tlx-legend-label", text: "attention weight" }),
  h("span", { class: "tlx-legend-scale" },
    h("span", { class: "tlx-legend-bar", style: `background: linear-gradient(to right, ${VIRIDIS.join(", ")})` }),
    h("span", { class: "tlx-legend-ticks" }, ...["0", "0.25", "0.5", "0.75", "1"].map((t) => h("span", { text: t })))));
  const grid = h("div", { class: "tlx-grid", role: "group", "aria-labelledby": `${uid}-grid-title` });
  const gridWrap = h("div", { class: "tlx-grid-wrap" },
    h("div", { class: "tlx-grid-title", id: `${uid}-grid-title`, text: "Every layer and head (click one to open it)" }), grid);
  const description = h("div", { class: "tlx-description" });
  const details = h("details", { class: "tlx-details" }, h("summary", { text: "Text description of this map" }), description);
  const notes = h("p", { class: "tlx-notes" });
  const help = h("p", { class: "tlx-help", text:
    "Keyboard: Tab moves between the controls, the map, the tokens and the grid; arrow keys move " +
    "within the map (its numbers show below it), the tokens and the grid; Enter opens a map of the grid." });
  const root = h("div", { class: "tlx", role: "group", "aria-labelledby": `${uid}-title` },
    title, controls, form, liveNote, answerLine, caption, h("div", { class: "tlx-main" }, heatPanel, linesPanel), readout, legend,
    gridWrap, details, notes, help);
  el.replaceChildren(root);

  // ---- building (when the data or the kind changes) ----------------------------------------
  let cells = []; // cells[q][k] = <td>
  let rows = []; // <tr>
  let qLabels = []; // svg <text> of the queries
  let kLabels = [];
  let lineGroup = null;
  let thumbs = []; // {button, layer, head}
  const LINE_X = { left: 104, right: 176, width: 280 };

  function build(s) {
    const { k, kinds, data } = s;
    title.textContent = data.title || "Attention explorer";
    kindSel.replaceChildren(...kinds.map((x) => h("option", { value: x.id, text: x.label, selected: x.id === k.id })));
    kindSel.disabled = kinds.length < 2;
    layerSel.replaceChildren(...Array.from({ length: k.n_layers }, (_, i) => h("option", { value: i, text: `layer ${i}` })));
    layerSel.disabled = k.n_layers < 2;
    const first = k.total_heads > 1 ? -1 : 0; // no mean column for a single head
    headSel.replaceChildren(...(first < 0 ? [h("option", { value: -1, text: `mean of ${k.total_heads} heads` })] : []),
      ...Array.from({ length: k.n_heads }, (_, i) => h("option", { value: i, text: `head ${i}` })));
    headSel.disabled = k.n_heads < 2;
    notes.textContent = (data.notes || []).join(" ");
    notes.hidden = !notes.textContent;

    // heat map: a table, query tokens as row headers, key tokens as column headers
    const nq = k.queries.length, nk = k.keys.length;
    // cells as big as fits beside the lines in a book's text column (about 700 px)
    const size = Math.max(14, Math.min(32, Math.floor(320 / Math.max(nq, nk))));
    root.style.setProperty("--tlx-cell", `${size}px`);
    root.classList.toggle("tlx-numbers", size >= 28);
    const head = h("tr", {}, h("td", { class: "tlx-corner" }),
      ...k.keys.map((t, j) => h("th", { scope: "col", title: t, "aria-label": `key ${quoted(k.keys, j)}` },
        h("span", { class: "tlx-col-label", text: show(t) }))));
    rows = []; cells = [];
    const body = k.queries.map((t, i) => {
      const tds = k.keys.map((_, j) => h("td", { role: "gridcell", tabindex: -1, "data-row": i, "data-col": j }));
      cells.push(tds);
      const tr = h("tr", { "data-row": i }, h("th", { scope: "row", title: t, text: show(t) }), ...tds);
      rows.push(tr);
      return tr;
    });
    table.replaceChildren(h("thead", {}, head), h("tbody", {}, ...body));
    ui.cell = [Math.min(ui.cell[0], nq - 1), Math.min(ui.cell[1], nk - 1)];
    cells[ui.cell[0]][ui.cell[1]].tabIndex = 0;

    // lines: queries on the left, keys on the right
    const n = Math.max(nq, nk);
    const rowH = Math.max(13, Math.min(24, size));
    const height = 24 + n * rowH;
    const yq = (i) => 24 + (i + 0.5) * rowH + ((n - nq) * rowH) / 2;
    const yk = (j) => 24 + (j + 0.5) * rowH + ((n - nk) * rowH) / 2;
    svg.setAttribute("viewBox", `0 0 ${LINE_X.width} ${height}`);
    svg.setAttribute("width", LINE_X.width);
    svg.setAttribute("height", height);
    svg.style.setProperty("--tlx-row", `${rowH}px`);
    lineGroup = h("svg:g", { class: "tlx-line-group", "aria-hidden": "true" });
    qLabels = k.queries.map((t, i) => h("svg:text", {
      x: LINE_X.left - 6, y: yq(i), class: "tlx-q", "text-anchor": "end", "dominant-baseline": "central",
      tabindex: i === Math.min(ui.cell[0], nq - 1) ? 0 : -1, role: "button", "data-row": i,
      text: show(t) }));
    kLabels = k.keys.map((t, j) => h("svg:text", {
      x: LINE_X.right + 6, y: yk(j), class: "tlx-k", "text-anchor": "start", "dominant-baseline": "central",
      "data-col": j, "aria-hidden": "true", text: show(t) }));
    svg.replaceChildren(
      h("svg:text", { x: LINE_X.left - 6, y: 10, class: "tlx-lines-head", "text-anchor": "end", text: "queries" }),
      h("svg:text", { x: LINE_X.right + 6, y: 10, class: "tlx-lines-head", "text-anchor": "start", text: "keys" }),
      lineGroup, ...qLabels, ...kLabels);
    svg.dataset.yq = JSON.stringify(k.queries.map((_, i) => yq(i)));
    svg.dataset.yk = JSON.stringify(k.keys.map((_, j) => yk(j)));

    // small multiples: one thumbnail per layer and head, the mean first
    const cols = k.n_heads - first;
    const thumb = Math.max(32, Math.min(64, Math.floor(560 / cols)));
    grid.style.gridTemplateColumns = `auto repeat(${cols}, ${thumb}px)`;
    thumbs = [];
    const items = [h("span", {})];
    for (let hd = first; hd < k.n_heads; hd++) items.push(h("span", { class: "tlx-grid-head", text: hd < 0 ? "mean" : `head ${hd}` }));
    for (let l = 0; l < k.n_layers; l++) {
      items.push(h("span", { class: "tlx-grid-layer", text: `layer ${l}` }));
      for (let hd = first; hd < k.n_heads; hd++) {
        const m = hd < 0 ? k.mean[l] : k.weights[l][hd];
        const canvas = h("canvas", { width: nk, height: nq, "aria-hidden": "true",
          style: `width:${thumb - 6}px;height:${Math.max(8, Math.round(((thumb - 6) * nq) / nk))}px` });
        const ctx = canvas.getContext("2d");
        const img = ctx.createImageData(nk, nq);
        m.forEach((row, i) => row.forEach((v, j) => {
          const [r, g, b] = rgb(v);
          img.data.set([r, g, b, 255], (i * nk + j) * 4);
        }));
        ctx.putImageData(img, 0, 0);
        const button = h("button", { type: "button", class: "tlx-thumb", tabindex: -1, "data-layer": l, "data-head": hd,
          "aria-label": `layer ${l}, ${hd < 0 ? `mean of ${k.total_heads} heads` : `head ${hd}`}`,
          onclick: () => choose(k.id, l, hd) }, canvas);
        thumbs.push({ button, layer: l, head: hd });
        items.push(button);
      }
    }
    grid.replaceChildren(...items);
    ui.built = { data: s.data, kind: k.id };
  }

  // ---- painting (when the layer or the head changes, and after building) -------------------
  function paint(s) {
    const { k, layer, head, matrix } = s;
    kindSel.value = k.id;
    layerSel.value = String(layer);
    headSel.value = String(head);
    const what = `${k.label}, layer ${layer}, ${headName(s, head)}`;
    caption.textContent = `${what}. Each row is a query token, each column a key token; ` +
      "a cell's colour is how much the query attends to the key.";
    root.dataset.kind = k.id;
    root.dataset.layer = layer;
    root.dataset.head = head;
    matrix.forEach((row, i) => row.forEach((v, j) => {
      const td = cells[i][j];
      td.style.background = colour(v);
      td.style.color = inkOn(v);
      td.dataset.weight = String(v);
      td.setAttribute("aria-label", `query ${quoted(k.queries, i)}, key ${quoted(k.keys, j)}: ${fmt(v, s)}`);
    }));
    thumbs.forEach((t) => {
      const on = t.layer === layer && t.head === head;
      t.button.setAttribute("aria-pressed", on ? "true" : "false");
      t.button.tabIndex = on ? 0 : -1;
    });
    describe(s);
    highlight(s);
  }

  function describe(s) {
    const { k, matrix } = s;
    const items = matrix.map((row, i) => {
      const top = row.map((v, j) => [v, j]).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, 3).filter((x) => x[0] > 0);
      const text = top.length ? top.map(([v, j]) => `“${show(k.keys[j], 40)}” ${fmt(v, s)}`).join(", ") : "nothing (all weights are 0)";
      return h("li", { text: `“${show(k.queries[i], 40)}” attends most to ${text}` });
    });
    description.replaceChildren(
      h("p", { text: `${k.label}, layer ${s.layer}, ${headName(s, s.head)}: ${k.queries.length} query tokens, ` +
        `${k.keys.length} key tokens. For each query, the keys with the largest weights:` }),
      h("ol", { start: 0 }, ...items));
  }

  // The active row (hover or focus): highlighted in the map and the lines, its weights as numbers.
  function highlight(s) {
    const { k, matrix } = s;
    const r = ui.active;
    rows.forEach((tr, i) => tr.classList.toggle("tlx-active", i === r));
    table.classList.toggle("tlx-has-active", r !== null);
    matrix.forEach((row, i) => row.forEach((v, j) => {
      const num = v === 0 ? "0" : fmt(v, s).replace(/^0(?=\.)/, ""); // ".25": fits a cell
      cells[i][j].textContent = i === r && root.classList.contains("tlx-numbers") ? num : "";
      cells[i][j].classList.toggle("tlx-current", i === r && j === ui.col);
    }));
    qLabels.forEach((t, i) => t.classList.toggle("tlx-active", i === r));
    // lines
    const yq = JSON.parse(svg.dataset.yq), yk = JSON.parse(svg.dataset.yk);
    const lines = [];
    matrix.forEach((row, i) => row.forEach((v, j) => {
      if (v < 0.01) return;
      const on = r === null || i === r;
      lines.push(h("svg:line", {
        x1: LINE_X.left, y1: yq[i], x2: LINE_X.right, y2: yk[j], class: on ? "tlx-line" : "tlx-line tlx-dim",
        "stroke-opacity": (on ? (r === null ? 0.85 : 1) : 0.06) * v,
        "stroke-width": r !== null && i === r ? 1 + 4 * v : 0.5 + 2.5 * v, "data-row": i, "data-col": j, "data-weight": v,
      }));
    }));
    lineGroup.replaceChildren(...lines);
    kLabels.forEach((t, j) => {
      t.classList.toggle("tlx-strong", r !== null && matrix[r][j] >= 0.1);
    });
    // numbers
    if (r === null) {
      readout.replaceChildren(h("span", { class: "tlx-hint",
        text: "Point at a row of the map or a query token (or move there with the keyboard) to see its weights." }));
      readout.dataset.row = "";
      return;
    }
    readout.dataset.row = r;
    readout.replaceChildren(h("span", { class: "tlx-readout-q", text: `query ${quoted(k.queries, r)} attends to:` }),
      ...matrix[r].map((v, j) => h("span", { class: j === ui.col ? "tlx-w tlx-current" : "tlx-w",
        "data-col": j, text: `${show(k.keys[j])} ${fmt(v, s)}` })));
  }

  // ---- redraw scheduling -------------------------------------------------------------------
  let pending = false;
  function redraw() {
    if (pending) return;
    pending = true;
    queueMicrotask(() => {
      pending = false;
      const s = get();
      if (!s) {
        root.replaceChildren(h("p", { text: "No attention weights to show." }));
        return;
      }
      if (!ui.built || ui.built.data !== s.data || ui.built.kind !== s.k.id) {
        ui.active = null;
        build(s);
      }
      paint(s);
    });
  }

  // r: the active query row (null for none); col: the key column under the pointer or focus, if any
  function setActive(r, col = null) {
    if (ui.active === r && ui.col === col) return;
    ui.active = r;
    ui.col = col;
    const s = get();
    if (s) highlight(s);
  }

  // ---- events ------------------------------------------------------------------------------
  kindSel.addEventListener("change", () => {
    const s = get();
    const k = s.kinds.find((x) => x.id === kindSel.value);
    choose(k.id, Math.min(s.layer, k.n_layers - 1), Math.min(s.head, k.n_heads - 1));
  });
  layerSel.addEventListener("change", () => { const s = get(); choose(s.k.id, Number(layerSel.value), s.head); });
  headSel.addEventListener("change", () => { const s = get(); choose(s.k.id, s.layer, Number(headSel.value)); });

  const cellOf = (e) => e.target.closest && e.target.closest("td[data-row]");
  table.addEventListener("mouseover", (e) => {
    const td = cellOf(e);
    const th = e.target.closest && e.target.closest("tbody th");
    if (td) setActive(Number(td.dataset.row), Number(td.dataset.col));
    else if (th) setActive(Number(th.parentNode.dataset.row));
  });
  const leave = () => {
    const f = document.activeElement;
    if (f && root.contains(f) && f.dataset && f.dataset.row !== undefined && !f.classList.contains("tlx-thumb")) {
      setActive(Number(f.dataset.row), f.tagName === "TD" ? Number(f.dataset.col) : null);
    } else setActive(null);
  };
  table.addEventListener("mouseleave", leave);
  table.addEventListener("focusin", (e) => {
    const td = cellOf(e);
    if (!td) return;
    cells.flat().forEach((c) => { c.tabIndex = c === td ? 0 : -1; });
    ui.cell = [Number(td.dataset.row), Number(td.dataset.col)];
    setActive(ui.cell[0], ui.cell[1]);
  });
  table.addEventListener("focusout", (e) => { if (!table.contains(e.relatedTarget)) setTimeout(leave); });
  table.addEventListener("keydown", (e) => {
    const td = cellOf(e);
    if (!td) return;
    let [r, c] = [Number(td.dataset.row), Number(td.dataset.col)];
    const nq = cells.length, nk = cells[0].length;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (moves[e.key]) { r += moves[e.key][0]; c += moves[e.key][1]; }
    else if (e.key === "Home") c = 0;
    else if (e.key === "End") c = nk - 1;
    else if (e.key === "PageUp") r = 0;
    else if (e.key === "PageDown") r = nq - 1;
    else return;
    e.preventDefault();
    r = Math.max(0, Math.min(nq - 1, r)); c = Math.max(0, Math.min(nk - 1, c));
    cells[r][c].focus();
  });

  const qOf = (e) => e.target.closest && e.target.closest("text.tlx-q");
  svg.addEventListener("mouseover", (e) => { const q = qOf(e); if (q) setActive(Number(q.dataset.row)); });
  svg.addEventListener("mouseleave", leave);
  svg.addEventListener("focusin", (e) => {
    const q = qOf(e);
    if (!q) return;
    qLabels.forEach((t) => t.setAttribute("tabindex", t === q ? 0 : -1));
    setActive(Number(q.dataset.row));
  });
  svg.addEventListener("focusout", (e) => { if (!svg.contains(e.relatedTarget)) setTimeout(leave); });
  svg.addEventListener("keydown", (e) => {
    const q = qOf(e);
    if (!q) return;
    const step = { ArrowUp: -1, ArrowDown: 1, ArrowLeft: -1, ArrowRight: 1 }[e.key];
    if (step === undefined) return;
    e.preventDefault();
    const i = Math.max(0, Math.min(qLabels.length - 1, Number(q.dataset.row) + step));
    qLabels[i].focus();
  });

  grid.addEventListener("keydown", (e) => {
    const b = e.target.closest && e.target.closest("button.tlx-thumb");
    if (!b) return;
    const s = get();
    const move = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[e.key];
    if (!move) return;
    e.preventDefault();
    // the grid's first column: the mean (-1), or head 0 when there is a single head and no mean
    const first = s.k.total_heads > 1 ? -1 : 0;
    const l = Math.max(0, Math.min(s.k.n_layers - 1, Number(b.dataset.layer) + move[0]));
    const hd = Math.max(first, Math.min(s.k.n_heads - 1, Number(b.dataset.head) + move[1]));
    const next = thumbs.find((t) => t.layer === l && t.head === hd);
    if (!next) return;
    thumbs.forEach((t) => { t.button.tabIndex = t === next ? 0 : -1; });
    next.button.focus();
  });

  // Keys the explorer uses stay in it: notebook front ends (JupyterLab, Notebook 7) read keys
  // on the document for their own shortcuts ("a" inserts a cell, arrows move between cells).
  const OWN_KEYS = new Set(["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End", "PageUp", "PageDown",
    "Enter", " "]);
  root.addEventListener("keydown", (e) => {
    if (e.target === textBox || (OWN_KEYS.has(e.key) && !e.shiftKey && !e.ctrlKey && !e.metaKey && !e.altKey)) {
      e.stopPropagation();
    }
  });

  // ---- live input: with a kernel (it answers "hello" with "live"), or in the browser ----------
  const browser = model.get("_browser");
  let busy = false;
  function say(text, error = false) {
    status.textContent = text;
    status.classList.toggle("tlx-error", error);
  }
  async function runInBrowser(text) {
    const read = readText(text, browser);
    if (read.error) {
      say(read.error, true);
      form.dataset.runs = String(Number(form.dataset.runs || 0) + 1);
      return;
    }
    busy = true;
    runButton.disabled = true;
    answerLine.hidden = true;
    try {
      const first = !LOADED.has(absolute(browser.manifest));
      say(first ? `downloading the model and onnxruntime-web (${megabytes(browser.bytes)})…` : "running…");
      const live = await withTimeout(loadModel(browser), LOAD_SECONDS, "Loading the model");
      say("running…");
      const run = browser.kind === "causal-lm" ? runLM : runDates;
      const result = await withTimeout(run(live, read), RUN_SECONDS, "The run");
      const prefix = browser.kind === "causal-lm" ? "Your prompt" : "Your input";
      model.set("data", { version: 1, title: `${prefix}: “${text}” (computed in your browser)`, decimals: 3,
        kinds: result.kinds, notes: result.notes });
      answerLine.textContent = result.text;
      answerLine.dataset.answer = result.answer;
      answerLine.hidden = false;
      runButton.textContent = "Run";
      say("");
    } catch (err) {
      say(`Could not run the model here: ${err && err.message ? err.message : err}`, true);
    } finally {
      busy = false;
      runButton.disabled = false;
      form.dataset.runs = String(Number(form.dataset.runs || 0) + 1); // finished runs (the tests wait on it)
    }
  }
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (browser) {
      if (!busy) runInBrowser(textBox.value);
      return;
    }
    say("running…");
    model.send({ type: "text", text: textBox.value });
  });
  if (browser) {
    form.hidden = false;
    textBox.placeholder = browser.placeholder || "";
    textBox.setAttribute("aria-label", browser.kind === "causal-lm" ? "Your prompt" : "Your date");
    runButton.textContent = `Run in your browser (downloads ${megabytes(browser.bytes)})`;
    liveNote.textContent = `${browser.about} The first run downloads onnxruntime-web and the model ` +
      `(${megabytes(browser.bytes)}) from this site; nothing leaves your browser.`;
    liveNote.hidden = false;
  }
  const onMessage = (msg) => {
    if (!msg || typeof msg !== "object") return;
    if (msg.type === "live") form.hidden = false;
    else if (msg.type === "done") say("");
    else if (msg.type === "error") say(msg.message, true);
  };
  const hello = () => {
    if (browser) return; // the browser computes: no kernel to greet
    textBox.placeholder = model.get("text_placeholder") || "";
    if (model.get("text_input")) model.send({ type: "hello" });
  };

  const listeners = [
    ["change:data", redraw], ["change:kind", redraw], ["change:layer", redraw], ["change:head", redraw],
    ["change:text_input", hello], ["msg:custom", onMessage],
  ];
  for (const [event, fn] of listeners) model.on(event, fn);
  redraw();
  hello();
  return () => {
    for (const [event, fn] of listeners) model.off(event, fn);
  };
}

export default { render };
