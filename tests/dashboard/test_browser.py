"""The dashboard in real Chromium against the real server and a real Celery worker: sign in (a wrong key first),
upload a refused file and then digits, start a 60 s job and watch it live, open its model, download the ONNX model,
predict in the try-it box, compare, manage API keys, sign out. Every page is saved as a screenshot."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from playwright.sync_api import Browser, Locator, Page, expect

from infra.settings import Settings
from tests.dashboard.conftest import Console, screenshot
from tests.datasets import png_bytes
from tests.workers.conftest import Digits, make_keys
from tests.workers.service import ApiServer, WorkerProcess

V1 = "/api/v1"
BUDGET = 60
JOB_END_S = 420  # the worker shares two cores with the browser and the server: compilation dominates a 60 s job
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _key(auth: dict[str, str]) -> str:
    return auth["Authorization"].removeprefix("Bearer ")


def _nav(page: Page, name: str) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True).click()


def _tab_to(page: Page, target: Locator, most: int = 12) -> None:
    """Press Tab until `target` has the focus (AssertionError if it never gets it)."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if target.evaluate("element => element === document.activeElement"):
            return
    raise AssertionError(f"{target} is not reachable with Tab")


def _sign_in(page: Page, url: str, key: str) -> None:
    """A wrong key is refused in words; the right one, typed and sent from the keyboard alone, opens the dashboard
    and is kept nowhere in the page."""
    page.goto(url)
    page.get_by_label("API key").fill("ns_not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text(re.compile(r"key", re.I))
    screenshot(page, "sign-in-wrong-key")
    page.get_by_label("API key").fill("")
    page.locator("body").focus()
    _tab_to(page, page.get_by_label("API key"))
    page.keyboard.type(key)
    _tab_to(page, page.get_by_role("button", name="Sign in"))
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    stored = page.evaluate("() => JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie])")
    assert key not in stored
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "netsynth_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    _tab_to(page, page.get_by_role("link", name="Datasets", exact=True))  # the header, from the keyboard too
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/datasets$"))


def _upload(page: Page, bad: Path, good: Path) -> str:
    """A file that is not a dataset shows the server's reason; digits upload and show their profile."""
    page.get_by_label("Dataset file").set_input_files(str(bad))
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_role("alert")).to_contain_text(re.compile(r"zip|archive|dataset", re.I))
    screenshot(page, "datasets-refused")
    page.get_by_label("Dataset file").set_input_files(str(good))
    page.get_by_role("button", name="Upload").click()
    page.wait_for_url(re.compile(rf"/datasets/{UUID}$"), timeout=60_000)
    thumbnails = page.locator("img[src*='/samples/']")
    expect(thumbnails.first).to_be_visible()
    page.wait_for_function("() => [...document.querySelectorAll(\"img[src*='/samples/']\")]"
                           ".every(img => img.complete && img.naturalWidth > 0)")
    expect(page.locator("canvas").first).to_be_visible()  # the class histogram
    screenshot(page, "dataset-profile")
    dataset_id = page.url.rsplit("/", 1)[1]
    return dataset_id


def _start_job(page: Page, dataset_id: str) -> str:
    _nav(page, "New job")
    page.get_by_label("Dataset", exact=True).select_option(dataset_id)
    page.get_by_label("Budget", exact=True).fill(str(BUDGET))
    screenshot(page, "new-job")
    page.get_by_role("button", name="Start job").click()
    page.wait_for_url(re.compile(rf"/jobs/{UUID}$"))
    return page.url.rsplit("/", 1)[1]


def _watch(page: Page, client: httpx.Client, auth: dict[str, str], job_id: str) -> None:
    """Candidates arrive live, while the job still runs and without a reload, and the job ends succeeded."""
    rows = page.get_by_role("table").locator("tbody tr")
    trained = rows.filter(has=page.locator("td:first-child", has_text=re.compile(r"^\d+$")))
    expect(trained.first).to_be_visible(timeout=JOB_END_S * 1000)
    state = client.get(f"{V1}/jobs/{job_id}", headers=auth).json()["state"]
    assert state == "running", f"the first candidate showed only once the job was {state}"
    screenshot(page, "job-live")
    expect(page.get_by_text(re.compile(r"^succeeded$", re.I)).first).to_be_visible(timeout=JOB_END_S * 1000)
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
    count = trained.count()
    page.get_by_label("Filter candidates").fill("no-such-architecture")
    expect(trained).to_have_count(0)
    page.get_by_label("Filter candidates").fill("")
    expect(trained).to_have_count(count)
    screenshot(page, "job-done")


def _model(page: Page, client: httpx.Client, auth: dict[str, str], model_id: str, digits: Digits,
           tmp: Path) -> None:
    """The model page: the ONNX download is the API's, and the try-it box predicts as the API does."""
    page.goto(page.url.split("/jobs/")[0] + f"/models/{model_id}")
    expect(page.get_by_role("link", name="Download native")).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("link", name="Download ONNX").click()
    onnx = client.get(f"{V1}/models/{model_id}/download", params={"format": "onnx"}, headers=auth).content
    assert Path(download.value.path()).read_bytes() == onnx
    image = tmp / "digit.png"
    image.write_bytes(png_bytes(digits.x_test[0]))
    with image.open("rb") as f:
        r = client.post(f"{V1}/models/{model_id}/predict", headers=auth, files=[("files", ("digit.png", f))])
    label = r.json()["predictions"][0]["label"]
    page.get_by_label("Image").set_input_files(str(image))
    page.get_by_role("button", name="Predict").click()
    expect(page.get_by_text(re.compile(r"^Predicted:"))).to_contain_text(f"Predicted: {label} (")
    screenshot(page, "model")


def test_dashboard_upload_to_prediction(pg_redis_settings: Settings, digits: Digits,
                                        worker_factory: list[WorkerProcess], browser: Browser, tmp_path: Path) -> None:
    settings = pg_redis_settings
    keys = make_keys(settings.database_url)
    worker_factory.append(WorkerProcess(settings, settings.blob_dir.parent / "worker.log").wait_ready())
    bad = tmp_path / "notes.zip"
    bad.write_bytes(b"these are notes, not a zip archive")
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        page = context.new_page()
        console = Console(page)
        _sign_in(page, api.url, _key(keys.alice))
        dataset_id = _upload(page, bad, digits.zip_path)
        job_id = _start_job(page, dataset_id)
        _watch(page, client, keys.alice, job_id)
        job = client.get(f"{V1}/jobs/{job_id}", headers=keys.alice).json()
        assert job["state"] == "succeeded", job
        _model(page, client, keys.alice, job["model_ids"][0], digits, tmp_path)

        page.set_viewport_size({"width": 360, "height": 800})
        for path, shown in ((f"/jobs/{job_id}", "Cancel"), (f"/models/{job['model_ids'][0]}", "Predict"),
                            (f"/datasets/{dataset_id}", "Delete"), ("/jobs/new", "Start job"),
                            ("/datasets", "Upload"), ("/keys", "Create key"), ("/jobs", "Sign out")):
            page.goto(api.url + path)
            expect(page.get_by_role("button", name=shown, exact=True)).to_be_visible()
            overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{path} is {overflow} px wider than a 360 px window"
            if path.startswith("/jobs/") and path != "/jobs/new":
                screenshot(page, "job-narrow")
        page.set_viewport_size({"width": 1280, "height": 900})

        dark = browser.new_context(color_scheme="dark", viewport={"width": 1280, "height": 900})
        assert dark.request.post(f"{api.url}{V1}/session", data={"api_key": _key(keys.alice)}).ok
        dark_page = dark.new_page()
        dark_console = Console(dark_page)
        dark_page.goto(f"{api.url}/models/{job['model_ids'][0]}")
        expect(dark_page.get_by_role("link", name="Download ONNX")).to_be_visible()
        background = dark_page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert sum(map(int, re.findall(r"\d+", background)[:3])) < 3 * 96, background  # a dark page, not a light one
        screenshot(dark_page, "model-dark")
        assert dark_console.errors == [], dark_console.errors
        dark.close()

        other = client.post(f"{V1}/jobs", headers=keys.alice, json={"dataset_id": dataset_id, "budget": 30}).json()
        assert client.post(f"{V1}/jobs/{other['id']}/cancel", headers=keys.alice).status_code == 200
        _nav(page, "Compare")
        for chosen in (job_id, other["id"]):
            box = page.get_by_role("checkbox", name=re.compile(f"Job {chosen[:8]}"))
            box.click()  # the choice lives in the address, which the router updates in a transition
            expect(box).to_be_checked()
        compared = page.get_by_role("table").locator("thead th")
        expect(compared).to_have_count(3)  # the figures' names and one column per job
        expect(page.locator("canvas").first).to_be_visible()
        screenshot(page, "compare")
        _nav(page, "API keys")
        page.get_by_label("Key name").fill("laptop")
        page.get_by_role("button", name="Create key").click()
        secret = page.locator(".secret-value").inner_text()
        assert client.get(f"{V1}/me", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
        screenshot(page, "api-keys")

        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_label("API key")).to_be_visible()
        assert page.request.get(f"{api.url}{V1}/session").status == 401
        assert console.errors == [], console.errors
        context.close()
