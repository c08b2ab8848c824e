"""Settings: the login secret, the profile relays, the connection and export limits."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tms.config import DEFAULT_PROFILE_RELAYS, Settings, load_log_key, load_secret
from tms.errors import ConfigError
from tms.pages.security import content_security_policy


def test_the_secret_is_generated_once_into_the_data_directory(tmp_path: Path) -> None:
    settings = Settings.from_env({"TMS_DATA_DIR": str(tmp_path / "data")})
    secret, said = load_secret(settings)
    path = tmp_path / "data" / "secret"
    assert said is not None and said.startswith(
        f"TMS_SECRET is unset: generated the login secret into {path}; it is kept there"
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_secret(settings) == (secret, None)  # kept, and nothing more to say


def test_an_external_database_keeps_both_secrets_in_the_data_directory_from_the_first_start(
    tmp_path: Path,
) -> None:
    """One rule for the login secret and the log key, whatever the database: unset, each is
    generated into TMS_DATA_DIR (made if need be) at the first start, which says so once, and
    the same one is used at every later start, which says nothing. (A first start used to sign
    logins with a secret that lasted one process while the log key made the directory, which
    later starts then kept silently.)"""
    env = {"TMS_DATA_DIR": str(tmp_path / "absent"), "TMS_DATABASE_URL": "postgresql://db/tms"}
    settings = Settings.from_env(env)
    secret, said_secret = load_secret(settings)
    signer, said_key = load_log_key(settings)
    assert said_secret is not None and str(tmp_path / "absent" / "secret") in said_secret
    assert said_key is not None and str(tmp_path / "absent" / "log-key") in said_key
    again = Settings.from_env(env)
    assert load_secret(again) == (secret, None)
    kept, said = load_log_key(again)
    assert said is None and kept.key.encode() == signer.key.encode()
    assert {p.name for p in (tmp_path / "absent").iterdir()} == {"secret", "log-key"}


def test_a_set_secret_is_used_and_a_short_one_refused(tmp_path: Path) -> None:
    env = {"TMS_DATA_DIR": str(tmp_path), "TMS_SECRET": "s" * 32}
    assert load_secret(Settings.from_env(env)) == (b"s" * 32, None)
    with pytest.raises(ConfigError, match="at least 32 characters"):
        Settings.from_env({**env, "TMS_SECRET": "short"})


def test_profile_relays_are_websocket_origins() -> None:
    assert Settings.from_env({}).profile_relays == DEFAULT_PROFILE_RELAYS
    relays = Settings.from_env({"TMS_PROFILE_RELAYS": "wss://a.example/, ws://127.0.0.1:7000"})
    assert relays.profile_relays == ("wss://a.example", "ws://127.0.0.1:7000")
    # set but empty: none, so the pages contact no other origin
    for empty in ("", " ", ","):
        assert Settings.from_env({"TMS_PROFILE_RELAYS": empty}).profile_relays == ()
    policy = content_security_policy(Settings.from_env({"TMS_PROFILE_RELAYS": ""}).profile_relays)
    assert "wss:" not in policy and "connect-src 'self';" in policy
    for bad in ("https://a.example", "wss://a.example; script-src *", "wss://a b"):
        with pytest.raises(ConfigError, match="TMS_PROFILE_RELAYS"):
            Settings.from_env({"TMS_PROFILE_RELAYS": bad})


def test_the_connection_and_export_limits_are_read_and_checked() -> None:
    from tms.http.protocol import ConnectionLimits

    defaults = Settings.from_env({})
    assert (defaults.max_connections_per_address, defaults.body_min_rate) == (64, 1024)
    assert ConnectionLimits.of(defaults).max_connections == 10_000
    assert ConnectionLimits.of(defaults).websockets == 9_000  # a tenth is kept for HTTP
    reserved = Settings.from_env({"TMS_MAX_CONNECTIONS": "2000", "TMS_HTTP_RESERVE": "500"})
    assert ConnectionLimits.of(reserved).websockets == 1_500
    assert defaults.max_exports == 2
    tuned = Settings.from_env(
        {
            "TMS_MAX_CONNECTIONS_PER_ADDRESS": "8",
            "TMS_BODY_MIN_RATE": "0",
            "TMS_MAX_EXPORTS": "5",
            "TMS_TRUSTED_PROXIES": "10.0.0.0/8",
        }
    )
    limits = ConnectionLimits.of(tuned)
    assert (limits.per_address, limits.body_min_rate) == (8, 0)
    assert [str(n) for n in limits.uncapped] == ["10.0.0.0/8"]  # the proxy's clients are many
    assert tuned.max_exports == 5
    for name, value in (
        ("TMS_MAX_CONNECTIONS_PER_ADDRESS", "0"),
        ("TMS_MAX_CONNECTIONS_PER_ADDRESS", "2.5"),
        ("TMS_BODY_MIN_RATE", "-1"),
        ("TMS_HTTP_RESERVE", "0"),
        ("TMS_HTTP_RESERVE", "6000"),  # over half the cap: the sockets would have too little
        ("TMS_MAX_EXPORTS", "0"),
        ("TMS_MAX_EXPORTS", "many"),
    ):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: value})


def test_the_plugin_settings() -> None:
    defaults = Settings.from_env({})
    assert defaults.plugins == () and defaults.strfry_command is None
    assert (defaults.plugin_seconds, defaults.hook_seconds, defaults.hook_queue) == (5, 30, 1000)
    assert defaults.strfry_seconds == 10
    tuned = Settings.from_env(
        {
            "TMS_PLUGINS": " notify, allowlist ,strfry,",
            "TMS_STRFRY_COMMAND": " ./policy.js ",
            "TMS_PLUGIN_TIMEOUT_SECONDS": "0.5",
            "TMS_HOOK_QUEUE": "10",
        }
    )
    assert tuned.plugins == ("notify", "allowlist", "strfry")
    assert (tuned.strfry_command, tuned.plugin_seconds, tuned.hook_queue) == (
        "./policy.js",
        0.5,
        10,
    )
    for bad, message in [
        ({"TMS_PLUGINS": "a,a"}, "TMS_PLUGINS names the plugin 'a' twice"),
        ({"TMS_PLUGINS": "Notify"}, "TMS_PLUGINS must be comma-separated plugin names"),
        ({"TMS_STRFRY_COMMAND": "cat"}, "TMS_STRFRY_COMMAND is set but TMS_PLUGINS does not name"),
        ({"TMS_HOOK_QUEUE": "0"}, "TMS_HOOK_QUEUE must be a whole number from 1"),
        ({"TMS_STRFRY_TIMEOUT_SECONDS": "x"}, "TMS_STRFRY_TIMEOUT_SECONDS must be seconds"),
    ]:
        with pytest.raises(ConfigError, match=message):
            Settings.from_env(bad)
