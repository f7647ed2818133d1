"""Drives the workbench of a running `lql serve` in headless Chromium (Selenium with
Debian's chromium and chromedriver) and checks that each page loads, that its main
interaction works, and that the values it shows equal the statements' results over
/v1/lql. Saves a screenshot of each page.

usage: workbench_check.py URL READ_ONLY_URL CORPUS SCREENSHOT_DIR
Prints one line per check and "N passed, M failed"; exits non-zero on a failure.
"""

import json
import os
import sys
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

URL, READ_ONLY_URL, CORPUS, SHOTS = sys.argv[1:5]
os.makedirs(SHOTS, exist_ok=True)
passed, failed = 0, 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def lql(statements, base=URL, session=None):
    """The statements' results over /v1/lql, as lists of row dicts."""
    headers = {"Content-Type": "application/json"}
    if session:
        headers["X-LQL-Session"] = session
    req = urllib.request.Request(base + "/v1/lql", data=json.dumps({"statements": statements}).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=600) as r:
        body = json.loads(r.read())
    return [[dict(zip(res["columns"], row)) for row in res["rows"]] for res in body["results"]]


def fmt(x):
    """The page's float format (render.js fmt): four significant digits."""
    if x == 0:
        return "0"
    a = abs(x)
    if 1e-3 <= a < 1e6:
        s = f"{x:.4g}"
        if "e" in s:
            s = repr(float(s))
        return s.rstrip("0").rstrip(".") if "." in s else s
    m, e = f"{x:.3e}".split("e")
    return f"{m}e{int(e):+d}"


def shown(t):
    return t.replace(" ", "·")


opts = webdriver.ChromeOptions()
opts.binary_location = os.environ.get("LQL_CHROMIUM", "/usr/bin/chromium")
for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000", "--disable-gpu"]:
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service(os.environ.get("LQL_CHROMEDRIVER", "/usr/bin/chromedriver")), options=opts)
wait = WebDriverWait(driver, 300)


def shot(name):
    driver.save_screenshot(os.path.join(SHOTS, name + ".png"))


def page_errors():
    try:
        # The console's deliberate error statement answers 400: not a page error.
        return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"
                and "/v1/lql - Failed to load resource: the server responded with a status of 400" not in e["message"]]
    except Exception:
        return []


try:
    # ---- console: run a statement; the table equals /v1/lql's rows -------------------
    driver.get(URL + "/")
    wait.until(EC.presence_of_element_located((By.ID, "statements")))
    statement = 'WALK "The capital of France is" TOP 3 LAYERS 20-22'
    box = driver.find_element(By.ID, "statements")
    box.clear()
    box.send_keys(statement)
    driver.find_element(By.ID, "run").click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#results table.result")))
    expected = lql(statement)[0]
    cells = driver.find_elements(By.CSS_SELECTOR, "#results table.result tbody tr")
    first = cells[0].find_elements(By.TAG_NAME, "td")
    header = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#results table.result thead th")]
    row = dict(zip(header, [c.get_attribute("textContent") for c in first]))
    check("console shows WALK's rows", len(cells) == len(expected) and row["feature"] == str(expected[0]["feature"])
          and row["top_token"] == expected[0]["top_token"] and float(first[header.index("gate")].get_attribute("title")) == expected[0]["gate"],
          f"{row} vs {expected[0]}")
    shot("console")
    # An error: its span is underlined.
    box.clear()
    box.send_keys("SELECT nope FROM features")
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    mark = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#results .error mark")))
    check("console underlines an error's span", mark.text == "nope", mark.text)
    shot("console-error")
    # EXPLAIN PLAN is drawn as a tree.
    box.clear()
    box.send_keys("EXPLAIN PLAN SELECT * FROM features WHERE layer = 3 LIMIT 2")
    driver.find_element(By.ID, "run").click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#results .tree")))
    nodes = driver.find_elements(By.CSS_SELECTOR, "#results .tree .node")
    plan = lql("EXPLAIN PLAN SELECT * FROM features WHERE layer = 3 LIMIT 2")[0]
    operators = [p for p in plan if not p["plan"].startswith("effects:")]
    check("console draws an EXPLAIN tree", len(nodes) == len(operators) and nodes[-1].text.startswith("TableScan"), [n.text for n in nodes])

    # ---- feature page, opened from a WALK row ---------------------------------------------
    box.clear()
    box.send_keys(statement)
    driver.find_element(By.ID, "run").click()
    link = wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "#results td[data-col=feature] a")))
    link.click()
    wait.until(EC.presence_of_element_located((By.ID, "top-token")))
    layer, feature = expected[0]["layer"], expected[0]["feature"]
    check("a WALK row opens its feature page", driver.current_url.endswith(f"/feature/{layer}:{feature}"), driver.current_url)
    f = lql(f"SELECT top_token, down_tokens, gate_tokens, up_tokens FROM features WHERE layer = {layer} AND feature = {feature}")[0][0]
    toks = lambda id_: [t.get_attribute("textContent") for t in driver.find_elements(By.CSS_SELECTOR, f"#{id_} .tok")]
    check("the feature page shows its labels", driver.find_element(By.ID, "top-token").text == shown(f["top_token"])
          and toks("down-tokens") == [shown(t) for t in f["down_tokens"]]
          and toks("gate-tokens") == [shown(t) for t in f["gate_tokens"]]
          and toks("up-tokens") == [shown(t) for t in f["up_tokens"]], (toks("down-tokens"), toks("gate-tokens"), toks("up-tokens"), f))
    # With corpus statistics: contexts and histogram.
    driver.get(f"{URL}/feature/{layer}:{feature}?corpus={urllib.parse.quote(CORPUS)}")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#contexts, #stats .error")))
    opened = driver.execute_script("const m = performance.getEntriesByName('lql:feature-ready'); return m.length ? m[0].startTime : null")
    q = f"corpus = '{CORPUS}' AND layer = {layer} AND feature = {feature}"
    ctx = lql(f"SELECT rank, activation, token FROM contexts WHERE {q} ORDER BY rank")[0]
    hist = lql(f"SELECT count FROM histograms WHERE {q} AND count > 0")[0]
    shown_ctx = driver.find_elements(By.CSS_SELECTOR, "#contexts .context")
    check("the feature page shows its top contexts", len(shown_ctx) == len(ctx) > 0
          and [float(c.get_attribute("data-activation")) for c in shown_ctx] == [c["activation"] for c in ctx]
          and shown_ctx[0].find_element(By.TAG_NAME, "mark").get_attribute("textContent") == ctx[0]["token"], (len(shown_ctx), len(ctx)))
    bars = driver.find_elements(By.CSS_SELECTOR, "#histogram rect")
    check("the feature page draws its histogram", len(bars) == len(hist), (len(bars), len(hist)))
    print(f"note: the feature page with corpus statistics was whole {opened:.0f} ms after navigation started")
    shot("feature")
    # A corpus without statistics: the page offers ANALYZE FEATURES and shows its progress.
    fresh = os.path.join(os.path.dirname(CORPUS), "fresh.txt")
    with open(CORPUS, encoding="utf-8") as src, open(fresh, "w", encoding="utf-8") as dst:
        dst.write("".join(src.readlines()[:40]))
    driver.get(f"{URL}/feature/{layer}:{feature}?corpus={urllib.parse.quote(fresh)}")
    wait.until(EC.element_to_be_clickable((By.ID, "analyze"))).click()
    bar = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#analyze-progress progress")))
    reported = WebDriverWait(driver, 120).until(
        lambda d: d.find_elements(By.ID, "contexts") or (float(bar.get_attribute("value") or 0) > 0 and bar.get_attribute("value")))
    shot("feature-analyzing")
    wait.until(EC.presence_of_element_located((By.ID, "contexts")))
    check("the feature page runs ANALYZE FEATURES with a progress bar, then shows the contexts",
          reported is not None and lql(f"SELECT count(*) AS n FROM contexts WHERE corpus = '{fresh}' AND layer = {layer} AND feature = {feature}")[0][0]["n"] > 0,
          reported)

    # ---- trace: heat map hover equals TRACE's row ---------------------------------------------
    prompt = "The capital of France is"
    driver.get(f"{URL}/trace?prompt={urllib.parse.quote(prompt)}")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#lens td.cell")))
    lens = lql(f'TRACE "{prompt}" POSITIONS ALL')[0]
    cell = driver.find_element(By.CSS_SELECTOR, "#lens td.cell[data-layer='20'][data-position='3']")
    ActionChains(driver).move_to_element(cell).perform()
    readout = driver.find_element(By.ID, "readout").text
    want = next(r for r in lens if r["layer"] == 20 and r["position"] == 3)
    check("hovering a heat-map cell shows its token and probability",
          f"→ {shown(want['top_token'])}  p={fmt(want['top_prob'])}" in readout.replace("\u00a0", " ") or
          (shown(want["top_token"]) in readout and fmt(want["top_prob"]) in readout), f"{readout!r} vs {want}")
    n_cells = len(driver.find_elements(By.CSS_SELECTOR, "#lens td.cell[data-layer]"))
    check("the heat map has a cell per stage and position", n_cells == len(lens), (n_cells, len(lens)))
    steps = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".waterfall rect"))
    answer = lql(f'INFER "{prompt}" TOP 1')[0][0]
    contrib = lql(f'TRACE "{prompt}" FOR "{answer["token"]}"')[0]
    total = sum(float(s.get_attribute("data-value")) for s in steps)
    check("the waterfall adds up to the token's logit", len(steps) == 2 * (len(contrib) - 1) + 1 and abs(total - answer["logit"]) < 1e-3,
          (len(steps), total, answer["logit"]))
    shot("trace")

    # ---- attention: head scores and patterns ---------------------------------------------------
    prompt = "When Mary and John went to the store, John gave a drink to"
    driver.get(f"{URL}/attention?prompt={urllib.parse.quote(prompt)}&layer=3&score=prev_token")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#patterns canvas")))
    heads = lql(f"SELECT layer, head, prev_token FROM heads WHERE prompt = '{prompt}'")[0]
    want = next(h for h in heads if h["layer"] == 3 and h["head"] == 2)
    got = driver.find_element(By.CSS_SELECTOR, "#head-scores td[data-layer='3'][data-head='2']").get_attribute("data-value")
    n_heads = len({h["head"] for h in heads if h["head"] is not None})
    check("the attention view shows head scores and a pattern per head",
          float(got) == want["prev_token"] and len(driver.find_elements(By.CSS_SELECTOR, "#patterns canvas")) == n_heads, (got, want))
    shot("attention")

    # ---- edit: insert a fact, INFER changes; remove it -----------------------------------------
    driver.get(URL + "/edit")
    patch_file = os.path.join(os.path.dirname(CORPUS), "edit.lqlpatch")
    field = wait.until(EC.presence_of_element_located((By.ID, "patch-file")))
    field.clear()
    field.send_keys(patch_file)
    driver.find_element(By.ID, "begin").click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#edit-result table.result")))
    wait.until(EC.element_to_be_clickable((By.ID, "insert"))).click()
    table = wait.until(EC.presence_of_element_located((By.ID, "edit-compare")))
    session = driver.execute_script("return sessionStorage.getItem('lql.session')")
    edit_prompt = driver.find_element(By.ID, "edit-prompt").get_attribute("value")
    first_row = table.find_element(By.CSS_SELECTOR, "tbody tr")
    before, after = first_row.find_element(By.CSS_SELECTOR, ".before").text, first_row.find_element(By.CSS_SELECTOR, ".after").text
    now = lql(f'INFER "{edit_prompt}" TOP 1', session=session)[0][0]
    base = lql(f'INFER "{edit_prompt}" TOP 1')[0][0]
    check("inserting a fact changes INFER, as the session's INFER says",
          after.startswith(shown(now["token"])) and before.startswith(shown(base["token"])) and now["token"] != base["token"], (before, after, now, base))
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#edges table.result tbody tr")))
    shot("edit")
    wait.until(EC.element_to_be_clickable((By.ID, "save"))).click()
    WebDriverWait(driver, 60).until(lambda d: "SAVE PATCH" in d.find_element(By.ID, "edit-result").text and d.find_elements(By.CSS_SELECTOR, "#edit-result table.result"))
    check("the recorded edit is saved as a patch file", os.path.getsize(patch_file) > 0 if os.path.exists(patch_file) else False, patch_file)
    wait.until(EC.element_to_be_clickable((By.ID, "remove"))).click()
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#edges table.result") and not d.find_elements(By.CSS_SELECTOR, "#edges table.result tbody tr"))
    check("removing the session's edits restores INFER", lql(f'INFER "{edit_prompt}" TOP 1', session=session)[0][0]["token"] == base["token"])

    # ---- theme and keyboard ---------------------------------------------------------------------
    driver.get(URL + "/")
    wait.until(EC.presence_of_element_located((By.ID, "statements")))
    was = driver.execute_script("return document.documentElement.dataset.theme")
    driver.find_element(By.TAG_NAME, "body").send_keys("t")
    now_theme = driver.execute_script("return document.documentElement.dataset.theme")
    driver.find_element(By.TAG_NAME, "body").send_keys("3")
    check("T switches the theme and 3 opens the trace view", was != now_theme and driver.current_url.endswith("/trace"), (was, now_theme, driver.current_url))
    shot("trace-" + now_theme)

    # ---- read-only server: the edit panel says why ------------------------------------------------
    driver.get(READ_ONLY_URL + "/edit")
    notice = wait.until(EC.presence_of_element_located((By.ID, "read-only")))
    check("under --read-only the edit panel says why and is off", "--read-only" in notice.text
          and not driver.find_element(By.ID, "insert").is_enabled(), notice.text)
    shot("edit-read-only")
    errors = page_errors()
    check("no page logged a browser error", not errors, errors)
finally:
    driver.quit()

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
