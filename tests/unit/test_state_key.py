"""app/serving/state_key.py: MCP_SHIM_STATE_KEY handed from process to process by a
pipe, and the bound that keeps that pipe's single write from blocking."""

from __future__ import annotations

import base64
import os

import pytest

from app.config import SettingsError
from app.serving import state_key
from app.settings.load import load_settings
from app.settings.rules import STATE_KEY_MAX_CHARS

KEY = base64.b64encode(b"k" * 32).decode("ascii")


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_a_key_handed_over_is_read_once_and_its_descriptor_closed() -> None:
    fd = state_key.hand_over(f"{KEY},{KEY}")
    assert not os.get_inheritable(fd)  # only where it is passed on purpose
    assert state_key.take(fd) == f"{KEY},{KEY}"
    assert _closed(fd)  # nothing started afterwards inherits it


def test_the_longest_key_list_is_handed_over_whole() -> None:
    text = ",".join([KEY] * (STATE_KEY_MAX_CHARS // (len(KEY) + 1)))
    assert state_key.take(state_key.hand_over(text)) == text


def test_a_longer_one_is_refused_naming_the_setting() -> None:
    with pytest.raises(SettingsError, match="MCP_SHIM_STATE_KEY: longer than 4096"):
        state_key.hand_over("A" * (STATE_KEY_MAX_CHARS + 1))


def test_a_bad_descriptor_is_a_settings_error_naming_the_key() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    os.close(write_fd)
    with pytest.raises(SettingsError, match="MCP_SHIM_STATE_KEY: the key could not be read"):
        state_key.take(read_fd)


def test_the_key_handed_over_is_validated_like_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:3001/mcp")
    monkeypatch.delenv("MCP_SHIM_STATE_KEY", raising=False)
    settings = load_settings(state_key=KEY)
    assert settings.state_key is not None and settings.state_key.get_secret_value() == KEY
    with pytest.raises(SettingsError, match="MCP_SHIM_STATE_KEY"):
        load_settings(state_key="not base64!")
    monkeypatch.setenv("MCP_SHIM_STATE_KEY", ",".join([KEY] * 100))
    with pytest.raises(SettingsError, match=r"MCP_SHIM_STATE_KEY: .*longer than 4096 characters"):
        load_settings()
