// graft serve's web page: a chat over /v1/chat/completions (streamed), a slider per adapter sent as
// the request's `lora`, base vs adapted answers side by side, /props, and tokens/s. Plain browser
// JavaScript, no framework, no build step; it talks only to the server that served it.
'use strict';

const $ = (id) => document.getElementById(id);
const SCALE_MIN = -1, SCALE_MAX = 2, SCALE_STEP = 0.05;

const state = {
  adapters: [],        // [{id, name, path, rank, scale}] from /lora-adapters; scale = the slider's
  history: [],         // [{role, content}] of the chat so far
  chatAbort: null,     // AbortController of the chat stream in flight
  compareAbort: null,  // AbortController of the two compare streams
  live: new Set(),     // meters of the streams in flight, for the header's tokens/s
  propsLoaded: false,
};

// ---- server access --------------------------------------------------------------------------

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api-key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// The server's typed error body {"error": {code, message, type}} as an Error.
function serverError(status, body) {
  const e = body && body.error;
  const err = new Error(e && e.message ? e.message : 'HTTP ' + status);
  err.type = (e && e.type) || 'http_error';
  err.status = (e && e.code) || status;
  return err;
}

async function getJSON(path) {
  const r = await fetch(path, { headers: headers() });
  const body = await r.json().catch(() => null);
  if (!r.ok) throw serverError(r.status, body);
  return body;
}

// Streams one chat completion; onText gets each piece of text. Resolves to {timings, finish,
// usage}; `timings` is the server's (llama-server's shape) from the usage chunk, when sent.
async function streamChat(messages, lora, onText, signal) {
  const body = Object.assign({ messages, stream: true, stream_options: { include_usage: true } }, sampling());
  if (lora) body.lora = lora;
  const r = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal });
  if (!r.ok) throw serverError(r.status, await r.json().catch(() => null));
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  const out = { timings: null, finish: null, usage: null };
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return out;
        const chunk = JSON.parse(data);
        if (chunk.error) throw serverError(chunk.error.code, chunk);
        if (chunk.timings) out.timings = chunk.timings;
        if (chunk.usage) out.usage = chunk.usage;
        for (const c of chunk.choices || []) {
          if (c.delta && typeof c.delta.content === 'string' && c.delta.content) onText(c.delta.content);
          if (c.finish_reason) out.finish = c.finish_reason;
        }
      }
    }
  }
  return out;
}

// ---- settings ---------------------------------------------------------------------------------

function sampling() {
  const s = {};
  const t = parseFloat($('temperature').value);
  if (!Number.isNaN(t)) s.temperature = t;
  const n = parseInt($('max-tokens').value, 10);
  if (!Number.isNaN(n)) s.max_tokens = n;
  const seed = parseInt($('seed').value, 10);
  if (!Number.isNaN(seed)) s.seed = seed;
  return s;
}

// Every adapter listed explicitly: the sliders' scales, or all 0 for the base.
function loraList(base) {
  if (!state.adapters.length) return null;
  return state.adapters.map((a) => ({ id: a.id, scale: base ? 0 : a.scale }));
}

function scalesLabel() {
  if (!state.adapters.length) return 'no adapters loaded';
  return state.adapters.map((a) => a.name + ' ' + a.scale.toFixed(2)).join(', ');
}

function clampScale(v) {
  if (Number.isNaN(v)) return 0;
  return Math.min(SCALE_MAX, Math.max(SCALE_MIN, v));
}

function renderAdapters() {
  const box = $('adapters');
  box.replaceChildren();
  if (!state.adapters.length) {
    const p = document.createElement('p');
    p.className = 'hint';
    p.textContent = 'No adapters loaded (start graft serve with --lora).';
    box.append(p);
  }
  for (const a of state.adapters) {
    const wrap = document.createElement('div');
    wrap.className = 'adapter';
    wrap.dataset.id = a.id;
    const label = document.createElement('label');
    label.htmlFor = 'lora-' + a.id;
    label.textContent = a.name;
    const meta = document.createElement('div');
    meta.className = 'meta';
    meta.textContent = 'id ' + a.id + (a.rank ? ' · rank ' + a.rank : '');
    wrap.title = a.path;
    const row = document.createElement('div');
    row.className = 'row';
    const range = document.createElement('input');
    Object.assign(range, { type: 'range', id: 'lora-' + a.id, min: SCALE_MIN, max: SCALE_MAX, step: SCALE_STEP });
    range.setAttribute('list', 'scale-ticks');
    range.value = a.scale;
    const num = document.createElement('input');
    Object.assign(num, { type: 'number', id: 'lora-' + a.id + '-value', min: SCALE_MIN, max: SCALE_MAX, step: SCALE_STEP });
    num.setAttribute('aria-label', a.name + ' scale');
    num.value = a.scale.toFixed(2);
    range.addEventListener('input', () => {
      a.scale = clampScale(parseFloat(range.value));
      num.value = a.scale.toFixed(2);
      $('adapted-scales').textContent = scalesLabel();
    });
    num.addEventListener('change', () => {
      if (num.value.trim() === '') return;  // cleared to type a new value: keep the scale meanwhile
      a.scale = clampScale(parseFloat(num.value));
      num.value = a.scale.toFixed(2);
      range.value = a.scale;
      $('adapted-scales').textContent = scalesLabel();
    });
    row.append(range, num);
    wrap.append(label, row, meta);
    box.append(wrap);
  }
  $('adapted-scales').textContent = scalesLabel();
}

async function loadAdapters() {
  const list = await getJSON('/lora-adapters');
  const kept = new Map(state.adapters.map((a) => [a.id, a.scale]));  // a reload keeps moved sliders
  state.adapters = list.map((a) => ({
    id: a.id,
    name: a.name || (a.path || '').split('/').filter(Boolean).pop() || 'adapter ' + a.id,
    path: a.path || '',
    rank: a.rank || 0,
    scale: clampScale(kept.has(a.id) ? kept.get(a.id) : Number(a.scale)),
  }));
  renderAdapters();
}

async function loadProps() {
  const p = await getJSON('/props');
  const g = p.default_generation_settings || {};
  const rows = [
    ['model', p.model_alias],
    ['file', (p.model_path || '').split('/').pop()],
    ['context / slot', g.n_ctx],
    ['slots', p.total_slots],
    ['KV cache', p.cache_type],
    ['adapter factors', p.lora_dtype],
    ['build', p.build_info],
  ];
  const dl = $('props');
  dl.replaceChildren();
  for (const [k, v] of rows) {
    if (v === undefined || v === null || v === '') continue;
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = String(v);
    if (k === 'file') dd.title = p.model_path;
    dd.dataset.key = k;
    dl.append(dt, dd);
  }
  $('chat-template').textContent = p.chat_template || '(none)';
  $('model').textContent = p.model_alias || p.model_path || '';
  // The server's default temperature, once (later reloads keep what the user typed).
  if (!state.propsLoaded && g.params && typeof g.params.temperature === 'number')
    $('temperature').value = g.params.temperature;
  state.propsLoaded = true;
}

async function refresh() {
  try {
    await Promise.all([loadProps(), loadAdapters()]);
    setStatus('ready', 'ready');
  } catch (e) {
    showError(e);
    setStatus('error', e.status === 401 ? 'API key needed' : 'error');
  }
}

// Waits for /health (503 while the model loads), then reads /props and /lora-adapters.
async function connect() {
  for (;;) {
    try {
      const r = await fetch('/health');
      if (r.ok) break;
      setStatus('loading', 'loading model');
    } catch (e) {
      setStatus('error', 'server unreachable');
    }
    await new Promise((res) => setTimeout(res, 1000));
  }
  await refresh();
}

// ---- status, errors, tokens/s ---------------------------------------------------------------

function setStatus(kind, text) {
  const s = $('status');
  s.dataset.state = kind;
  s.textContent = text;
}

function showError(e) {
  const text = e.name === 'TypeError' ? 'network_error: ' + e.message : (e.type || 'error') + ': ' + e.message;
  $('error-text').textContent = text;
  $('error').hidden = false;
}

function clearError() {
  $('error').hidden = true;
  $('error-text').textContent = '';
}

// Tokens/s of one stream: counted here while it runs (one streamed piece ~ one token, timed from
// the first piece, so the prompt's evaluation is not in it); the server's own figure at the end.
class Meter {
  constructor(statsEl) {
    this.el = statsEl;
    this.pieces = 0;
    this.first = 0;
    this.rate = 0;
  }
  piece() {
    const now = performance.now();
    if (!this.pieces) this.first = now;
    this.pieces++;
    const s = (now - this.first) / 1000;
    if (s > 0.05) this.rate = (this.pieces - 1) / s;
    this.el.textContent = this.pieces + ' tokens · ' + this.rate.toFixed(1) + ' tok/s';
    this.el.dataset.source = 'client';
    updateHeaderRate();
  }
  finish(result, how) {
    const t = result && result.timings;
    const parts = [];
    if (t && typeof t.predicted_per_second === 'number') {
      this.rate = t.predicted_per_second;
      parts.push(t.predicted_n + ' tokens', this.rate.toFixed(1) + ' tok/s (server)');
      if (typeof t.prompt_n === 'number') parts.push('prompt ' + t.prompt_n + ' in ' + Math.round(t.prompt_ms) + ' ms');
      this.el.dataset.source = 'server';
    } else {
      parts.push(this.pieces + ' tokens', this.rate.toFixed(1) + ' tok/s');
      this.el.dataset.source = 'client';
    }
    parts.push(how || (result && result.finish) || 'done');
    this.el.textContent = parts.join(' · ');
  }
}

function updateHeaderRate() {
  let sum = 0;
  for (const m of state.live) sum += m.rate;
  $('rate').textContent = sum.toFixed(1);
}

// One stream into one element: text, meter, state. Resolves to {text, state}.
async function runStream(messages, lora, contentEl, statsEl, holder, signal) {
  const meter = new Meter(statsEl);
  state.live.add(meter);
  holder.dataset.state = 'streaming';
  let text = '';
  try {
    const result = await streamChat(messages, lora, (piece) => {
      text += piece;
      contentEl.textContent = text;
      meter.piece();
      scrollToEnd();
    }, signal);
    meter.finish(result);
    holder.dataset.state = 'done';
    return { text, state: 'done' };
  } catch (e) {
    if (e.name === 'AbortError') {
      meter.finish(null, 'stopped');
      holder.dataset.state = 'stopped';
      return { text, state: 'stopped' };
    }
    holder.dataset.state = 'error';
    statsEl.textContent = e.type ? e.type : 'error';
    throw e;
  } finally {
    updateHeaderRate();
    state.live.delete(meter);
  }
}

function scrollToEnd() {
  const m = $('messages');
  m.scrollTop = m.scrollHeight;
}

// ---- chat -------------------------------------------------------------------------------------

function addMessage(role, content, note) {
  const li = document.createElement('li');
  li.className = 'message ' + role;
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = role === 'user' ? 'You' : 'Assistant' + (note ? ' · ' + note : '');
  const body = document.createElement('div');
  body.className = 'content';
  body.textContent = content;
  li.append(who, body);
  if (role === 'assistant') {
    const stats = document.createElement('p');
    stats.className = 'stats';
    li.append(stats);
  }
  $('messages').append(li);
  scrollToEnd();
  return li;
}

function systemMessages() {
  const s = $('system').value.trim();
  return s ? [{ role: 'system', content: s }] : [];
}

function setChatBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  setStatus(busy ? 'busy' : 'ready', busy ? 'generating' : 'ready');
}

async function sendChat() {
  const input = $('chat-input');
  const prompt = input.value;
  if (!prompt.trim() || state.chatAbort) return;
  clearError();
  input.value = '';
  const userLi = addMessage('user', prompt);
  const li = addMessage('assistant', '', scalesLabel());
  const messages = systemMessages().concat(state.history, [{ role: 'user', content: prompt }]);
  state.chatAbort = new AbortController();
  setChatBusy(true);
  try {
    const r = await runStream(messages, loraList(false), li.querySelector('.content'), li.querySelector('.stats'), li,
                              state.chatAbort.signal);
    state.history.push({ role: 'user', content: prompt }, { role: 'assistant', content: r.text });
  } catch (e) {
    // The turn did not happen: off the history, its text back in the box.
    userLi.dataset.state = 'error';
    input.value = prompt;
    showError(e);
  } finally {
    state.chatAbort = null;
    setChatBusy(false);
  }
}

function newChat() {
  if (state.chatAbort) state.chatAbort.abort();
  state.history = [];
  $('messages').replaceChildren();
  clearError();
  $('chat-input').focus();
}

// ---- base vs adapted --------------------------------------------------------------------------

async function sendCompare() {
  const prompt = $('compare-input').value;
  if (!prompt.trim() || state.compareAbort) return;
  clearError();
  const messages = systemMessages().concat([{ role: 'user', content: prompt }]);
  state.compareAbort = new AbortController();
  $('compare-send').disabled = true;
  $('compare-stop').disabled = false;
  setStatus('busy', 'generating');
  $('adapted-scales').textContent = scalesLabel();
  const sides = [['compare-base', true], ['compare-adapted', false]].map(([id, base]) => {
    const el = $(id);
    el.textContent = '';
    $(id + '-stats').textContent = '';
    // Both at once: the server batches them into the same forward passes.
    return runStream(messages, loraList(base), el, $(id + '-stats'), el, state.compareAbort.signal);
  });
  const results = await Promise.allSettled(sides);
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) showError(failed.reason);
  state.compareAbort = null;
  $('compare-send').disabled = false;
  $('compare-stop').disabled = true;
  setStatus('ready', 'ready');
}

// ---- wiring -----------------------------------------------------------------------------------

function selectTab(which) {
  for (const [tab, panel] of [['tab-chat', 'chat-panel'], ['tab-compare', 'compare-panel']]) {
    const on = tab === which;
    $(tab).setAttribute('aria-selected', String(on));
    $(tab).tabIndex = on ? 0 : -1;
    $(panel).hidden = !on;
  }
  $(which === 'tab-chat' ? 'chat-input' : 'compare-input').focus();
}

// Enter sends, Shift+Enter is a new line (and nothing is sent mid-composition of an IME).
function enterSends(textarea, form) {
  textarea.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
}

function init() {
  $('chat-form').addEventListener('submit', (e) => { e.preventDefault(); sendChat(); });
  $('compare-form').addEventListener('submit', (e) => { e.preventDefault(); sendCompare(); });
  enterSends($('chat-input'), $('chat-form'));
  enterSends($('compare-input'), $('compare-form'));
  $('stop').addEventListener('click', () => state.chatAbort && state.chatAbort.abort());
  $('compare-stop').addEventListener('click', () => state.compareAbort && state.compareAbort.abort());
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape') return;
    if (state.chatAbort) state.chatAbort.abort();
    if (state.compareAbort) state.compareAbort.abort();
  });
  $('new-chat').addEventListener('click', newChat);
  $('refresh').addEventListener('click', refresh);
  $('adapters-zero').addEventListener('click', () => {
    for (const a of state.adapters) a.scale = 0;
    renderAdapters();
  });
  $('error-close').addEventListener('click', clearError);
  $('tab-chat').addEventListener('click', () => selectTab('tab-chat'));
  $('tab-compare').addEventListener('click', () => selectTab('tab-compare'));
  $('tab-chat').parentElement.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft')
      selectTab($('tab-chat').getAttribute('aria-selected') === 'true' ? 'tab-compare' : 'tab-chat');
  });
  $('key-form').addEventListener('submit', (e) => e.preventDefault());
  const key = $('api-key');
  key.value = sessionStorage.getItem('graft-api-key') || '';
  key.addEventListener('change', () => {
    sessionStorage.setItem('graft-api-key', key.value);
    refresh();
  });
  connect();
}

init();
