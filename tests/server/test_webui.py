"""The web page at / (src/server/web/): its files over HTTP, and the page itself in a real headless
Chromium (Debian's chromium + chromium-driver, driven by selenium) against a real `graft serve`.

The reference for every answer the page shows is the server's own non-streamed
/v1/chat/completions for the same messages, sampling fields and `lora` scales, at temperature 0:
the text must be equal, character for character (the page reassembles the streamed pieces; greedy
tokens are the same alone or batched, docs/SERVER.md). The pirate adapter at scale 1 must change
that answer, so a slider that did nothing, or a `lora` the page forgot to send, fails.

Chromium missing: a loud skip for a developer's ctest, a failure under `make test` (which installs
it and sets GRAFT_REQUIRE_BROWSER) or wherever CI is set.
"""
import gc
import io
import os
import shutil

import pytest
import requests

from conftest import BIN, MLX, PEFT, SRC, Server

WEB = os.path.join(SRC, "src", "server", "web")
PROMPT = "What are the benefits of regular exercise?"
# Short answers keep the test at seconds; tools/webui_screenshot.sh asks for longer ones for docs/.
MAX_TOKENS = int(os.environ.get("GRAFT_WEBUI_MAX_TOKENS", "24"))
SEED = 7
WAIT = float(os.environ.get("GRAFT_START_TIMEOUT", "240"))  # generous under ASan
TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
         "svg": "image/svg+xml"}


@pytest.fixture(scope="module")
def web_server():
    """Two named adapters (default scale 0): id 0 the PEFT pirate, id 1 the mlx one; 2 slots of 512
    tokens, so a long prompt is a typed 400 the page must show."""
    s = Server("--lora", f"pirate={PEFT}", "--lora", f"mlx={MLX}", "--parallel", "2", "--ctx-size", "1024",
               "--alias", "smollm2-web")
    yield s
    assert s.stop() == 0, s.output()


# ---- the files over HTTP (no browser) -----------------------------------------------------------

def test_every_file_served_byte_exact_with_type_and_etag(web_server):
    names = sorted(os.listdir(WEB))
    assert "index.html" in names and "app.js" in names and "style.css" in names
    tags = set()
    for name in names:
        with open(os.path.join(WEB, name), "rb") as f:
            want = f.read()
        r = web_server.get("/web/" + name)
        assert r.status_code == 200, (name, r.text)
        assert r.content == want, name  # the embedded bytes are the source file's
        assert r.headers["Content-Type"] == TYPES[name.rsplit(".", 1)[1]], name
        assert r.headers["Cache-Control"] == "no-cache"
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        tag = r.headers["ETag"]
        assert tag.startswith('"') and tag.endswith('"') and len(tag) == 18, tag
        tags.add(tag)
    assert len(tags) == len(names)  # a tag per content
    with open(os.path.join(WEB, "index.html"), "rb") as f:
        index = f.read()
    for path in ("/", "/index.html"):
        r = web_server.get(path)
        assert r.status_code == 200 and r.content == index
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    # Existing routes are untouched; an unknown asset is the usual typed 404.
    assert web_server.get("/props").json()["model_alias"] == "smollm2-web"
    r = web_server.get("/web/missing.js")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_etag_revalidation(web_server):
    url = web_server.url + "/"
    tag = requests.get(url, timeout=30).headers["ETag"]
    r = requests.get(url, headers={"If-None-Match": tag}, timeout=30)
    assert r.status_code == 304 and r.content == b"" and r.headers["ETag"] == tag
    r = requests.get(url, headers={"If-None-Match": f'"0000000000000000", {tag}'}, timeout=30)
    assert r.status_code == 304
    r = requests.get(url, headers={"If-None-Match": '"0000000000000000"'}, timeout=30)
    assert r.status_code == 200 and r.content


def get_once(url, **kw):
    """One GET on its own connection, closed after it."""
    return requests.get(url, headers={"Connection": "close", **kw.pop("headers", {})}, timeout=30, **kw)


def stop_now(s):
    """Stops a short-lived server. graft serve's stop waits for open keep-alive connections (up to
    their 5 s timeout), and the /health polls of Server() leave one open until the garbage collector
    frees the reference cycle holding it: collect first, and the stop takes 0.2 s instead of 5."""
    gc.collect()
    assert s.stop() == 0


def test_page_needs_no_api_key_but_the_api_does():
    s = Server("--parallel", "1", "--ctx-size", "256", api_key="sekrit")
    try:
        r = get_once(s.url + "/")
        assert r.status_code == 200 and b"/web/app.js" in r.content
        assert get_once(s.url + "/web/app.js").status_code == 200
        r = get_once(s.url + "/props")
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert get_once(s.url + "/props", headers={"Authorization": "Bearer sekrit"}).status_code == 200
    finally:
        stop_now(s)


def test_no_webui_turns_the_page_off():
    s = Server("--no-webui", "--parallel", "1", "--ctx-size", "256")
    try:
        for path in ("/", "/index.html", "/web/app.js"):
            r = get_once(s.url + path)
            assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", path
        assert get_once(s.url + "/health").status_code == 200
    finally:
        stop_now(s)


# ---- the page in Chromium -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    required = os.environ.get("GRAFT_REQUIRE_BROWSER") or os.environ.get("CI")
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    problem = None
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        problem = "the selenium package is not in the test venv (make pyenv installs it)"
    if not chromium or not driver_bin:
        problem = "Chromium or its WebDriver is missing (apt-get install chromium chromium-driver; make test does)"
    if problem:
        if required:
            pytest.fail(problem)
        pytest.skip("BROWSER TEST NOT RUN: " + problem)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start; the page is ours.
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,860",
              "--no-first-run", "--disable-extensions", "--force-color-profile=srgb", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: selenium then never tries to download one.
    d = webdriver.Chrome(service=Service(driver_bin), options=opts)
    d.set_script_timeout(WAIT)
    yield d
    d.quit()


def wait_for(d, js, what, timeout=WAIT):
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda d: d.execute_script(js), what)
    return d.execute_script(js)


def console_errors(d, allowed=()):
    """The console's errors since the last call, less those matching an allowed substring."""
    return [e for e in d.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allowed)]


def open_page(d, server):
    d.get(server.url + "/")
    wait_for(d, "return document.getElementById('status').dataset.state === 'ready'", "the page to connect")
    d.get_log("browser")  # start each test's console check from here


def set_field(d, field_id, value):
    from selenium.webdriver.common.by import By
    el = d.find_element(By.ID, field_id)
    el.clear()
    el.send_keys(str(value))


def greedy_settings(d):
    set_field(d, "temperature", 0)
    set_field(d, "max-tokens", MAX_TOKENS)
    set_field(d, "seed", SEED)


def api_answer(server, pirate, mlx=0.0):
    r = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": PROMPT}], "temperature": 0, "max_tokens": MAX_TOKENS, "seed": SEED,
        "lora": [{"id": 0, "scale": pirate}, {"id": 1, "scale": mlx}]})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


LAST_ANSWER = "document.querySelector('#messages li.assistant:last-of-type')"


def chat(d, prompt):
    """Sends prompt with Enter; returns (text, distinct text lengths seen while it streamed)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    box = d.find_element(By.ID, "chat-input")
    box.send_keys(prompt)
    box.send_keys(Keys.ENTER)
    wait_for(d, f"return {LAST_ANSWER} !== null", "the answer to start")
    # Every text length the answer element passes through, recorded in the page as it changes.
    d.execute_script(f"""
        const li = {LAST_ANSWER}; window.__lengths = [li.querySelector('.content').textContent.length];
        new MutationObserver(() => window.__lengths.push(li.querySelector('.content').textContent.length))
          .observe(li.querySelector('.content'), {{childList: true, characterData: true, subtree: true}});""")
    state = wait_for(d, f"const s = {LAST_ANSWER}.dataset.state; return s !== 'streaming' && s", "the answer to end")
    assert state == "done", state
    text = d.execute_script(f"return {LAST_ANSWER}.querySelector('.content').textContent")
    return text, set(d.execute_script("return window.__lengths"))


def test_page_loads_with_props_and_a_slider_per_adapter(web_server, browser):
    d = browser
    open_page(d, web_server)
    adapters = web_server.get("/lora-adapters").json()
    sliders = d.execute_script("""
        return [...document.querySelectorAll('#adapters .adapter')].map(w => {
          const r = w.querySelector('input[type=range]');
          return {id: Number(w.dataset.id), name: w.querySelector('label').textContent, value: Number(r.value),
                  min: r.min, max: r.max, step: r.step, readout: w.querySelector('input[type=number]').value,
                  labelled: document.querySelector('label[for="' + r.id + '"]') !== null};
        })""")
    assert [(s["id"], s["name"], s["value"]) for s in sliders] == [(a["id"], a["name"], a["scale"]) for a in adapters]
    assert all((s["min"], s["max"], s["step"], s["readout"], s["labelled"]) == ("-1", "2", "0.05", "0.00", True)
               for s in sliders), sliders
    props = web_server.get("/props").json()
    shown = d.execute_script("return Object.fromEntries([...document.querySelectorAll('#props dd')]"
                             ".map(dd => [dd.dataset.key, dd.textContent]))")
    assert shown["model"] == props["model_alias"] == "smollm2-web"
    assert shown["slots"] == str(props["total_slots"]) == "2"
    assert shown["context / slot"] == str(props["default_generation_settings"]["n_ctx"]) == "512"
    assert d.execute_script("return document.getElementById('model').textContent") == "smollm2-web"
    # Every form control has an accessible name.
    unnamed = d.execute_script("""
        return [...document.querySelectorAll('input, textarea, button')].filter(el =>
          !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim()).map(el => el.id)""")
    assert unnamed == []
    assert console_errors(d) == []


def test_chat_streams_and_a_slider_changes_the_next_answer(web_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, web_server)
    greedy_settings(d)
    # Shift+Enter is a new line, not a send.
    box = d.find_element(By.ID, "chat-input")
    box.send_keys("line one", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "line two")
    assert d.execute_script("return document.getElementById('chat-input').value") == "line one\nline two"
    assert d.execute_script("return document.querySelectorAll('#messages li').length") == 0
    box.clear()

    base, lengths = chat(d, PROMPT)
    assert len(lengths) >= 3, lengths  # it streamed in: the text grew in steps, not at once
    assert base == api_answer(web_server, 0.0)
    stats = d.execute_script(f"const s = {LAST_ANSWER}.querySelector('.stats'); return [s.dataset.source, s.textContent]")
    assert stats[0] == "server" and "tok/s (server)" in stats[1], stats  # the final chunk's timings
    assert float(d.execute_script("return document.getElementById('rate').textContent")) > 0

    # A new chat, the pirate slider moved from 0 to 1 with the keyboard (20 steps of 0.05).
    d.find_element(By.ID, "new-chat").click()
    slider = d.find_element(By.ID, "lora-0")
    d.execute_script("arguments[0].focus()", slider)
    d.switch_to.active_element.send_keys(Keys.ARROW_RIGHT * 20)
    assert d.find_element(By.ID, "lora-0-value").get_attribute("value") == "1.00"
    adapted, _ = chat(d, PROMPT)
    assert adapted != base
    assert adapted == api_answer(web_server, 1.0)
    assert "pirate 1.00, mlx 0.00" in d.execute_script(f"return {LAST_ANSWER}.querySelector('.who').textContent")

    # The conversation carries on: the second turn is sent with the first as history.
    second, _ = chat(d, "Say it shorter.")
    r = web_server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": adapted},
                     {"role": "user", "content": "Say it shorter."}],
        "temperature": 0, "max_tokens": MAX_TOKENS, "seed": SEED, "lora": [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.0}]})
    assert second == r.json()["choices"][0]["message"]["content"]
    assert console_errors(d) == []


def check_screenshot(png):
    """Decodes the PNG and checks it is a rendered page, not a blank or uniform one."""
    from PIL import Image
    img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    assert w >= 1000 and h >= 600, img.size
    colors = img.getcolors(maxcolors=w * h)
    dominant = max(c for c, _ in colors) / (w * h)
    assert len(colors) >= 64 and dominant < 0.9, (len(colors), dominant)
    return img


def test_compare_mode_shows_base_and_adapted_side_by_side(web_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, web_server)
    greedy_settings(d)
    # The numeric readout is the slider's other half: typing 1 moves it.
    set_field(d, "lora-0-value", 1)
    d.find_element(By.ID, "lora-0-value").send_keys(Keys.TAB)
    assert d.find_element(By.ID, "lora-0").get_attribute("value") == "1"
    d.find_element(By.ID, "tab-compare").click()
    assert d.find_element(By.ID, "compare-panel").is_displayed()
    assert not d.find_element(By.ID, "chat-panel").is_displayed()
    box = d.find_element(By.ID, "compare-input")
    box.send_keys(PROMPT)
    box.send_keys(Keys.ENTER)
    # Both stream at once (the page fires the two requests together and the server batches them).
    wait_for(d, "return ['compare-base', 'compare-adapted'].every(id => "
                "['done', 'error', 'stopped'].includes(document.getElementById(id).dataset.state))", "both answers")
    base, adapted = d.execute_script("return ['compare-base', 'compare-adapted'].map(id => "
                                     "[document.getElementById(id).dataset.state, document.getElementById(id).textContent])")
    assert base[0] == adapted[0] == "done"
    assert base[1] != adapted[1]
    assert base[1] == api_answer(web_server, 0.0)
    assert adapted[1] == api_answer(web_server, 1.0)
    assert d.find_element(By.ID, "adapted-scales").text == "pirate 1.00, mlx 0.00"
    for side in ("compare-base-stats", "compare-adapted-stats"):
        assert "tok/s (server)" in d.find_element(By.ID, side).text
    assert console_errors(d) == []

    png = d.get_screenshot_as_png()
    check_screenshot(png)
    with open(os.path.join(os.path.dirname(os.path.abspath(BIN)), "webui.png"), "wb") as f:
        f.write(png)
    docs_copy = os.environ.get("GRAFT_WEBUI_SCREENSHOT")  # tools/webui_screenshot.sh: docs/webui.png
    if docs_copy:
        check_screenshot(png).quantize(colors=128).save(docs_copy, optimize=True)


def test_stop_ends_a_stream_and_the_chat_goes_on(web_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, web_server)
    set_field(d, "max-tokens", 400)
    set_field(d, "temperature", 0)
    box = d.find_element(By.ID, "chat-input")
    box.send_keys("Write a long story about the sea.", Keys.ENTER)
    wait_for(d, f"const li = {LAST_ANSWER}; return li && li.querySelector('.content').textContent.length > 0",
             "the first piece")
    d.find_element(By.ID, "stop").click()
    wait_for(d, f"return {LAST_ANSWER}.dataset.state !== 'streaming'", "the stream to stop")
    assert d.execute_script(f"return {LAST_ANSWER}.dataset.state") == "stopped"
    assert "stopped" in d.execute_script(f"return {LAST_ANSWER}.querySelector('.stats').textContent")
    assert d.find_element(By.ID, "send").is_enabled() and not d.find_element(By.ID, "stop").is_enabled()
    set_field(d, "max-tokens", MAX_TOKENS)
    d.find_element(By.ID, "new-chat").click()
    text, _ = chat(d, PROMPT)
    assert text == api_answer(web_server, 0.0)
    assert console_errors(d) == []


def test_server_errors_are_shown(web_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, web_server)
    assert not d.find_element(By.ID, "error").is_displayed()
    # About 700 tokens: more than a 512-token slot, a typed 400 before any work.
    long_prompt = "exercise " * 700
    d.execute_script("document.getElementById('chat-input').value = arguments[0]", long_prompt)
    d.find_element(By.ID, "chat-input").send_keys(Keys.ENTER)
    wait_for(d, "return !document.getElementById('error').hidden", "the error to show")
    text = d.find_element(By.ID, "error-text").text
    assert text.startswith("exceed_context_size_error: the request (") and "512 tokens per slot" in text, text
    # The failed turn leaves the history and its text goes back into the box.
    assert d.execute_script(f"return {LAST_ANSWER}.dataset.state") == "error"
    assert d.execute_script("return document.getElementById('chat-input').value") == long_prompt
    assert d.find_element(By.ID, "send").is_enabled()
    d.find_element(By.ID, "error-close").click()
    assert not d.find_element(By.ID, "error").is_displayed()
    # The only console error is Chromium's own line about the 400 response.
    assert console_errors(d, allowed=("the server responded with a status of 400",)) == []
