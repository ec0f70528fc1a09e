"""Settings come from NETSYNTH_ variables, and .env.example documents every one."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    s = Settings()
    assert s.database_url == "sqlite:///./var/netsynth.db"
    assert s.blob_dir == Path("var/blobs")
    assert "var/broker" in s.broker_url


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NETSYNTH_DATABASE_URL", "postgresql+psycopg://u@h/db")
    monkeypatch.setenv("NETSYNTH_BLOB_DIR", "/srv/blobs")
    monkeypatch.setenv("NETSYNTH_MAX_UPLOAD_BYTES", "1000")
    monkeypatch.setenv("NETSYNTH_MIN_SAMPLES_PER_CLASS", "3")
    monkeypatch.setenv("DATABASE_URL", "sqlite:///ignored.db")  # unprefixed: not ours
    s = Settings()
    assert s.database_url == "postgresql+psycopg://u@h/db"
    assert s.blob_dir == Path("/srv/blobs")
    assert (s.max_upload_bytes, s.min_samples_per_class) == (1000, 3)


def test_invalid_values_are_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NETSYNTH_MAX_UPLOAD_BYTES", "0")
    with pytest.raises(ValidationError):
        Settings()


def test_dotenv_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("NETSYNTH_MAX_CLASSES=7\n")
    assert Settings().max_classes == 7


def test_env_example_documents_every_setting_with_its_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    documented = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.startswith("NETSYNTH_"):
            name, _, value = line.partition("=")
            documented[name.removeprefix("NETSYNTH_").lower()] = value
    assert set(documented) == set(Settings.model_fields)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text((ROOT / ".env.example").read_text())
    assert Settings() == Settings.model_construct()  # the example's values are the defaults


def test_the_compile_cache_is_on_by_default_under_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NETSYNTH_COMPILE_CACHE", raising=False)
    assert Settings().compile_cache == Path("var/jax-cache")
    monkeypatch.setenv("NETSYNTH_COMPILE_CACHE", "/srv/jax")
    assert Settings().compile_cache == Path("/srv/jax")


@pytest.mark.parametrize("value", ["", "off", "OFF", " off "])
def test_an_empty_or_off_compile_cache_turns_it_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("NETSYNTH_COMPILE_CACHE", value)
    assert Settings().compile_cache is None
