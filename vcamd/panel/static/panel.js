// FaceLive Camera control page: polls /api/status once a second, sends changes as POSTs.
// The access token travels in an HttpOnly cookie this script never sees; the browser adds the
// Origin header to every POST, which is how the daemon tells this page from any other.
"use strict";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
let shownFace = null;

function text(v, digits, unit) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return (digits === undefined ? String(v) : v.toFixed(digits)) + (unit || "");
  return String(v);
}

function latency(status, key) {
  const l = status.latency_ms;
  if (l && typeof l === "object") return l[key];
  return typeof l === "number" ? l : null;
}

function providers(v) {
  if (!v) return "–";
  if (Array.isArray(v)) return v.join(", ") || "–";
  if (typeof v === "object") return Object.entries(v).map(([file, p]) => file + ": " + p).join("\n") || "–";
  return String(v);
}

// What each model runs at ("float" or "int8"), and why where the daemon says (precision_why).
function precision(s) {
  const runs = s.precision, why = s.precision_why || {};
  if (!runs || typeof runs !== "object") return "–";
  return Object.entries(runs).map(([model, p]) => model + ": " + p + (why[model] ? " — " + why[model] : "")).join("\n") || "–";
}

function server(v) {
  // [models] server: the Triton server the swap runs on (vcamd.remote.summary.describe_server says the same in the terminal).
  if (!v || typeof v !== "object") return "here (no Triton server)";
  const parts = [v.url + " " + v.state];
  if (typeof v.rtt_ms === "number") parts.push(v.rtt_ms.toFixed(1) + " ms round trip");
  if (typeof v.call_ms === "number") parts.push(v.call_ms.toFixed(1) + " ms a call");
  parts.push(v.tls ? "mutual TLS" : "loopback, plaintext");
  if (Array.isArray(v.serves) && v.serves.length) parts.push("serves " + v.serves.join(", "));
  if (v.state !== "up" && v.error) parts.push(String(v.error));
  if (v.fallback) parts.push("fallback " + v.fallback);
  return parts.join("; ");
}

function frames(f) {
  if (!f || typeof f !== "object") return "–";
  return ["published", "swapped", "held", "blurred", "passthrough", "dropped"]
    .filter((k) => typeof f[k] === "number").map((k) => f[k] + " " + k).join(", ") || "–";
}

function say(message, bad) {
  const m = $("message");
  m.textContent = message;
  m.className = bad ? "message bad" : "message";
}

async function api(path, options) {
  const r = await fetch(path, Object.assign({ cache: "no-store", credentials: "same-origin" }, options || {}));
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON: use the status below */ }
  if (!r.ok) throw new Error((body && body.error) || ("HTTP " + r.status + " " + r.statusText));
  return body;
}

function post(path, json) {
  const options = { method: "POST" };
  if (json !== undefined) {
    options.headers = { "Content-Type": "application/json" };
    options.body = JSON.stringify(json);
  }
  return api(path, options);
}

async function act(request, done) {
  try {
    const state = await request();
    render(state);
    say(typeof done === "function" ? done(state) : (done || ""), false);
  } catch (e) {
    say(e.message, true);
  }
}

function render(state) {
  const s = state.status || {};
  const on = s.enabled === true;
  $("swap-state").textContent = on ? "swap on" : "swap off";
  $("swap-state").className = on ? "pill on" : "pill";
  const swap = $("swap");
  swap.textContent = on ? "Swap off" : "Swap on";
  swap.className = on ? "big on" : "big";
  swap.dataset.enabled = String(on);

  const quality = $("quality");
  if (quality.options.length !== (state.qualities || []).length) {
    quality.innerHTML = "";
    for (const q of state.qualities || []) quality.add(new Option(q === "auto" ? "auto (watchdog decides)" : q, q));
  }
  if (document.activeElement !== quality) quality.value = s.quality || "auto";
  if (document.activeElement !== $("badge")) $("badge").checked = state.badge === true;

  $("state").textContent = text(s.state);
  $("camera").textContent = text(s.camera);
  $("level").textContent = text(s.level);
  $("fps").textContent = text(s.fps, 1);
  $("latency-p50").textContent = text(latency(s, "p50"), 1, " ms");
  $("latency-p95").textContent = text(latency(s, "p95"), 1, " ms");
  $("frames").textContent = frames(s.frames);
  $("providers").textContent = providers(s.providers);
  $("precision").textContent = precision(s);
  $("server").textContent = server(s.server);

  const err = $("config-error");
  err.hidden = !s.config_error;
  err.textContent = s.config_error ? "Config problem: " + s.config_error : "";
  renderNeeds(Array.isArray(s.swap_needs) ? s.swap_needs : [], on);

  renderModels(s);

  const face = s.source_face ? String(s.source_face).split(/[\\/]/).pop() : "none";
  $("face-current").textContent = face + pickNote(s);
  renderRecent(state.recent_faces || []);
  // The server lists the levels in ladder order, best quality first (vcamd.common.quality).
  renderTransitions(state.transitions || [], (state.qualities || []).filter((q) => q !== "auto"));
  drawChart(state.history || [], state.history_span_s || 60);
}

// The swapper and enhancer choices: the manifest's models of each role (one not downloaded yet is
// listed but disabled: `vcamd models pull NAME` first); the running one selected, the one loading
// said beside it.
function renderModels(s) {
  const models = s.models || {};
  const choices = s.model_choices || {};
  for (const role of ["swapper", "enhancer"]) {
    const select = $("model-" + role);
    const list = choices[role] || [];
    const running = models[role];
    const key = JSON.stringify([list, running]);
    if (select.dataset.key !== key) {
      select.dataset.key = key;
      select.innerHTML = "";
      const names = list.map((c) => c.name);
      if (running && !names.includes(running)) select.add(new Option(String(running).split(/[\\/]/).pop(), running));
      for (const c of list) {
        const option = new Option(c.present ? c.name : c.name + " (not downloaded)", c.name);
        option.disabled = !c.present;
        option.title = c.license;
        select.add(option);
      }
    }
    if (document.activeElement !== select && running) select.value = running;
  }
  const swapper = (choices.swapper || []).find((c) => c.name === models.swapper);
  $("model-licence").textContent = (swapper ? swapper.name + ": " + swapper.license : "–")
    + (models.loading ? " · loading " + models.loading + "…" : "");
}

// What swapping still needs (the models, consent, a source face), each with its fix: "on" is
// refused with the same list.
function renderNeeds(needs, on) {
  const box = $("swap-needs");
  box.hidden = !needs.length;
  $("swap-needs-title").textContent = on ? "Swapping is on, every face covered, until it has:" : "Swapping stays off until it has:";
  const key = JSON.stringify(needs);
  if (box.dataset.key === key) return;  // unchanged: keep the user's text selection
  box.dataset.key = key;
  const list = $("swap-needs-list");
  list.innerHTML = "";
  for (const need of needs) {
    const li = document.createElement("li");
    li.appendChild(document.createTextNode(String(need.what || need.label || "?") + " — "));
    const fix = document.createElement("span");
    fix.className = "fix";
    fix.textContent = String(need.fix || "");
    li.appendChild(fix);
    list.appendChild(li);
  }
}

// A group photo: which of its faces was taken (the largest), as the engine says.
function pickNote(s) {
  return s && s.source_face_pick ? " — " + s.source_face_pick : "";
}

function renderRecent(faces) {
  const key = faces.map((f) => f.path).join("\n");
  if (key === shownFace) return;  // do not reset the user's choice on every poll
  shownFace = key;
  const select = $("recent");
  const chosen = select.value;
  select.innerHTML = "";
  select.add(new Option(faces.length ? "recent faces…" : "no recent faces", ""));
  for (const f of faces) select.add(new Option(f.name, f.path));
  select.value = faces.some((f) => f.path === chosen) ? chosen : "";
}

function renderTransitions(list, ladder) {
  const ol = $("transitions");
  ol.innerHTML = "";
  if (!list.length) {
    const li = document.createElement("li");
    li.className = "none";
    li.textContent = "no quality changes yet";
    ol.appendChild(li);
    return;
  }
  for (const t of list.slice().reverse()) {
    const li = document.createElement("li");
    const faces = t.faces_per_round || null;  // the faces swapped per round changed, not the rung
    const down = faces ? faces.to !== "all" : ladder.indexOf(t.to) > ladder.indexOf(t.from);  // a step down
    li.className = down ? "down" : "up";
    const trig = t.trigger || {};
    const after = t.after || null;
    let line = faces ? `faces per round ${faces.from} → ${faces.to} · ${t.reason}` : `${t.from} → ${t.to} · ${t.reason}`;
    if (typeof trig.p95_ms === "number") line += ` · p95 ${trig.p95_ms.toFixed(1)} ms`;
    if (typeof trig.over_budget_share === "number") line += `, ${(trig.over_budget_share * 100).toFixed(0)}% over budget`;
    if (typeof trig.swap_age_p95_ms === "number") line += `, face p95 ${(trig.swap_age_p95_ms / 1000).toFixed(1)} s old`;
    if (after && typeof after.p95_ms === "number") line += ` → after: p95 ${after.p95_ms.toFixed(1)} ms`;
    li.textContent = line;
    ol.appendChild(li);
  }
}
function drawChart(history, span) {
  $("chart-title").textContent = span === 60 ? "Last minute" : `Last ${+span.toFixed(1)} s`;
  const canvas = $("chart");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, left = 38, right = 44, top = 10, bottom = 22;
  ctx.clearRect(0, 0, w, h);
  const x = (age) => left + (w - left - right) * (1 - Math.min(age, span) / span);
  const series = (key) => history.filter((p) => typeof p[key] === "number").map((p) => [p.age_s, p[key]]);
  const fps = series("fps"), p50 = series("latency_p50_ms"), p95 = series("latency_p95_ms");
  const steps = 5;  // grid lines; the maxima are rounded so every line has a round label
  const fpsMax = Math.ceil(Math.max(30, ...fps.map((p) => p[1])) / 10) * 10;
  const msMax = Math.ceil(Math.max(50, ...p95.map((p) => p[1]), ...p50.map((p) => p[1])) / 25) * 25;
  const y = (v, max) => top + (h - top - bottom) * (1 - v / max);

  ctx.strokeStyle = "#2a2e37"; ctx.fillStyle = "#9aa1ad"; ctx.font = "11px system-ui, sans-serif"; ctx.lineWidth = 1;
  for (let i = 0; i <= steps; i++) {
    const yy = top + (h - top - bottom) * i / steps;
    ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(w - right, yy); ctx.stroke();
    ctx.textAlign = "right"; ctx.fillText((fpsMax * (1 - i / steps)).toFixed(0), left - 4, yy + 4);
    ctx.textAlign = "left"; ctx.fillText((msMax * (1 - i / steps)).toFixed(0) + " ms", w - right + 4, yy + 4);
  }
  ctx.textAlign = "center";
  for (const part of [1, 0.75, 0.5, 0.25, 0]) {
    const age = span * part;
    ctx.fillText(age ? `-${+age.toFixed(1)} s` : "now", x(age), h - 6);
  }

  const line = (points, max, color) => {
    if (!points.length) return;
    ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
    points.forEach(([age, v], i) => (i ? ctx.lineTo(x(age), y(v, max)) : ctx.moveTo(x(age), y(v, max))));
    ctx.stroke();
  };
  const css = getComputedStyle(document.documentElement);
  line(fps, fpsMax, css.getPropertyValue("--fps").trim() || "#3fb26f");
  line(p50, msMax, css.getPropertyValue("--p50").trim() || "#4c9be8");
  line(p95, msMax, css.getPropertyValue("--p95").trim() || "#e0a030");
}

async function poll() {
  const conn = $("conn");
  try {
    render(await api("/api/status"));
    conn.textContent = "live";
    conn.className = "conn";
  } catch (e) {
    conn.textContent = "daemon not reachable (" + e.message + ")";
    conn.className = "conn bad";
  }
}

function wire() {
  $("swap").addEventListener("click", () => {
    const on = $("swap").dataset.enabled === "true";
    act(() => post(on ? "/api/off" : "/api/on"), on ? "swapping off: the camera passes through" : "swapping on");
  });
  $("quality").addEventListener("change", (ev) => act(() => post("/api/quality", { level: ev.target.value }), "quality set"));
  for (const role of ["swapper", "enhancer"]) {
    $("model-" + role).addEventListener("change", (ev) => act(() => post("/api/model", { role: role, name: ev.target.value }),
      ev.target.value + " loading; the current " + role + " swaps until it is ready"));
  }
  $("badge").addEventListener("change", (ev) => act(() => post("/api/badge", { on: ev.target.checked }),
    ev.target.checked ? "badge shown" : "badge hidden"));
  const consentNeeded = () => {
    const given = $("consent").checked;
    $("face-upload").disabled = !given || !$("face-file").files.length;
    $("face-recent").disabled = !given || !$("recent").value;
  };
  for (const id of ["consent", "face-file", "recent"]) $(id).addEventListener("change", consentNeeded);
  consentNeeded();
  $("face-upload").addEventListener("click", () => {
    const file = $("face-file").files[0];
    if (!file) return;
    act(() => api("/api/face?consent=yes&name=" + encodeURIComponent(file.name), {
      method: "POST", headers: { "Content-Type": file.type || "application/octet-stream" }, body: file,
    }), (state) => "source face set: " + file.name + pickNote(state.status));
  });
  $("face-recent").addEventListener("click", () => {
    const path = $("recent").value;
    if (path) act(() => post("/api/face", { recent: path, consent: $("consent").checked }),
      (state) => "source face set" + pickNote(state.status));
  });
  const video = $("video");
  video.addEventListener("load", () => { $("video-wait").hidden = true; });
  // If the daemon restarts, the stream ends: reconnect instead of leaving a broken image.
  video.addEventListener("error", () => {
    $("video-wait").hidden = false;
    setTimeout(() => { video.src = "/stream.mjpg?t=" + Date.now(); }, 1000);
  });
}

wire();
poll();
setInterval(poll, POLL_MS);
